"""Lab 6 (where did the time go?): the notebook's structure, the given step and the course's fix, the checks
of the profile answers, and the lab graded end to end, on a CPU.

The answer cells are taken from the instructor notebook itself (executed with :mod:`mlsys.runtime.notebook`).
Expected values are worked out by hand in the comments, or come from a second implementation
(``mlsys.block_step.reference_step``: the heads batched, PyTorch's GELU).
"""

from __future__ import annotations

import json
import math
import tomllib
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from mlsys import block_step, profiles  # noqa: E402
from mlsys.labkit import grading  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "labs" / "source" / "lab6_profiling" / "lab6_profiling.ipynb"
CORPUS = Path(__file__).resolve().parent / "bad_submissions" / "lab6"
ANSWERS = ["setup", "imports", "roof", "predict", "profile_step", "fixed_step"]


@pytest.fixture(scope="module")
def lab6() -> types.ModuleType:
    from mlsys.runtime.notebook import exec_cells

    threads = torch.get_num_threads()
    module = types.ModuleType("lab6")
    exec_cells(NOTEBOOK, ANSWERS, module.__dict__)  # the imports cell profiles on one thread
    yield module
    torch.set_num_threads(threads)


def _cells() -> list[dict]:
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _args(B: int, T: int, D: int, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in block_step.arg_shapes(B, T, D)]


# ------------------------------------------------------------------------------ notebook structure


def test_nbgrader_cells_points_hints_and_time_labels():
    ids, points, manual = [], {}, []
    for cell in _cells():
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta is None:
            continue
        assert meta["schema_version"] == 3
        ids.append(meta["grade_id"])
        if meta["grade"]:
            points[meta["grade_id"]] = meta["points"]
            if meta["solution"]:
                manual.append(meta["grade_id"])
            else:
                assert "raises-exception" in cell["metadata"].get("tags", []) and meta["locked"]
        if "### BEGIN HIDDEN TESTS" in _source(cell):
            assert meta["grade"], meta["grade_id"]
    assert len(ids) == len(set(ids))
    assert points == {"test_predict": 2, "test_profile_answers": 3, "test_fixed_step": 3, "perf_step": 2,
                      "explain_profile": 3}
    assert manual == ["explain_profile"]
    text = "\n".join(_source(c) for c in _cells() if c["cell_type"] == "markdown")
    for part in ("1. Predict", "2. Measure", "3. Look", "4. Fix"):  # each part says how long and how hard
        heading = next(line for line in text.splitlines() if line.startswith(f"## {part}"))
        assert "min" in heading or " h," in heading, heading
        assert "★" in heading, heading
    # two or three staged hints for each graded exercise (parts 1, 3, its answers, and 4)
    hint_cells = [_source(c) for c in _cells() if _source(c).startswith("**Hints: Part")]
    assert len(hint_cells) == 4 and all(2 <= s.count("<details>") <= 3 for s in hint_cells)


def test_perf_cell_times_the_fix_against_the_given_step():
    specs = tomllib.loads((NOTEBOOK.parent / "perf.toml").read_text())
    spec = specs["perf_step"]
    assert spec["function"] == "fixed_step" and spec["forbid"] == "none" and spec["baseline"] == "reference"
    assert "given_step" in spec["baseline_expr"] and "reference_step" in spec["reference"]
    assert spec["zero_at"] == 1.0 and spec["full_at"] > 1.0  # no faster than the given step: no credit
    cell = next(c for c in _cells() if c["metadata"].get("nbgrader", {}).get("grade_id") == "perf_step")
    assert 'grade_performance("lab6_profiling", "perf_step")' in _source(cell)
    from mlsys.grader.decide import trusted

    case = trusted.load_spec(NOTEBOOK.parent / "perf.toml")["perf_step"]
    assert trusted.forbidden_ops(case.forbid, ["mm", "addmm", "_scaled_dot_product_flash_attention"]) == []
    # a whole step's own library kernels (cuBLAS GEMMs, attention) are its work under "none", refused under "matmul"
    gemm = {"ampere_sgemm_128x64_nn": [10, 900.0]}  # 10 calls, 90 us of kernels each, 100 us measured per call
    assert trusted.kernel_refusal("none", gemm, set(), set(), False, 10, 1e-4) == ""
    assert "vendor library kernels" in trusted.kernel_refusal("matmul", gemm, set(), set(), False, 10, 1e-4)
    # at the spec's sizes the flops expression is the hand count: 6 * 4 * 256 * (12 * 512^2 + 2 * 256 * 512)
    x = spec["args"]["x"]
    assert eval(spec["flops"], {"__builtins__": {}}, {"x": x}) == 6 * 4 * 256 * (12 * 512 * 512 + 2 * 256 * 512)


# ------------------------------------------------------------------------------ the step and the fix


def test_given_step_matches_the_reference_and_really_differentiates():
    args = _args(2, 8, 16, seed=1)
    out = block_step.given_step(*args, heads=4)
    grading.assert_close(out, block_step.reference_step(*args, heads=4), rtol=1e-4, atol=1e-3)
    # the packed length: y (2*8*16 = 256) + dx 256 + w_qkv 16*48 = 768 + w_o 256 + w_fc 16*64 = 1024 + b_fc 64
    # + w_proj 1024 + b_proj 16 = 3664
    assert out.numel() == 3664
    # b_proj's gradient is the sum of gy over every token (y = ... + b_proj): an independent value
    gy = args[1]
    grading.assert_close(out[-16:], gy.sum(dim=(0, 1)), rtol=1e-5, atol=1e-5)


def test_hand_flop_count_and_prediction(lab6):
    # B=2, T=32, D=64: forward 2*64*(12*4096 + 2*32*64) = 6815744; x3 = 20447232 (the notebook's check)
    assert lab6.step_flops_by_hand(2, 32, 64) == 20447232
    # B=1, T=4, D=2: forward 2*4*(12*4 + 2*4*2) = 8*64 = 512; x3 = 1536
    assert lab6.step_flops_by_hand(1, 4, 2) == 1536
    bound = max(20447232 / lab6.peak, lab6.step_bytes / lab6.bandwidth)
    assert math.isclose(lab6.predicted_s, bound, rel_tol=1e-9)


def test_the_step_is_well_conditioned_at_the_graded_width():
    """float32 against float64 (a second computation) at the GPU tier's D=512, within the perf spec's tolerance.

    Unscaled standard-normal weights gave attention scores of ~500: a one-hot softmax whose winning key
    float32 rounding can flip, so the course's own fix was refused on the H200 (2026-12-02, 1-74 of 4.2M
    elements). With every weight used as ``w / sqrt(fan_in)`` the two agree to ~1e-5."""
    spec = tomllib.loads((NOTEBOOK.parent / "perf.toml").read_text())["perf_step"]
    gen = torch.Generator().manual_seed(5)
    args = [torch.randn(*s, generator=gen, dtype=torch.float64) for s in block_step.arg_shapes(1, 64, 512)]
    exact = block_step.reference_step(*args, heads=8)
    single = block_step.reference_step(*[a.float() for a in args], heads=8).double()
    assert ((single - exact).abs() <= spec["atol"] + spec["rtol"] * exact.abs()).all()
    # and the tolerance still refuses a step that skips the backward (every gradient zero)
    skipped = exact.clone()
    skipped[1 * 64 * 512:] = 0.0
    assert not ((skipped - exact).abs() <= spec["atol"] + spec["rtol"] * exact.abs()).all()


@pytest.mark.parametrize("B,T,D,H", [(2, 32, 64, 8), (3, 16, 64, 4), (1, 5, 24, 3)])
def test_course_fix_matches_on_fresh_inputs(lab6, B, T, D, H):
    args = _args(B, T, D, seed=B * 10 + H)
    grading.assert_close(lab6.fixed_step(*args, heads=H), block_step.reference_step(*args, heads=H),
                         rtol=1e-3, atol=1e-3)


def test_course_fix_removes_all_three_causes(lab6, tmp_path):
    args = _args(2, 32, 64, seed=3)
    given, gw, _ = lab6.profile_step(block_step.given_step, args, tmp_path / "given.json", steps=3)
    fixed, fw, _ = lab6.profile_step(lab6.fixed_step, args, tmp_path / "fixed.json", steps=3)
    assert "traceEvents" in json.loads((tmp_path / "given.json").read_text())  # a trace Perfetto opens
    assert len(gw) == len(fw) == 3
    # the given step synchronises once per head (8 heads: at least 8 sync events per step); the fix never
    assert sum(profiles.is_sync(e) for e in given) >= 8 * 3
    assert not any(profiles.is_sync(e) for e in fixed)
    # fewer operators: the loop's ~10 per head and the epilogue's chain are gone
    assert len(profiles.work_events(fixed)) < len(profiles.work_events(given)) / 2
    ew = lambda evs: sum(profiles.is_elementwise(e) for e in profiles.work_events(evs))  # noqa: E731
    assert ew(fixed) < ew(given) / 2


# ------------------------------------------------------------------------------ graded end to end


@pytest.mark.slow
@pytest.mark.parametrize("lab", ["lab6_profiling"])  # graded_lab's worker group (tests/conftest.py)
def test_bad_submissions_lose_the_right_points(lab, graded_lab):
    """nbgrader through mlsys.grader.teach: instructor full marks, untouched release zero, each hostile case
    (tests/bad_submissions/lab6/) exactly the 3 points of the exercise it cheats on."""
    from mlsys.grader import sandbox

    try:
        sandbox.check()
    except sandbox.SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap cannot run here: {exc}")
    _, rows = graded_lab(lab)
    expected = json.loads((CORPUS / "expected.json").read_text())
    expected["instructor"] = {"status": "ok", "correctness_score": 8, "correctness_max": 8}
    expected["untouched"] = {"status": "ok", "correctness_score": 0, "correctness_max": 8}
    for student, want in expected.items():
        row = rows[student]
        for key, value in want.items():
            assert getattr(row, key) == value, f"{student}.{key}: expected {value!r}, got {getattr(row, key)!r} ({row})"
        assert row.manual_max == 3
