"""mlsys.fusion: element-wise chain traffic, savings and predicted time, by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys import Q_, fusion, roofline
from mlsys.numerics import itemsize
from mlsys.units import DimensionError


def test_chain_traffic_by_hand():
    # y = relu(x * w + b): arities [2, 2, 1], numel 1000, fp32 (4 B)
    # unfused: mul reads 2 writes 1, add reads 2 writes 1, relu reads 1 writes 1 = 8 transfers
    assert fusion.chain_traffic(1000, "fp32", [2, 2, 1], fused=False).to("byte").m == 8 * 1000 * 4
    # fused: read x, w, b once (2 + 1 + 0) and write y once = 4 transfers
    assert fusion.chain_traffic(1000, "fp32", [2, 2, 1], fused=True).to("byte").m == 4 * 1000 * 4


def test_single_op_gains_nothing():
    # one unary op: 2 transfers either way
    s = fusion.fusion_savings(10, "bf16", [1])
    assert s.unfused == s.fused == Q_(2 * 10 * 2, "byte")
    assert s.saved.m == 0 and s.ratio == 1.0 and s.launches_saved == 0


def test_fusion_savings_by_hand():
    # five unary ops (e.g. a GELU written out): unfused 5 * 2 = 10 transfers, fused 1 + 1 = 2
    s = fusion.fusion_savings(2**20, "bf16", [1, 1, 1, 1, 1])
    assert s.unfused.to("byte").m == 10 * 2**20 * 2
    assert s.fused.to("byte").m == 2 * 2**20 * 2
    assert s.saved.to("byte").m == 8 * 2**20 * 2
    assert s.ratio == 5.0
    assert s.launches_saved == 4


def test_fusion_time_by_hand():
    # arities [2, 2, 1], numel 1e6, fp32, 1 TB/s, launch 5 us
    # unfused: 8 * 4e6 B = 32 MB -> 32 us of traffic, 3 kernels of 32/3 us each (> 5 us launch):
    #   5 + 32/3 + 2 * 32/3 = 5 + 32 = 37 us
    # fused: 4 * 4e6 B = 16 MB -> 16 us, plus one 5 us launch = 21 us
    t = fusion.fusion_time(10**6, "fp32", [2, 2, 1], "1 TB/s", Q_(5, "us"))
    assert t.unfused.to("us").m == pytest.approx(37.0)
    assert t.fused.to("us").m == pytest.approx(21.0)
    assert t.speedup == pytest.approx(37 / 21)
    # tiny tensors are launch-bound: numel 1000 -> unfused kernels take 32/3 ns each, far below 5 us
    #   5 us + 10.67 ns + 2 * 5 us = 15.0107 us; fused 5 us + 16 ns
    t = fusion.fusion_time(1000, "fp32", [2, 2, 1], Q_(1, "TB/s"), "5 us")
    assert t.unfused.to("ns").m == pytest.approx(15000 + 32 / 3)
    assert t.fused.to("ns").m == pytest.approx(5016)


def test_fusion_time_uses_an_accelerator_or_a_roof():
    # H100-SXM datasheet bandwidth 3.35 TB/s: fused chain of [1] on 1e9 fp16 elements = 4e9 B / 3.35e12 B/s
    t = fusion.fusion_time(10**9, "fp16", [1], "H100", Q_(0, "s"))
    assert t.fused.to("s").m == pytest.approx(4e9 / 3.35e12)
    roof = roofline.Roof(Q_(100, "TFLOP/s"), Q_(2, "TB/s"), "measured")
    assert fusion.fusion_time(10**9, "fp16", [1], roof, Q_(0, "s")).fused.to("ms").m == pytest.approx(2.0)


arity_lists = st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(numel=st.integers(min_value=1, max_value=10**9), arities=arity_lists,
       dtype=st.sampled_from(["fp32", "bf16", "fp8_e4m3", "fp4"]))
def test_fused_never_exceeds_unfused(numel, arities, dtype):
    s = fusion.fusion_savings(numel, dtype, arities)
    assert s.fused <= s.unfused
    assert s.saved.m >= 0 and s.ratio >= 1
    # each extra op saves at least its output write and the re-read of that output: 2 transfers
    assert s.saved >= 2 * (len(arities) - 1) * numel * itemsize(dtype)


def test_errors():
    with pytest.raises(ValueError, match="arities\\[1\\] must be an integer >= 1"):
        fusion.chain_traffic(10, "fp32", [2, 0], fused=True)
    with pytest.raises(TypeError, match="non-empty list"):
        fusion.chain_traffic(10, "fp32", [], fused=True)
    with pytest.raises(ValueError, match="positive integer"):
        fusion.fusion_savings(0, "fp32", [1])
    with pytest.raises(TypeError, match="positive integer"):
        fusion.fusion_savings(1.5, "fp32", [1])
    with pytest.raises(ValueError, match="neither a known accelerator nor a bandwidth"):
        fusion.fusion_time(10, "fp32", [1], "H900", Q_(1, "us"))
    with pytest.raises(DimensionError):
        fusion.fusion_time(10, "fp32", [1], Q_(1, "TFLOP/s"), Q_(1, "us"))
    with pytest.raises(DimensionError):
        fusion.fusion_time(10, "fp32", [1], "1 TB/s", 5)
