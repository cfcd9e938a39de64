"""The syllabus tables of the teachers' part, generated from the chapters and the course plan.

The weeks and the labs' hours come from :mod:`mlsys.plan` (the one place the landing page reads
too); everything else is measured from the chapter sources (``chapters/NN_*.md``) when the page builds:

* learning objectives: the bullets of each chapter's ``Learning objectives`` admonition;
* reading minutes = words / 120 + 1.5 x figures + 0.1 x visible code lines (the rates of
  :mod:`mlsys.book.readability`: a careful first read at 120 words a minute, 1.5 minutes a figure,
  6 s a line of code), where words are the prose outside code cells and collapsed solutions, figures
  are code cells with a ``figure`` option plus figure directives, and visible code lines are the lines
  of code cells not tagged ``remove-*`` or ``hide-*``;
* exercise minutes = 8 x the numbered items under ``## Exercises`` (the review's 8 minutes each).

A lab that spans several weeks has its hours split evenly over them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .. import plan
from .readability import MINUTES_PER_CODE_LINE, MINUTES_PER_FIGURE, WORDS_PER_MINUTE

__all__ = ["MINUTES_PER_EXERCISE", "Chapter", "chapter", "week_rows", "hours_table", "objectives_markdown"]

MINUTES_PER_EXERCISE = 8
_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.S | re.M)
_DROPDOWN = re.compile(r"^(:::+|```+)\{dropdown\}.*?^\1\s*$", re.S | re.M)
_HIDDEN = ("remove-cell", "remove-input", "hide-input", "hide-cell")
_WORD = re.compile(r"\S*[A-Za-z0-9]\S*")


@dataclass(frozen=True)
class Chapter:
    """What the syllabus needs of one chapter, measured from its source."""
    path: str                 # chapters/NN_name (no suffix), as _toc.yml names it
    title: str
    objectives: tuple[str, ...]
    words: int
    figures: int
    code_lines: int
    exercises: int

    @property
    def reading_minutes(self) -> float:
        return (self.words / WORDS_PER_MINUTE + self.figures * MINUTES_PER_FIGURE
                + self.code_lines * MINUTES_PER_CODE_LINE)

    @property
    def exercise_minutes(self) -> float:
        return self.exercises * MINUTES_PER_EXERCISE


def _objectives(text: str) -> tuple[str, ...]:
    m = re.search(r"^(:::+|```+)\{admonition\} Learning objectives\n(.*?)^\1\s*$", text, re.S | re.M)
    if not m:
        return ()
    items: list[str] = []
    for line in m.group(2).splitlines():
        if line.startswith("- "):
            items.append(line[2:].strip())
        elif items and line.startswith("  ") and line.strip():
            items[-1] += " " + line.strip()
    return tuple(i.rstrip(";.") for i in items)


def _code_stats(text: str) -> tuple[int, int]:
    figures = len(re.findall(r"^```\{(?:figure|glue:figure)\}", text, re.M))
    lines = 0
    for cell in _CELL.findall(text):
        head = cell.split("\n\n", 1)[0] if cell.startswith((":", "---")) else ""
        figures += bool(re.search(r"^\s*figure:", head, re.M))
        if not any(t in head for t in _HIDDEN):
            body = cell[len(head):]
            lines += sum(1 for ln in body.splitlines() if ln.strip() and not ln.lstrip().startswith(":"))
    return figures, lines


def _prose_words(text: str) -> int:
    text = _DROPDOWN.sub("", _CELL.sub("", text))
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    lines = [ln for ln in text.splitlines() if not re.match(r"\s*(:::|```|:[a-z-]+:|\()", ln)]
    return len(_WORD.findall("\n".join(lines)))


def _exercises(text: str) -> int:
    m = re.search(r"^## Exercises\s*\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    body = _DROPDOWN.sub("", _CELL.sub("", m.group(1))) if m else ""
    return len(re.findall(r"^(?:\d+\. |\*\*Exercise \d+)", body, re.M))


def chapter(path: str, root: Path | None = None) -> Chapter:
    """Measure ``chapters/NN_name`` (see the module docstring)."""
    root = root or Path(__file__).resolve().parents[2]
    text = (root / f"{path}.md").read_text(encoding="utf-8")
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)  # the jupytext header
    title = re.search(r"^# (.+)$", text, re.M)
    if not title:
        raise ValueError(f"{path}.md has no '# ' title")
    figures, code_lines = _code_stats(text)
    return Chapter(path, title.group(1).strip(), _objectives(text), _prose_words(text), figures, code_lines,
                   _exercises(text))


def _lab_weeks(weeks: tuple[plan.Week, ...]) -> dict[str, int]:
    count: dict[str, int] = {}
    for w in weeks:
        if w.lab:
            count[w.lab] = count.get(w.lab, 0) + 1
    return count


def week_rows(weeks: tuple[plan.Week, ...], root: Path | None = None) -> list[dict]:
    """One dict per week: chapters (measured), lab, reading/exercise hours, lab hours (low, high), total (low, high)."""
    spread = _lab_weeks(weeks)
    rows = []
    for n, w in enumerate(weeks, 1):
        chs = [chapter(plan.chapter_file(s), root) for s in w.chapters]
        read = sum(c.reading_minutes for c in chs) / 60
        ex = sum(c.exercise_minutes for c in chs) / 60
        lab = plan.lab(w.lab) if w.lab else None
        lab_h = (lab.hours[0] / spread[w.lab], lab.hours[1] / spread[w.lab]) if lab else (0.0, 0.0)
        rows.append({"week": n, "chapters": chs, "lab": lab, "reading_h": read, "exercise_h": ex, "lab_h": lab_h,
                     "total_h": (read + ex + lab_h[0], read + ex + lab_h[1])})
    return rows


def _h(x: float) -> str:
    return f"{x:.1f}"


def _range(lo: float, hi: float) -> str:
    return "0" if hi == 0 else f"{lo:.1f}" if abs(hi - lo) < 0.05 else f"{lo:.1f}-{hi:.1f}"


def _doc(c: Chapter) -> str:
    return f"{{doc}}`{c.title.replace('`', '')} <../{c.path}>`"


def hours_table(weeks: tuple[plan.Week, ...], root: Path | None = None) -> str:
    """A Markdown table: week, reading (linked chapters), lab, and the learner hours of each part."""
    rows = week_rows(weeks, root)
    out = ["| week | read | lab | reading (h) | exercises (h) | lab (h) | total (h) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        read = "; ".join(_doc(c) for c in r["chapters"]) or "(lab week)"
        lab = f"Lab: {r['lab'].title}" if r["lab"] else ""
        out.append(f"| {r['week']} | {read} | {lab} | {_h(r['reading_h'])} | {_h(r['exercise_h'])} | "
                   f"{_range(*r['lab_h'])} | {_range(*r['total_h'])} |")
    lo = sum(r["total_h"][0] for r in rows)
    hi = sum(r["total_h"][1] for r in rows)
    out.append(f"| **all** | | | {_h(sum(r['reading_h'] for r in rows))} | {_h(sum(r['exercise_h'] for r in rows))} | "
               f"{_range(sum(r['lab_h'][0] for r in rows), sum(r['lab_h'][1] for r in rows))} | **{_range(lo, hi)}** |")
    return "\n".join(out)


def objectives_markdown(weeks: tuple[plan.Week, ...], root: Path | None = None) -> str:
    """What each week teaches: its chapters' learning objectives, exercises and lab, as Markdown."""
    parts = []
    for r in week_rows(weeks, root):
        lines = [f"**Week {r['week']}.**"]
        for c in r["chapters"]:
            lines.append(f"- {_doc(c)} ({c.exercises} exercises, at the chapter's end): after it a learner can")
            lines.extend(f"  - {o}" for o in c.objectives)
        if r["lab"]:
            lab = r["lab"]
            lines.append(f"- Lab {lab.title} (`{lab.folder}`, {lab.hours[0]:g}-{lab.hours[1]:g} h in all): {lab.builds}.")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)
