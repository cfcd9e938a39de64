"""A hung GPU kernel ends its process visibly, and at grading it costs its own cell only (issue 30).

No GPU here: the watchdog is the same for any call that never returns, so a Python busy loop under
``watchdog.watch(..., active=True)`` stands in for a kernel that never finishes (the GPU run of a
really endless Triton kernel is recorded in tests/gpu_runs/).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.mark.slow
def test_a_call_that_never_returns_ends_the_process_with_a_message_and_signs_of_life():
    code = textwrap.dedent("""
        from mlsys.labkit import watchdog
        with watchdog.watch("spin check", limit=2.5, heartbeat=1.0):
            while True:
                pass
    """)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    from mlsys.labkit import watchdog

    assert proc.returncode == watchdog.EXIT_CODE == 86
    assert proc.stderr == ""  # nbgrader scores any stderr as a failure
    lines = proc.stdout.splitlines()
    assert sum("spin check still running on the GPU after" in x for x in lines) >= 1
    assert lines[-1].startswith("GPU kernel hung in spin check: the call did not finish within 2.5 s")
    assert "endless loop" in lines[-1]
    assert took < 30  # 2.5 s, one second to let the message out, and the interpreter's start


def test_a_call_that_returns_is_left_alone():
    from mlsys.labkit import watchdog

    with watchdog.watch("quick", limit=0.5, heartbeat=0.2):
        pass
    time.sleep(1.0)  # the watching thread has stopped: this process is still alive


def _notebook(tmp: Path, cells: list[tuple[str, str | None]]) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook()
    for src, grade_id in cells:
        c = nbformat.v4.new_code_cell(src)
        if grade_id:
            c.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "points": 1, "solution": False,
                                      "locked": True, "schema_version": 3}
        nb.cells.append(c)
    path = tmp / "nb.ipynb"
    nbformat.write(nb, str(path))
    return path


def _run_cells(tmp: Path, job: dict) -> dict[int, dict]:
    nonce = secrets.token_hex(8)
    proc = subprocess.run([sys.executable, "-m", "mlsys.grader.learnerside.cellrunner"], input=json.dumps({**job, "nonce": nonce}),
                          env=ENV, cwd=tmp, capture_output=True, text=True, timeout=240)
    items = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith(nonce + " ")]
    assert items and items[-1].get("done"), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert items[-1]["kernel_died"] is None
    return {it["index"]: it for it in items if "index" in it}


def _text(item: dict) -> str:
    return "\n".join(str(o.get("text", "")) + str(o.get("evalue", "")) for o in item["outputs"])


SETUP = "from mlsys.labkit import watchdog\nwatchdog.GPU_LIMIT, watchdog.HEARTBEAT = 3.0, 1.0"
ANSWER = ("x = 41\n\n\ndef spin():\n    with watchdog.watch('spin', active=True):  # as on a GPU\n"
          "        while True:\n            pass\n")


@pytest.mark.slow
def test_grading_restarts_the_kernel_after_a_hang_and_goes_on(tmp_path):
    """Test cells in the learner's kernel: the hung check loses its cell; the next one runs in a fresh kernel
    that has the answers again (x, defined before the hang, is 41 there)."""
    _notebook(tmp_path, [(SETUP, None), (ANSWER, None), ("spin()", "test_spin"),
                         ("assert x + 1 == 42\nprint('x is back')", "test_after")])
    got = _run_cells(tmp_path, {"notebook": "nb.ipynb", "timeout": 120})
    hung = _text(got[2])
    assert "GPU kernel hung in spin" in hung and "only this cell's points are lost" in hung
    assert any(o.get("output_type") == "error" for o in got[2]["outputs"])
    assert "x is back" in _text(got[3]) and not any(o.get("output_type") == "error" for o in got[3]["outputs"])


@pytest.mark.slow
def test_grading_restarts_the_kernel_after_a_hang_in_a_call_from_a_grader_side_test(tmp_path):
    """Test cells in the grader (mlsys.grader.learnerside.testcells): the hang happens in the learner's kernel during the
    grader's call; the grader names it, starts a fresh kernel and the next test cell reaches x again."""
    _notebook(tmp_path, [(SETUP, None), (ANSWER, None), ("spin()", "test_spin"),
                         ("assert x + 1 == 42\nprint('x is back')", "test_after")])
    got = _run_cells(tmp_path, {"notebook": "nb.ipynb", "timeout": 120, "grader_cells": [2, 3], "course_imports": ""})
    hung = _text(got[2])
    assert "GPU kernel hung in spin" in hung and "only this cell's points are lost" in hung
    assert "x is back" in _text(got[3]) and not any(o.get("output_type") == "error" for o in got[3]["outputs"])


@pytest.mark.slow
def test_a_kernel_that_no_longer_answers_after_a_cell_timeout_is_ended_and_grading_goes_on(tmp_path):
    """A call outside the checks (an ungraded benchmark cell, a test calling the kernel directly) that never
    returns and ignores the interrupt, as a hung GPU kernel does: after the per-cell limit the grader asks the
    kernel for a sign of life, ends it when none comes, and goes on in a fresh kernel."""
    deaf = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)  # as a thread waiting on a GPU\nwhile True:\n    pass"
    _notebook(tmp_path, [("x = 41", None), (deaf, None), ("assert x + 1 == 42\nprint('x is back')", "test_after")])
    t0 = time.monotonic()
    got = _run_cells(tmp_path, {"notebook": "nb.ipynb", "timeout": 5,
                                "error_on_timeout": {"ename": "CellTimeoutError", "evalue": ""}})  # as nbgrader sets it
    assert "no longer answers after the interrupt" in _text(got[1]) and "only this cell's points" in _text(got[1])
    assert "x is back" in _text(got[2]) and not any(o.get("output_type") == "error" for o in got[2]["outputs"])
    assert time.monotonic() - t0 < 120
