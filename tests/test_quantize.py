"""mlsys.quantize against values worked out by hand from the OCP MX and NVFP4 rules."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys import quantize


def test_int8_per_tensor_by_hand():
    q = quantize.int8_symmetric([1.0, -0.5, 0.25, 127.0])
    # scale 1: everything is an integer step; 0.25 rounds to 0, 0.5 to 0 (ties to even)
    assert q.scales.tolist() == [1.0]
    assert q.values.tolist() == [1.0, -0.0, 0.0, 127.0]


def test_int8_per_row_beats_per_tensor_on_rows_of_different_scale():
    x = np.array([[100.0, -50.0, 25.0, 1.0], [0.01, 0.02, -0.03, 0.04]])
    per_tensor = quantize.int8_symmetric(x)
    per_row = quantize.int8_symmetric(x, axis=1)
    # per tensor, the second row's step is 100/127 = 0.79: every small value rounds to 0
    assert np.all(per_tensor.values[1] == 0)
    assert quantize.relative_error(per_row.values[1], x[1]) < 0.02
    assert per_row.scales.tolist() == pytest.approx([100 / 127, 0.04 / 127])


def test_mxfp4_block_by_hand():
    # amax 3.0: floor(log2 3) = 1, minus e_max 2 -> scale 2^-1; x / S = [6, -2, 1, 0.5 ...]
    x = np.array([3.0, -1.0, 0.5, 0.25] + [0.0] * 28)
    q = quantize.block_scaled(x, "fp4_e2m1", 32, "e8m0")
    assert q.scales.tolist() == [0.5]
    assert q.values[:4].tolist() == [3.0, -1.0, 0.5, 0.25]
    assert q.bits_per_element == 4.25


def test_mxfp4_rounds_to_the_e2m1_grid():
    # amax 5: scale 2^(2 - 2) = 1; 5 is a tie between 4 and 6 -> even mantissa 4; 2.6 -> 3; 0.3 -> 0.5 (nearest of 0, 0.5)
    q = quantize.block_scaled(np.array([5.0, 2.6, 0.3, -0.2] + [0.0] * 28), "fp4_e2m1", 32, "e8m0")
    assert q.scales.tolist() == [1.0]
    assert q.values[:4].tolist() == [4.0, 3.0, 0.5, -0.0]


def test_nvfp4_scale_is_amax_over_6():
    # tensor amax 6 -> g = 6 / (6 * 448); block scale (6 / 6) / g = 448 is exact in e4m3, so S = 1
    x = np.array([6.0, 3.0, -1.5, 0.5] + [0.0] * 12)
    q = quantize.block_scaled(x, "fp4_e2m1", 16, "fp8_e4m3")
    assert q.scales.tolist() == pytest.approx([1.0])
    assert q.values[:4].tolist() == [6.0, 3.0, -1.5, 0.5]
    assert q.bits_per_element == 4.5


def test_small_blocks_follow_local_scale():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4096) * np.repeat(10.0 ** rng.uniform(-3, 3, 128), 32)
    # one scale for the whole tensor flushes the small blocks to zero; a scale per 32 keeps them
    lost_mx = np.mean(quantize.block_scaled(x).values == 0)
    lost_wide = np.mean(quantize.block_scaled(x, block=4096).values == 0)
    assert lost_mx < 0.1 < 0.4 < lost_wide


def test_named_formats_store_what_numerics_says():
    # two independent routes to the storage size: the scale/block arithmetic here, the itemsize table there
    from mlsys import numerics

    x = np.linspace(-3, 3, 64)
    for name in ("mxfp4", "nvfp4", "mxfp8"):
        q = quantize.block_scaled_as(x, name)
        assert q.bits_per_element == numerics.itemsize(name).to("bit").m
    assert quantize.block_scaled_as(x, "nvfp4").scales.size == 4  # 64 / 16
    with pytest.raises(ValueError, match="known"):
        quantize.block_scaled_as(x, "mxfp5")


@pytest.mark.parametrize("call", [
    lambda: quantize.block_scaled(np.ones(30)),
    lambda: quantize.block_scaled(np.ones(32), scale="e5m2"),
    lambda: quantize.int8_symmetric([np.nan, 1.0]),
    lambda: quantize.int8_symmetric(np.ones((2, 2)), axis=0),
])
def test_bad_input_raises(call):
    with pytest.raises(ValueError):
        call()
