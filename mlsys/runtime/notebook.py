"""The notebook cell model: read a notebook's code cells, and run them without Jupyter.

One :class:`Cell`, one reader (:func:`code_cells`, :func:`cell_source`, :func:`is_autograded`) and one
executor (:func:`exec_cell`) for every module and test that needs a cell's source or runs one.

The GPU machines that record the labs' reference figures have no Jupyter, nbconvert or nbgrader,
so the lab experiments (``mlsys.bench.experiments.lab*``) and the tests execute the instructor
notebooks with this module: cell by cell, in one namespace, as one kernel would. Each cell's source is registered with :mod:`linecache`
under a file name of its own, so ``inspect.getsource`` works on the functions it defines (Triton's
``@jit`` and :func:`mlsys.labkit.grading.assert_no_library_calls` both need that). A trailing expression
is evaluated and returned, as a notebook shows it; nbgrader reads a number there as partial credit.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import linecache
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import pysource

__all__ = ["Cell", "cell_source", "is_autograded", "demo_ids", "DEMO_NOTE", "code_cells", "exec_cell", "run_cells",
           "exec_cells", "error_output"]


def cell_source(cell: dict[str, Any]) -> str:
    """A notebook cell's source as one string (nbformat stores it as a string or a list of lines)."""
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def is_autograded(nbgrader: dict[str, Any] | None) -> bool:
    """An autograded test cell, from its ``metadata.nbgrader``: ``grade`` without ``solution``."""
    return bool(nbgrader) and bool(nbgrader.get("grade")) and not nbgrader.get("solution")


def demo_ids(cells: list[dict[str, Any]]) -> set[str]:
    """Grade ids of the demonstrations among ``cells`` (a lab's instructor notebook): locked code cells that grade
    nothing and hold no answer, marked ``"mlsys": {"demo": true}`` by the lab's author (benchmarks, plots, the
    recorded figures). The grader does not run them: no graded cell needs what they bind (tests/test_lab_demos.py)."""
    out = set()
    for cell in cells:
        meta = cell.get("metadata", {}) or {}
        nbg = meta.get("nbgrader", {}) or {}
        if (cell.get("cell_type") == "code" and (meta.get("mlsys", {}) or {}).get("demo") and nbg.get("locked")
                and not nbg.get("grade") and not nbg.get("solution") and nbg.get("grade_id")):
            out.add(str(nbg["grade_id"]))
    return out


DEMO_NOTE = ("A demonstration: the grader does not run it (it grades nothing, and no graded cell needs it). "
             "Run it in your own notebook to see its output.\n")


@dataclass(frozen=True)
class Cell:
    """One code cell: its position, nbgrader grade id (or ``cell-<index>``), tags and source."""

    index: int
    grade_id: str
    source: str
    tags: tuple[str, ...] = ()
    nbgrader: dict[str, Any] = field(default_factory=dict)

    @property
    def graded(self) -> bool:
        """An autograded test cell: nbgrader ``grade`` without ``solution``."""
        return is_autograded(self.nbgrader)


def code_cells(notebook: str | Path) -> list[Cell]:
    """The code cells of an ``.ipynb`` file, in order. Raises ``ValueError`` for a file that is not a notebook."""
    path = Path(notebook)
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        raw_cells = nb["cells"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: expected a Jupyter notebook (JSON with a 'cells' list)") from exc
    cells = []
    for i, cell in enumerate(raw_cells):
        if cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata", {})
        src = cell_source(cell)
        nbg = meta.get("nbgrader", {})
        cells.append(Cell(i, nbg.get("grade_id", f"cell-{i}"), src, tuple(meta.get("tags", ())), nbg))
    return cells


def source_filename(filename: str, source: str) -> str:
    """``filename`` for :mod:`linecache`, or ``filename`` with a digest of ``source`` when that name
    already holds other source: a function's source is read back through linecache (``inspect``,
    tracebacks, and Triton's interpreter, which re-parses a kernel from it at every launch), so a second
    notebook with the same cell names (a student copy beside the instructor's) must not replace the
    first one's text under functions already defined from it."""
    import hashlib

    held = linecache.cache.get(filename)
    if held is None or held[2] == source.splitlines(True):
        return filename
    digest = hashlib.sha1(source.encode("utf-8")).hexdigest()[:8]
    return f"{filename[:-1]}#{digest}>" if filename.endswith(">") else f"{filename}#{digest}"


def exec_cell(source: str, filename: str, ns: dict[str, Any]) -> tuple[Any, str, str]:
    """Execute ``source`` in ``ns``; return (value of a trailing expression or None, stdout, stderr)."""
    filename = source_filename(filename, source)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    tree = pysource.parse(source, filename)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    out, err = io.StringIO(), io.StringIO()
    value = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        exec(compile(tree, filename, "exec"), ns)  # noqa: S102 -- the course's own notebooks
        if last is not None:
            value = eval(compile(ast.Expression(last.value), filename, "eval"), ns)  # noqa: S307
    return value, out.getvalue(), err.getvalue()


def exec_cells(notebook: str | Path, grade_ids: list[str], ns: dict[str, Any] | None = None) -> dict[str, Any]:
    """Execute only the cells with these grade ids, in the given order; return the namespace.

    Raises ``ValueError`` naming the missing grade ids if the notebook lacks any of them.
    """
    by_id = {c.grade_id: c for c in code_cells(notebook)}
    missing = [g for g in grade_ids if g not in by_id]
    if missing:
        raise ValueError(f"{notebook}: expected code cells with grade_id {missing}; found {sorted(by_id)}")
    ns = {"__name__": Path(notebook).stem} if ns is None else ns
    for gid in grade_ids:
        exec_cell(by_id[gid].source, f"<{Path(notebook).name}:{gid}>", ns)
    return ns


def run_cells(notebook: str | Path, ns: dict[str, Any] | None = None, skip: tuple[str, ...] = (),
              echo: bool = False) -> list[dict[str, Any]]:
    """Run every code cell in order in one namespace; a failing cell is recorded and the run goes on.

    Returns one record per cell: ``grade_id``, ``status`` (``"ok"``, ``"skipped"`` or the error),
    ``value`` (a numeric trailing expression: nbgrader's partial credit), ``seconds``, the tails of
    ``output`` and ``stderr`` (nbgrader scores a graded cell that writes to stderr as 0),
    ``traceback`` on error, and ``graded``/``points`` for autograded test cells.
    """
    ns = {"__name__": "__main__"} if ns is None else ns
    records = []
    for cell in code_cells(notebook):
        rec: dict[str, Any] = {"grade_id": cell.grade_id, "status": "ok", "graded": cell.graded}
        if cell.graded:
            rec["points"] = float(cell.nbgrader.get("points", 0))
        if cell.grade_id in skip:
            rec["status"] = "skipped"
            records.append(rec)
            continue
        t0 = time.perf_counter()
        out = err = ""
        try:
            value, out, err = exec_cell(cell.source, f"<{Path(notebook).name}:{cell.grade_id}>", ns)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rec["value"] = value
        except BaseException as exc:  # noqa: BLE001 -- a failing cell is a finding, not the end of the run
            rec["status"] = f"{type(exc).__name__}: {exc}"[:2000]
            rec["traceback"] = traceback.format_exc()[-3000:]
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        rec["output"], rec["stderr"] = out[-3000:], err[-3000:]
        records.append(rec)
        if echo:
            print(f"notebook cell {cell.grade_id}: {rec['status'][:200]} ({rec['seconds']} s)"
                  + (" [wrote to stderr]" if rec["stderr"] else "")
                  + (f", value {rec['value']}" if "value" in rec else ""), flush=True)
    return records


def error_output(ename: str, evalue: str) -> dict[str, Any]:
    """An nbformat error output (nbgrader scores a test cell holding one as zero)."""
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}
