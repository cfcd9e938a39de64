"""What leaves the grader: the autograded notebook and the feedback page carry no grading machinery.

``make grade`` calls :func:`sanitize_file` on each autograded notebook before it is copied for the
teacher and before ``nbgrader generate_feedback`` renders it to HTML, so both get the same clean
notebook:

* **no hidden test source**: every ``### BEGIN HIDDEN TESTS`` ... ``### END HIDDEN TESTS`` region
  of a cell is replaced by one comment line; and every output line of any cell that quotes a line of
  a hidden region (a traceback's context lines, or text a ``pre_run_cell`` hook printed from the
  test cell it saw) is replaced by :data:`HIDDEN_LINE`. Hidden lines are taken from the instructor
  notebook (``source_nb``), so a region a submission renamed or deleted is caught too;
* **no live markup from the submission**: rich outputs keep only inert forms (``text/plain``,
  ``image/png``, ``image/jpeg``, ``image/gif``); HTML, JavaScript, SVG, Markdown, LaTeX, widget and
  any other MIME type are dropped (with a plain-text note where nothing else was left), output and
  cell metadata that a renderer reads are cleared, and markdown or raw cells the course did not
  write (not found verbatim in the instructor notebook) are escaped into plain text, so the
  feedback page and nbgrader's formgrader show what was written instead of running it; cell
  attachments are dropped and the notebook's metadata is the instructor's (a submission's widget
  state would make nbconvert load the widget manager's JavaScript and render that state live).

Plain text is kept: a learner sees their prints, their values and their error messages.

The feedback page (:func:`feedback_notebook`, run by nbgrader's ``generate_feedback`` through
:class:`mlsys.grader.nbgrader_hooks.ReturnableFeedback` on every route) returns less: nothing the
learner's code saw after the tests started. Every output of a code cell is written by a process that
runs the learner's code, so from the first test cell on no output of the run is returned: other cells'
outputs are replaced by :data:`AFTER_TESTS` (a demonstration the grader did not run shows
:data:`mlsys.runtime.notebook.DEMO_NOTE`), a test cell that passed shows no output, and a failed test
cell shows its error message only while no hidden test has run yet and the cell has none; otherwise
:data:`HIDDEN_FAILED`, a generic failure. Performance cells keep their output (the trusted process
writes it). The teacher's autograded notebook keeps the full messages.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mlsys.runtime.notebook import DEMO_NOTE, demo_ids

__all__ = ["HIDDEN_LINE", "INERT_MIME", "AFTER_TESTS", "HIDDEN_FAILED", "hidden_lines", "sanitize_notebook",
           "sanitize_file", "feedback_notebook", "leaks"]

HIDDEN_LINE = "[a line of a hidden test was removed]"
HIDDEN_STUB = "# (hidden tests: not shown)"
INERT_MIME = ("text/plain", "image/png", "image/jpeg", "image/gif")
"""MIME types an output may keep: text and raster images, which no renderer executes."""

AFTER_TESTS = "[output not returned: it was produced after the tests started; your own notebook shows it]\n"
HIDDEN_FAILED = ("a test in this cell failed (a hidden test, or a check run after one); your teacher's report has "
                 "the details. Run the visible checks in your notebook to see what they test.")
_REGION = re.compile(r"[ \t]*### BEGIN HIDDEN TESTS.*?(### END HIDDEN TESTS[^\n]*|\Z)", re.S)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_MIN_CHARS = 8  # a hidden line shorter than this (``)``, ``else:``) is not evidence of a leak


def _src(cell: dict[str, Any]) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else str(s)


def hidden_lines(source_nb: dict[str, Any]) -> set[str]:
    """Stripped lines inside hidden-test regions of ``source_nb`` that are not also public lines."""
    secret: set[str] = set()
    public: set[str] = set()
    for cell in source_nb.get("cells", []):
        text = _src(cell)
        for m in _REGION.finditer(text):
            secret.update(ln.strip() for ln in m.group(0).splitlines())
        public.update(ln.strip() for ln in _REGION.sub("", text).splitlines())
    return {ln for ln in secret - public if len(ln) >= _MIN_CHARS and "HIDDEN TESTS" not in ln}


def _scrub_text(text: str, secret: set[str]) -> str:
    out = []
    for line in text.splitlines(keepends=True):
        plain = _ANSI.sub("", line)
        if "HIDDEN TESTS" in plain or any(s in plain for s in secret):
            out.append(HIDDEN_LINE + ("\n" if line.endswith("\n") else ""))
        else:
            out.append(line)
    return "".join(out)


def _scrub_output(out: dict[str, Any], secret: set[str]) -> dict[str, Any]:
    kind = out.get("output_type")
    if kind == "stream":
        return {"output_type": "stream", "name": out.get("name", "stdout") if out.get("name") in ("stdout", "stderr")
                else "stdout", "text": _scrub_text(_src({"source": out.get("text", "")}), secret)}
    if kind == "error":
        return {"output_type": "error", "ename": _scrub_text(str(out.get("ename", "")), secret),
                "evalue": _scrub_text(str(out.get("evalue", "")), secret),
                "traceback": [_scrub_text(str(t), secret) for t in out.get("traceback", [])]}
    if kind in ("display_data", "execute_result"):
        data = out.get("data", {}) or {}
        kept = {k: v for k, v in data.items() if k in INERT_MIME}
        if "text/plain" in kept:
            kept["text/plain"] = _scrub_text(_src({"source": kept["text/plain"]}), secret)
        dropped = sorted(k for k in data if k not in INERT_MIME)
        if dropped and "text/plain" not in kept:
            kept["text/plain"] = f"[rich output not shown: {', '.join(dropped)}]"
        clean: dict[str, Any] = {"output_type": kind, "data": kept, "metadata": {}}
        if kind == "execute_result":
            clean["execution_count"] = out.get("execution_count")
        return clean
    return {"output_type": "stream", "name": "stdout", "text": f"[output of type {str(kind)[:40]!r} not shown]\n"}


def _fenced(text: str) -> str:
    """``text`` as a Markdown code block (a fence longer than any run of backticks in it): shown verbatim,
    so neither raw HTML nor a ``javascript:`` link is live."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def sanitize_notebook(nb: dict[str, Any], source_nb: dict[str, Any]) -> dict[str, Any]:
    """Return ``nb`` (changed in place) with hidden tests and live markup removed (see the module doc)."""
    secret = hidden_lines(source_nb)
    course_text = {_src(c) for c in source_nb.get("cells", []) if c.get("cell_type") in ("markdown", "raw")}
    for cell in nb.get("cells", []):
        kind = cell.get("cell_type")
        text = _src(cell)
        if kind == "code":
            text = _REGION.sub(HIDDEN_STUB, text)
            cell["source"] = _scrub_text(text, secret)
            cell["outputs"] = [_scrub_output(o, secret) for o in cell.get("outputs", []) if isinstance(o, dict)]
        elif text not in course_text:  # the submission's own markdown or raw cell: shown as text, never run
            cell["cell_type"] = "markdown"
            cell["source"] = _fenced(_scrub_text(text, secret))
            cell.pop("attachments", None)
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
        cell.pop("attachments", None)  # an attachment is shown only where Markdown names it: the course's never do
        meta = cell.get("metadata", {}) or {}
        cell["metadata"] = {k: meta[k] for k in ("nbgrader", "deletable", "editable", "tags") if k in meta}
        verdict = (meta.get("mlsys") or {}).get("verdict") if isinstance(meta.get("mlsys"), dict) else None
        if isinstance(verdict, dict):  # a perf cell's status, as the grader wrote it (what reads the notebook asks it)
            cell["metadata"]["mlsys"] = {"verdict": {k: verdict.get(k) for k in ("status", "score", "reason")}}
    # the notebook's own metadata is the course's: a submission's ``widgets`` state makes nbconvert load the widget
    # manager's JavaScript and render the state's HTML live on the page
    course_meta = source_nb.get("metadata", {}) or {}
    nb["metadata"] = {k: course_meta[k] for k in ("kernelspec", "language_info") if k in course_meta}
    return nb


def sanitize_file(path: Path, source_nb: dict[str, Any]) -> None:
    """Sanitise the notebook file at ``path`` in place (see :func:`sanitize_notebook`)."""
    path = Path(path)
    nb = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps(sanitize_notebook(nb, source_nb), indent=1, ensure_ascii=False), encoding="utf-8")


def _nbgrader_meta(cell: dict[str, Any]) -> dict[str, Any]:
    meta = (cell.get("metadata") or {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def _is_test(cell: dict[str, Any]) -> bool:
    meta = _nbgrader_meta(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def _hidden_ids(source_nb: dict[str, Any]) -> set[str]:
    """grade ids of the instructor's test cells that hold a hidden-test region."""
    return {str(_nbgrader_meta(c).get("grade_id")) for c in source_nb.get("cells", [])
            if _is_test(c) and _REGION.search(_src(c))}


def _failure(evalue: str) -> dict[str, Any]:
    return {"output_type": "error", "ename": "TestFailed", "evalue": evalue, "traceback": [f"TestFailed: {evalue}"]}


def feedback_notebook(nb: dict[str, Any], source_nb: dict[str, Any]) -> dict[str, Any]:
    """``nb`` (changed in place) as the learner may see it: :func:`sanitize_notebook`, then nothing
    produced after the tests started (see the module doc). Which cells hold hidden tests is read from
    ``source_nb``, the instructor's notebook, never from the submission."""
    hidden = _hidden_ids(source_nb)
    demos = demo_ids(source_nb.get("cells", []))
    sanitize_notebook(nb, source_nb)
    started = hidden_ran = False
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        test = _is_test(cell)
        gid = str(_nbgrader_meta(cell).get("grade_id", ""))
        if gid in demos and not test and not _nbgrader_meta(cell).get("solution"):
            # the grader did not run it: whatever it holds is the grader's note, never the learner's output
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": DEMO_NOTE}]
            continue
        started = started or test
        if not started or (test and gid.startswith("perf_")):
            continue
        outs = cell.get("outputs", [])
        if not test:
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": AFTER_TESTS}] if outs else []
            continue
        errors = [o for o in outs if o.get("output_type") == "error"]
        if not errors:
            cell["outputs"] = []
        elif hidden_ran or gid in hidden:
            cell["outputs"] = [_failure(HIDDEN_FAILED)]
        else:  # a test cell without hidden tests, before any hidden test ran: its own message, one line
            e = errors[-1]
            cell["outputs"] = [_failure(f"{e.get('ename', '')}: {str(e.get('evalue', '')).strip()[:400]}")]
        hidden_ran = hidden_ran or gid in hidden
    return nb


def leaks(text: str, source_nb: dict[str, Any]) -> list[str]:
    """What in ``text`` (a feedback page) comes from the instructor's hidden tests: markers and lines."""
    found = ["### BEGIN HIDDEN TESTS"] if "BEGIN HIDDEN TESTS" in text else []
    import html

    return found + sorted(ln for ln in hidden_lines(source_nb)
                          if any(form in text for form in (ln, html.escape(ln), html.escape(ln, quote=False))))
