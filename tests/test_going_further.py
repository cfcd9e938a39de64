"""The optional "going further" notebooks beside the labs (issue 45, item 1): written for a learner, and runnable
top to bottom on a CPU (cells that need a GPU say so and skip)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import mlsys

mlsys.labkit.device.setup(check_versions=False)  # TRITON_INTERPRET=1 without CUDA, before triton is imported

from mlsys.runtime import notebook as nbexec  # noqa: E402

FOLDER = Path(__file__).resolve().parents[1] / "labs" / "going_further"
NOTEBOOKS = {"lab2_tiled_matmul": FOLDER / "lab2_going_further.ipynb", "lab5_attention": FOLDER / "lab5_going_further.ipynb"}


def _text(path: Path) -> str:
    return "\n".join("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"])


@pytest.mark.parametrize("lab", list(NOTEBOOKS))
def test_a_going_further_notebook_is_written_for_a_learner(lab):
    path = NOTEBOOKS[lab]
    assert path.is_file(), f"expected the optional notebook {path}"
    text = _text(path)
    # no repository internals or issue numbers: a learner has the notebook and the course package, nothing else
    for internal in ("tests/", "docs/", "gpu_runs", "KERNEL_NOTES", "mlsys/", "grade_id", "labs/source"):
        assert internal not in text, f"{path.name} mentions {internal!r}"
    assert not re.search(r"\bissues? #?\d+|#\d+\b", text, re.I), f"{path.name} names an issue"
    assert re.search(r"optional, not graded", text, re.I) and "★★★★" in text
    # and the lab itself points to it
    lab_text = _text(Path(__file__).resolve().parents[1] / "labs" / "source" / lab / f"{lab}.ipynb")
    assert path.name in lab_text


@pytest.mark.slow  # the TMA kernel under the interpreter: several CPU-seconds
def test_lab2_going_further_runs_top_to_bottom_on_a_cpu(capsys):
    records = nbexec.run_cells(NOTEBOOKS["lab2_tiled_matmul"])
    failed = [(r["grade_id"], r["status"]) for r in records if r["status"] != "ok"]
    assert not failed, failed
    out = "\n".join(r["output"] for r in records)
    # hand values: 72 x 40 fp16 rows are 80 bytes apart (16-byte aligned), 65 x 33 ones 66 bytes (not)
    assert "72 x 136 x 40 fp16: the persistent TMA kernel" in out
    assert "65 x 127 x 33 fp16: fallback (rows not 16-byte aligned)" in out
    assert "matmul_tma agrees with the reference" in out
    assert "needs a GPU" in out  # the timing cell, on this CPU


@pytest.mark.slow  # the warp-specialised kernel under the interpreter: several CPU-seconds
def test_lab5_going_further_runs_top_to_bottom_on_a_cpu():
    records = nbexec.run_cells(NOTEBOOKS["lab5_attention"])
    failed = [(r["grade_id"], r["status"]) for r in records if r["status"] != "ok"]
    assert not failed, failed
    out = "\n".join(r["output"] for r in records)
    assert "ws_attention, N = 128, head dim 64, not causal" in out and "N = 256, head dim 64, causal" in out
    assert "lowest share of the fastest backend" in out  # the recorded figures ship with the package


def test_the_labs_core_paths_hold_no_expert_kernel():
    """The persistent TMA matmul and the warp-specialised attention live in the optional notebooks only."""
    root = Path(__file__).resolve().parents[1] / "labs"
    for kind in ("source", "release"):
        assert "matmul_tma" not in _text(root / kind / "lab2_tiled_matmul" / "lab2_tiled_matmul.ipynb")
        lab5 = _text(root / kind / "lab5_attention" / "lab5_attention.ipynb")
        assert "warp_specialize" not in lab5 and "fast_attention" not in lab5
