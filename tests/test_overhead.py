"""mlsys.overhead: Amdahl's law and the launch-overhead model, by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlsys import Q_, overhead
from mlsys.units import DimensionError


def test_amdahl_by_hand():
    # f = 0.9, s = 10: 1 / (0.1 + 0.09) = 1 / 0.19
    assert overhead.amdahl_speedup(0.9, 10) == pytest.approx(1 / 0.19)
    # nothing parallel: no speedup; everything parallel: the full factor
    assert overhead.amdahl_speedup(0.0, 100) == 1.0
    assert overhead.amdahl_speedup(1.0, 8) == pytest.approx(8.0)
    # f = 0.5 with a huge speedup approaches 1 / (1 - 0.5) = 2
    assert overhead.amdahl_speedup(0.5, 1e12) == pytest.approx(2.0)


@given(f=st.floats(min_value=0, max_value=0.999), s=st.floats(min_value=1, max_value=1e6))
def test_amdahl_bounds(f, s):
    r = overhead.amdahl_speedup(f, s)
    assert 1 - 1e-12 <= r <= s * (1 + 1e-12)
    assert r <= 1 / (1 - f) * (1 + 1e-12)


def test_launch_time_by_hand():
    # 100 kernels of 2 us, 5 us per launch: launch-bound. 5 + 2 + 99 * 5 = 502 us
    assert overhead.launch_time(100, Q_(5, "us"), Q_(2, "us")).to("us").m == pytest.approx(502)
    # 100 kernels of 20 us: GPU-bound. 5 + 20 + 99 * 20 = 2005 us
    assert overhead.launch_time(100, Q_(5, "us"), Q_(20, "us")).to("us").m == pytest.approx(2005)
    # one kernel: launch + run
    assert overhead.launch_time(1, "3 us", "4 us").to("us").m == pytest.approx(7)


def test_graph_and_fusion_comparison_by_hand():
    # 100 kernels of 2 us of work; 5 us per eager launch, 10 us per graph replay, 1 us start-up per kernel
    c = overhead.launch_comparison(100, Q_(5, "us"), Q_(2, "us"), graph_launch=Q_(10, "us"), fixed=Q_(1, "us"))
    assert c.eager.to("us").m == pytest.approx(5 + 3 + 99 * 5)  # launch-bound: 503 us
    assert c.graph.to("us").m == pytest.approx(10 + 100 * (1 + 2))  # 310 us
    # one fused kernel: one launch, ONE start-up cost, all the work: 5 + 1 + 200 = 206 us (not 5 + 100 * 3)
    assert c.fused.to("us").m == pytest.approx(5 + 1 + 100 * 2)
    # with no start-up cost the fused kernel is one launch plus the work
    c0 = overhead.launch_comparison(100, Q_(5, "us"), Q_(2, "us"), graph_launch=Q_(10, "us"))
    assert (c0.eager.to("us").m, c0.graph.to("us").m, c0.fused.to("us").m) == pytest.approx((502, 210, 205))
    assert overhead.graph_time(10, Q_(1, "ms"), Q_(10, "us")).to("us").m == pytest.approx(10 + 10 * 1000)


def test_fused_pays_one_start_up_cost_whatever_n():
    one = overhead.launch_comparison(1, Q_(5, "us"), Q_(0, "us"), Q_(10, "us"), fixed=Q_(3, "us"))
    many = overhead.launch_comparison(1000, Q_(5, "us"), Q_(0, "us"), Q_(10, "us"), fixed=Q_(3, "us"))
    assert one.fused.to("us").m == pytest.approx(8) and many.fused.to("us").m == pytest.approx(8)
    assert many.graph.to("us").m == pytest.approx(10 + 1000 * 3)


def test_errors():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        overhead.amdahl_speedup(1.5, 2)
    with pytest.raises(ValueError, match="positive"):
        overhead.amdahl_speedup(0.5, 0)
    with pytest.raises(ValueError, match="positive integer"):
        overhead.launch_time(0, Q_(1, "us"), Q_(1, "us"))
    with pytest.raises(DimensionError, match="plain"):
        overhead.launch_time(3, 5, Q_(1, "us"))
    with pytest.raises(DimensionError, match="dimension of s"):
        overhead.launch_time(3, Q_(5, "byte"), Q_(1, "us"))
    with pytest.raises(ValueError, match="non-negative"):
        overhead.graph_time(3, Q_(1, "us"), Q_(-1, "us"))
