"""The labs' demonstration cells (``"mlsys": {"demo": true}``): benchmarks, plots and recorded figures that grade
nothing. The grader does not run them (mlsys.grader.sandboxed_execute), so nothing the learner is graded on may
need them: every name a demonstration binds that no other cell binds is read by demonstrations only, and each one
is a locked cell without points or answer (a cell the gradebook restores, whose metadata the learner cannot set).
"""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest
from test_learner_mistakes import _names

from mlsys.runtime.notebook import cell_source, demo_ids

LABS = Path(__file__).resolve().parents[1] / "labs" / "source"
LAB_NAMES = sorted(p.name for p in LABS.iterdir() if (p / f"{p.name}.ipynb").is_file())


def _code(lab: str) -> list[dict]:
    nb = json.loads((LABS / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _gid(cell: dict) -> str:
    return str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", ""))


def _bound_and_read(src: str) -> tuple[set[str], set[str]]:
    """(names a cell binds at any level, names it reads), IPython magics dropped: the mistakes corpus' reader."""
    return _names("\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in src.splitlines()))


def test_every_lab_with_heavy_demonstrations_marks_them():
    """The cells that take seconds and grade nothing (a benchmark, the ranks' measurements) are marked."""
    marked = {lab: demo_ids(_code(lab)) for lab in LAB_NAMES}
    assert {"benchmark"} <= marked["lab2_tiled_matmul"], marked
    assert {"compare"} <= marked["lab3_fusion"], marked
    assert {"measure", "overlap_measure"} <= marked["lab4_collectives"], marked
    assert {"measure", "plot"} <= marked["lab5_attention"], marked


@pytest.mark.parametrize("lab", LAB_NAMES)
def test_a_demonstration_is_a_locked_cell_without_points_or_answer(lab):
    for cell in _code(lab):
        if (cell.get("metadata", {}).get("mlsys", {}) or {}).get("demo"):
            nbg = cell["metadata"].get("nbgrader", {})
            assert nbg.get("locked") and not nbg.get("grade") and not nbg.get("solution"), (lab, nbg)
            assert _gid(cell) in demo_ids(_code(lab))


@pytest.mark.parametrize("lab", LAB_NAMES)
def test_nothing_outside_the_demonstrations_reads_what_only_they_bind(lab):
    """In notebook order: a name a cell the grader runs reads (and does not bind itself) that an earlier
    demonstration binds must be bound by an earlier cell the grader runs too."""
    cells = _code(lab)
    demos = demo_ids(cells)
    by_demo: dict[str, str] = {}  # name -> the first demonstration that binds it
    by_run: set[str] = set(dir(builtins))
    needs = []
    for cell in cells:
        bound, read = _bound_and_read(cell_source(cell))
        if _gid(cell) in demos:
            for name in bound - by_run:
                by_demo.setdefault(name, _gid(cell))
            continue
        needs += [f"{_gid(cell)} reads {name} (bound in {by_demo[name]})"
                  for name in sorted((read - bound - by_run) & set(by_demo))]
        by_run |= bound
    assert not needs, f"{lab}: cells the grader runs need names only demonstrations bind: {needs}"


def test_a_demonstration_in_a_submission_is_known_by_the_instructor_notebook_only():
    """The grader takes the demonstrations from the instructor notebook: a submission that marks its own answer
    cell as one is not believed, and a demonstration the learner unlocked (not restored) is run as code."""
    import nbformat

    from mlsys.grader.sandboxed_execute import _demo_cells

    def cell(gid: str, **nbg: bool) -> dict:
        return {"cell_type": "code", "source": "", "execution_count": None, "outputs": [],
                "metadata": {"nbgrader": {"grade_id": gid, **nbg}, "mlsys": {"demo": True}}}

    source = {"cells": [{"cell_type": "code", "source": "", "metadata": {
        "nbgrader": {"grade_id": "plot", "locked": True}, "mlsys": {"demo": True}}}]}
    sub = nbformat.from_dict({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        cell("plot", locked=True), cell("answer", solution=True), cell("plot2", locked=True), cell("plot", locked=False)]})
    assert _demo_cells(sub, source) == {0}
