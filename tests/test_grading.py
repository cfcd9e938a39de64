"""mlsys.labkit.grading: the checks lab test cells use, and the cheats they must catch."""

from __future__ import annotations

import ctypes
import os

import numpy as np
import pytest

from mlsys import Q_
from mlsys.labkit import grading
from mlsys.labkit.grading import GradingError

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import mm as renamed_mm  # noqa: E402

# ------------------------------------------------------------------ closeness, NaN, units


def test_assert_close_passes_within_tolerance_and_reports_the_worst_element():
    grading.assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-9]))
    with pytest.raises(GradingError) as e:
        grading.assert_close(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.5]), name="y")
    msg = str(e.value)
    # one of three values is off, by 0.5, at index 2
    assert "1 of 3" in msg and "0.5" in msg and "(2,)" in msg and msg.startswith("y:")


def test_assert_close_shape_dtype_device_messages():
    with pytest.raises(GradingError, match=r"expected shape \(3,\), found \(2,\)"):
        grading.assert_close(torch.zeros(2), torch.zeros(3))
    with pytest.raises(GradingError, match="expected dtype torch.float32, found torch.float64"):
        grading.assert_close(torch.zeros(3, dtype=torch.float64), torch.zeros(3))
    with pytest.raises(GradingError, match="found None"):
        grading.assert_close(None, torch.zeros(3))
    with pytest.raises(GradingError, match="expected tensor"):
        grading.assert_close(np.zeros(3), torch.zeros(3))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_inf_are_rejected_even_when_expected_matches(bad):
    with pytest.raises(GradingError, match="NaN/Inf"):
        grading.assert_finite(torch.tensor([1.0, bad]))
    # NaN compared with NaN would slip through a naive check; assert_close rejects it first
    with pytest.raises(GradingError, match="NaN/Inf"):
        grading.assert_close(np.array([bad]), np.array([bad]))


def test_assert_quantity_close_checks_dimension_and_value():
    grading.assert_quantity_close(Q_(2, "kB"), Q_(2000, "byte"))
    with pytest.raises(GradingError, match="dimension"):
        grading.assert_quantity_close(Q_(3, "FLOP"), Q_(3, "byte"), name="bytes")
    with pytest.raises(GradingError, match="expected a quantity"):
        grading.assert_quantity_close(3, Q_(3, "byte"))
    # 24 byte reported where 3 byte is right: 8 times too many (the bits-for-bytes slip)
    with pytest.raises(GradingError, match="8 times"):
        grading.assert_quantity_close(Q_(24, "byte"), Q_(3, "byte"))


def test_check_on_fresh_inputs_catches_a_memoised_answer():
    def make(seed):
        return (torch.randn(8, generator=torch.Generator().manual_seed(seed)),)

    grading.check_on_fresh_inputs(lambda x: x + x, make, lambda x: 2 * x, seed=1)
    cached = make(0)[0] * 2

    with pytest.raises(GradingError, match="fresh input 1/3"):
        grading.check_on_fresh_inputs(lambda x: cached, make, lambda x: 2 * x, seed=1)


# ------------------------------------------------------------------ library-call detection


def _mm_at(a, b):
    return a @ b


def _mm_torch(a, b):
    return torch.matmul(a, b)


def _mm_functional(a, b):
    return F.linear(a, b.T)


def _mm_alias(a, b):
    return renamed_mm(a, b)


def _mm_method(a, b):
    return a.matmul(b)


def _mm_getattr(a, b):
    return getattr(torch, "mat" + "mul")(a, b)


def _helper(a, b):
    return torch.einsum("ik,kj->ij", a, b)


def _mm_via_helper(a, b):
    return _helper(a, b)


def _mm_loops(a, b):
    out = torch.zeros(a.shape[0], b.shape[1])
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            acc = 0.0
            for k in range(a.shape[1]):
                acc += a[i, k] * b[k, j]
            out[i, j] = acc
    return out


@pytest.mark.parametrize("fn", [_mm_at, _mm_torch, _mm_functional, _mm_alias, _mm_method, _mm_getattr, _mm_via_helper])
def test_library_matmul_is_detected(fn):
    with pytest.raises(GradingError, match="implement the computation yourself"):
        grading.assert_no_library_calls(fn)


def test_hand_written_matmul_passes_and_is_correct():
    grading.assert_no_library_calls(_mm_loops)
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    grading.assert_close(_mm_loops(a, b), a @ b, rtol=1e-5, atol=1e-6)


def _relu_method(x):
    return x.relu()


def _relu_torch(x):
    return torch.relu(x)


def _relu_alloc_only(x):
    out = torch.empty_like(x)
    for i in range(x.numel()):
        out[i] = x[i] if x[i] > 0 else 0.0
    return out


def test_forbidden_torch_ops():
    for fn in (_relu_method, _relu_torch):
        with pytest.raises(GradingError):
            grading.assert_no_library_calls(fn, grading.FORBIDDEN_TORCH_OPS)
    grading.assert_no_library_calls(_relu_alloc_only, grading.FORBIDDEN_TORCH_OPS)  # allocation is allowed


def test_custom_forbidden_set_for_mlsys_formulas():
    import mlsys.roofline

    def flops(m, n, k):
        return mlsys.roofline.matmul_flops(m, n, k)

    with pytest.raises(GradingError, match="mlsys.roofline.matmul_flops"):
        grading.assert_no_library_calls(flops, {"mlsys.roofline.*"})


def test_function_without_source_is_an_error():
    with pytest.raises(GradingError, match="Python function"):
        grading.assert_no_library_calls(len)


# ------------------------------------------------------------------ the performance tier


def test_performance_tier_without_cuda_prints_the_notice_and_never_measures(monkeypatch, capsys):
    monkeypatch.setattr(grading, "has_cuda", lambda: False)

    def measure():
        raise AssertionError("measure() must not run without CUDA")

    assert grading.performance_tier("x", measure, full_at=0.8) is None
    assert capsys.readouterr().out.strip() == "performance: not graded (no GPU)"
    assert grading.award(3, None) == 0.0


def test_performance_tier_credit_is_linear_between_zero_and_full(monkeypatch):
    monkeypatch.setattr(grading, "has_cuda", lambda: True)
    # zero_at 0.2, full_at 0.6: 0.4 is half-way -> 0.5; below 0.2 -> 0; above 0.6 -> 1
    assert grading.performance_tier("x", lambda: 0.4, full_at=0.6, zero_at=0.2) == pytest.approx(0.5)
    assert grading.performance_tier("x", lambda: 0.1, full_at=0.6, zero_at=0.2) == 0.0
    assert grading.performance_tier("x", lambda: 2.0, full_at=0.6, zero_at=0.2) == 1.0
    with pytest.raises(GradingError, match="finite"):
        grading.performance_tier("x", lambda: float("nan"), full_at=0.6)
    with pytest.raises(ValueError, match="full_at > zero_at"):
        grading.performance_tier("x", lambda: 1.0, full_at=0.2, zero_at=0.5)
    # 4 points at credit 0.25 -> 1 point
    assert grading.award(4, 0.25) == 1.0
    with pytest.raises(ValueError):
        grading.award(4, 1.5)


# ------------------------------------------------------------------ crash isolation


def _exit_hard():
    os._exit(7)


def _segfault():
    ctypes.string_at(0)


def _spin():
    while True:
        pass


def _square(x):
    return x * x


def test_run_isolated_survives_crashes_and_loops():
    assert grading.run_isolated(_square, 7) == 49
    with pytest.raises(GradingError, match="exit code 7"):
        grading.run_isolated(_exit_hard, timeout=30)
    with pytest.raises(GradingError, match="died"):
        grading.run_isolated(_segfault, timeout=30)
    with pytest.raises(GradingError, match="within 1 s"):
        grading.run_isolated(_spin, timeout=1)
    with pytest.raises(GradingError, match="ZeroDivisionError"):
        grading.run_isolated(lambda: 1 / 0, timeout=30)


def _counts_through_a_local_import(rows, cols):
    from mlsys import layers

    return layers.softmax(rows, cols, "fp32").flops


def _matmul_through_a_local_alias(a, b):
    import torch as T

    return T.matmul(a, b)


def test_library_calls_through_imports_inside_the_function_are_detected():
    # an import in the function body binds a name the globals do not have: it is resolved all the same
    with pytest.raises(GradingError, match=r"mlsys\.layers\.softmax"):
        grading.assert_no_library_calls(_counts_through_a_local_import, {"mlsys.layers.*"})
    with pytest.raises(GradingError, match="torch.matmul"):
        grading.assert_no_library_calls(_matmul_through_a_local_alias)


def test_points_are_a_bare_number_for_nbgrader_and_a_sentence_in_the_notebook():
    from mlsys.labkit.grading import Points, award

    p = award(2, 0.75)
    assert p == 1.5 and repr(p) == "1.5" and float(p) == 1.5  # nbgrader parses text/plain: float(repr)
    assert p._repr_markdown_() == "**1.5 of 2 points**"
    none = award(2, None)
    # issue 45: not "0.0" (nbgrader's Validate read it as partial credit and called a correct notebook failed on a
    # CPU); text that is no number, which nbgrader does not read as a score. The grader writes perf outputs itself.
    assert none == 0.0 and repr(none).startswith("not graded here") and "not measured on this machine" in \
        none._repr_markdown_()
    import nbformat
    from nbgrader.utils import determine_grade

    cell = nbformat.v4.new_code_cell("grade_performance(...)", metadata={"nbgrader": {
        "grade": True, "solution": False, "grade_id": "perf_x", "points": 2, "schema_version": 3}})
    cell.outputs = [nbformat.v4.new_output("execute_result", {"text/plain": repr(none)})]
    assert determine_grade(cell) == (2, 2)  # Validate: not a failure
    cell.outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "0.0"})]
    assert determine_grade(cell) == (0.0, 2)  # what the grader writes on a CPU: 0 of 2 (reported "not graded")
    import json

    assert json.dumps({"score": Points(1.25, 4)}) == '{"score": 1.25}'
