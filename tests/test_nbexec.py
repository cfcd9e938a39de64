"""mlsys.runtime.notebook: running a notebook's cells without Jupyter, as the GPU scripts do."""

from __future__ import annotations

import inspect
import json

import pytest

from mlsys.runtime.notebook import code_cells, exec_cells, run_cells


def _notebook(tmp_path, cells):
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": []}
    for i, (src, gid, extra) in enumerate(cells):
        meta = {"nbgrader": {"grade_id": gid, **extra}} if gid else {}
        nb["cells"].append({"cell_type": "code", "id": f"c{i}", "metadata": meta, "source": src,
                            "outputs": [], "execution_count": None})
    nb["cells"].insert(1, {"cell_type": "markdown", "id": "md", "metadata": {}, "source": "# text"})
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    return path


def test_cells_run_in_order_in_one_namespace_and_keep_going_after_an_error(tmp_path):
    path = _notebook(tmp_path, [
        ("def f(x):\n    return 2 * x\n", "define", {}),
        ("f(21)", "test_value", {"grade": True, "solution": False, "points": 3}),
        ("import sys\nprint('warn', file=sys.stderr)\n1 / 0", "test_boom", {"grade": True, "points": 1}),
        ("print(f(1))", None, {}),
    ])
    recs = run_cells(path)
    assert [r["grade_id"] for r in recs] == ["define", "test_value", "test_boom", "cell-4"]
    assert recs[1]["value"] == 42 and recs[1]["graded"] and recs[1]["points"] == 3
    assert recs[2]["status"].startswith("ZeroDivisionError") and "ZeroDivisionError" in recs[2]["traceback"]
    assert recs[3]["status"] == "ok" and recs[3]["output"] == "2\n"  # ran after the failure


def test_stderr_is_captured_and_skip_works(tmp_path):
    path = _notebook(tmp_path, [("import sys\nsys.stderr.write('x')", "a", {}), ("raise SystemExit", "plot", {})])
    recs = run_cells(path, skip=("plot",))
    assert recs[0]["stderr"] == "x" and recs[1]["status"] == "skipped"


def test_functions_defined_in_cells_have_source(tmp_path):
    """inspect.getsource must work: Triton's @jit and the library-call detector read it."""
    path = _notebook(tmp_path, [("def kernel(x):\n    return x + 1\n", "kern", {})])
    ns = exec_cells(path, ["kern"])
    assert inspect.getsource(ns["kernel"]) == "def kernel(x):\n    return x + 1\n"


def test_missing_cells_and_bad_files_are_clear_errors(tmp_path):
    path = _notebook(tmp_path, [("x = 1", "a", {})])
    with pytest.raises(ValueError, match=r"grade_id \['b'\]"):
        exec_cells(path, ["a", "b"])
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="expected a Jupyter notebook"):
        code_cells(bad)
