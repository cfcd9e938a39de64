"""Rubrics for the labs' written answers: data in ``labs/rubrics/<lab>.yml``, checked against the labs.

A written answer is an nbgrader cell with ``"grade": true, "solution": true`` in its metadata (the
teacher grades it by hand in formgrader). Each such cell has one rubric entry::

    cells:
      <grade_id>:
        question: what the cell asks, in one line
        points: P               # must equal the cell's nbgrader "points"
        criteria: [{points: p_i, earns: what earns them}, ...]     # sum of p_i = P
        full_credit: an answer worth P points
        partial_credit: {points: p, example: an answer worth p}    # 0 < p < P
        zero: what earns nothing

:func:`check` lists every disagreement between the rubrics and the instructor notebooks (a missing
rubric, a rubric for no cell, points that differ); :func:`markdown` renders one lab's rubric for the
book and for the grader's screen (``python -m mlsys.grader.rubrics [LAB...]``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlsys.runtime.paths import labs_root

__all__ = ["Criterion", "Rubric", "manual_cells", "load", "check", "markdown", "main"]


@dataclass(frozen=True)
class Criterion:
    points: float
    earns: str


@dataclass(frozen=True)
class Rubric:
    """One written answer's rubric; ``points`` in nbgrader points."""
    lab: str
    grade_id: str
    question: str
    points: float
    criteria: tuple[Criterion, ...]
    full_credit: str
    partial_points: float
    partial_example: str
    zero: str


def manual_cells(notebook: Path) -> dict[str, float]:
    """``{grade_id: points}`` of the manually graded answer cells (grade and solution, not a test) of a notebook."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    out: dict[str, float] = {}
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and meta.get("solution"):
            out[str(meta["grade_id"])] = float(meta.get("points", 0))
    return out


def _need(entry: dict[str, Any], key: str, where: str) -> Any:
    if key not in entry:
        raise ValueError(f"{where}: missing '{key}' (expected question, points, criteria, full_credit, "
                         "partial_credit, zero)")
    return entry[key]


def _rubric(lab: str, grade_id: str, entry: dict[str, Any]) -> Rubric:
    where = f"labs/rubrics/{lab}.yml, cell {grade_id}"
    crit = tuple(Criterion(float(c["points"]), str(c["earns"]).strip()) for c in _need(entry, "criteria", where))
    partial = _need(entry, "partial_credit", where)
    return Rubric(lab=lab, grade_id=grade_id, question=str(_need(entry, "question", where)),
                  points=float(_need(entry, "points", where)), criteria=crit,
                  full_credit=str(_need(entry, "full_credit", where)).strip(),
                  partial_points=float(partial["points"]), partial_example=str(partial["example"]).strip(),
                  zero=str(_need(entry, "zero", where)).strip())


def load(lab: str, root: Path | None = None) -> list[Rubric]:
    """The rubrics of ``lab`` from ``<root>/rubrics/<lab>.yml`` (root: the course's ``labs/``)."""
    path = (root or labs_root()) / "rubrics" / f"{lab}.yml"
    if not path.is_file():
        raise FileNotFoundError(f"no rubric file {path}: every lab with written answers needs one")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if data.get("lab") != lab:
        raise ValueError(f"{path}: 'lab' is {data.get('lab')!r}, expected {lab!r}")
    return [_rubric(lab, gid, entry) for gid, entry in (data.get("cells") or {}).items()]


def _problems(r: Rubric) -> list[str]:
    at = f"{r.lab}/{r.grade_id}"
    out = []
    if abs(sum(c.points for c in r.criteria) - r.points) > 1e-9:
        out.append(f"{at}: criteria add up to {sum(c.points for c in r.criteria):g}, not the rubric's {r.points:g}")
    if not 0 < r.partial_points < r.points:
        out.append(f"{at}: partial credit {r.partial_points:g} is not between 0 and {r.points:g}")
    return out


def check(root: Path | None = None) -> list[str]:
    """Every disagreement between ``labs/rubrics/*.yml`` and the manual cells of ``labs/source/*/*.ipynb``."""
    root = root or labs_root()
    problems: list[str] = []
    for nb in sorted((root / "source").glob("*/*.ipynb")):
        lab = nb.parent.name
        cells = manual_cells(nb)
        if not cells:
            continue
        try:
            rubrics = {r.grade_id: r for r in load(lab, root)}
        except (FileNotFoundError, ValueError) as e:
            problems.append(str(e))
            continue
        for gid, pts in cells.items():
            r = rubrics.get(gid)
            if r is None:
                problems.append(f"{lab}/{gid}: a written answer ({pts:g} points) with no rubric")
            elif abs(r.points - pts) > 1e-9:
                problems.append(f"{lab}/{gid}: rubric gives {r.points:g} points, the notebook {pts:g}")
            else:
                problems.extend(_problems(r))
        problems.extend(f"{lab}/{gid}: a rubric for no written answer of the lab" for gid in rubrics if gid not in cells)
    return problems


def markdown(lab: str, root: Path | None = None) -> str:
    """One lab's rubrics as Markdown: a table of criteria, then full- and partial-credit examples."""
    parts = []
    for r in load(lab, root):
        rows = "\n".join(f"| {c.points:g} | {c.earns} |" for c in r.criteria)
        parts.append(
            f"**`{r.grade_id}`** ({r.points:g} points): {r.question}\n\n| points | what earns them |\n|---|---|\n{rows}\n\n"
            f"- *Full credit ({r.points:g})*: {r.full_credit}\n"
            f"- *Partial credit ({r.partial_points:g})*: {r.partial_example}\n"
            f"- *No credit*: {r.zero}\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mlsys.grader.rubrics",
                                description="print the written answers' rubrics; --check compares them with the labs")
    p.add_argument("labs", nargs="*", help="labs to print (default: every lab with a rubric file)")
    p.add_argument("--check", action="store_true", help="exit 1 listing every rubric that disagrees with its lab")
    a = p.parse_args(argv)
    if a.check:
        problems = check()
        print("\n".join(problems) or "every written answer has a rubric with its points")
        return 1 if problems else 0
    labs = a.labs or sorted(f.stem for f in (labs_root() / "rubrics").glob("*.yml"))
    for lab in labs:
        print(f"## {lab}\n\n{markdown(lab)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
