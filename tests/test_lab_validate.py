"""nbgrader's Validate (the learner's toolbar button) on a CPU: honest labs pass, the newcomer's Lab 1 fails.

Review of 2026-12-01 (../shared/reviews/newcomer.md, A12-A13): Validate said "Success" for a Lab 1 notebook worth
6 of 11, and "The following cell failed: grade_performance(...)" for a correct Lab 2, because a performance cell
on a CPU ended in 0.0, which nbgrader reads as partial credit. Here the instructor notebooks (solutions and hidden
tests in place) are validated with nbgrader's own Validator, as the button does, in a copy outside the course.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "labs" / "source"
LABS = ["lab1_roofline", "lab2_tiled_matmul", "lab3_fusion", "lab4_collectives", "lab5_attention"]


def _validate(path: Path, executed: list | None = None) -> dict:
    """nbgrader's Validator over ``path``, as the button runs it; the notebook it executed is appended to
    ``executed`` when given (nbgrader's Validator returns only its verdict on the graded cells)."""
    from nbgrader.validator import Validator
    from traitlets.config import Config

    class Keeping(Validator):
        def _preprocess(self, nb):  # noqa: ANN001, ANN202 - nbgrader's own signature
            nb = super()._preprocess(nb)
            if executed is not None:
                executed.append(nb)
            return nb

    config = Config()
    config.Execute.timeout = 600  # a loaded 2-core CI machine; a learner's laptop needs far less
    config.Execute.extra_arguments = []
    return Keeping(config=config).validate(str(path))


def raised(nb: dict) -> list[str]:
    """The first line of every code cell of an executed notebook that ended in an error: what
    ``pytest --nbval-lax`` fails a notebook for (no cell of the labs is marked to raise)."""
    return [c["source"].split("\n")[0] for c in nb["cells"] if c["cell_type"] == "code"
            and any(o.get("output_type") == "error" for o in c.get("outputs", []))]


def _copy(lab: str, tmp: Path) -> Path:
    folder = tmp / lab
    shutil.copytree(SOURCE / lab, folder)
    return folder / f"{lab}.ipynb"


@pytest.mark.slow  # each lab runs top to bottom in a fresh kernel (Lab 2's kernels under the interpreter)
@pytest.mark.parametrize("lab", LABS)
def test_validate_passes_the_honest_lab_on_a_cpu(lab, tmp_path, monkeypatch):
    """Validate says "Success", and no cell of the run raised: the instructor notebooks' half of the teacher's
    ``pytest --nbval-lax labs/source labs/release`` (tests/test_lab_pipeline.py runs nbval itself over the rest:
    one run of each notebook, not two)."""
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("MLSYS_FAKE_TIMER", raising=False)
    executed: list = []
    results = _validate(_copy(lab, tmp_path), executed)
    assert not results.get("failed") and not results.get("type_changed") and not results.get("changed"), \
        json.dumps(results, indent=1)[:3000]
    assert len(executed) == 1 and not raised(executed[0]), f"{lab}: cells that raised: {raised(executed[0])}"


def test_a_cell_that_raised_is_named():
    ok = {"cell_type": "code", "source": "x = 1", "outputs": [{"output_type": "stream", "text": "fine"}]}
    bad = {"cell_type": "code", "source": "y = 1 / 0\nz = 2", "outputs": [{"output_type": "error", "ename": "E"}]}
    note = {"cell_type": "markdown", "source": "text"}
    assert raised({"cells": [note, ok, bad]}) == ["y = 1 / 0"]
    assert raised({"cells": [note, ok]}) == []


@pytest.mark.slow
def test_validate_fails_the_newcomers_lab1(tmp_path, monkeypatch):
    """Sum FLOPs counted as N, sum bytes without the output, LayerNorm without weight and bias, a datasheet roof:
    the notebook the review graded 6 of 11 must not get "Success"."""
    monkeypatch.setenv("MPLBACKEND", "Agg")
    path = _copy("lab1_roofline", tmp_path)
    nb = json.loads(path.read_text(encoding="utf-8"))
    edits = {
        "return Q_(numel - 1, \"FLOP\"), ((numel + 1) * itemsize(dtype)).to(\"byte\")":
            "return Q_(numel, \"FLOP\"), (numel * itemsize(dtype)).to(\"byte\")",
        "((2 * numel + 2 * hidden) * itemsize(dtype))": "((2 * numel) * itemsize(dtype))",
        'my_roof = Roof(Q_(mm["value"], mm["unit"]), Q_(copy["value"], copy["unit"]), f"measured ({device}, {dtype})")':
            'my_roof = Roof(Q_(989, "TFLOP/s"), Q_(3.35, "TB/s"), "H100 SXM datasheet")',
    }
    for old, new in edits.items():
        cells = [c for c in nb["cells"] if old in "".join(c["source"])]
        assert len(cells) == 1, f"the instructor notebook no longer holds {old!r} once"
        cells[0]["source"] = "".join(cells[0]["source"]).replace(old, new)
    path.write_text(json.dumps(nb), encoding="utf-8")
    failed = {c["source"].split("\n")[0] for c in _validate(path).get("failed", [])}
    assert len(failed) == 3, failed  # the add/sum, LayerNorm/softmax and measured-roof cells
