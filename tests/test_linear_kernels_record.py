"""Reading the linear_kernels record: a case, its forward GPU time and its matmul rate, worked by hand."""

from __future__ import annotations

import pytest

from mlsys import Q_
from mlsys.bench.experiments.linear_kernels import achieved_rate, describe, find_case, forward_time


def _record() -> dict:
    kernel = {"name": "nvjet_sm90_tst_256x128_bias", "calls": 5, "gpu_total": {"value": 400.0, "unit": "us"}}
    memset = {"name": "Memset (Device)", "calls": 5, "gpu_total": {"value": 10.0, "unit": "us"}}
    case = {"dtype": "bfloat16", "batch": 4096, "in_features": 4096, "out_features": 4096, "allow_tf32": False,
            "iterations": 5, "forward_kernels": [kernel, memset]}
    return {"cases": [case, {**case, "dtype": "float32", "allow_tf32": True}]}


def test_case_time_and_rate_by_hand() -> None:
    case = find_case(_record(), "bfloat16", 4096)
    assert forward_time(case) == Q_(82.0, "us")  # (400 + 10) us over 5 calls
    # 2 * 4096^3 FLOP = 137.4 GFLOP in 82 us = 1676 TFLOP/s
    assert achieved_rate(case).to("TFLOP/s").m == pytest.approx(2 * 4096**3 / 82e-6 / 1e12)
    assert describe(case).startswith("4096x4096 -> 4096")
    assert find_case(_record(), "float32", 4096, allow_tf32=True)["allow_tf32"]
    with pytest.raises(KeyError, match="no case"):
        find_case(_record(), "float16", 8)


def test_describe_rounds_like_the_pages_two_figures():
    """bench keeps its own formatter (it imports no course code); two figures, worked by hand."""
    from mlsys.bench.experiments.linear_kernels import _two_figures

    assert [_two_figures(v) for v in (597.3, 12.34, 1.234, 0.1234, 1234.5)] == ["597", "12", "1.2", "0.12", "1,234"]
