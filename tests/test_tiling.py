"""mlsys.tiling: tile grids, traffic and shared memory, checked against hand arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys import hardware, roofline, tiling


def test_tile_grid_exact_and_fringe():
    g = tiling.tile_grid(256, 512, 128, 128)
    assert (g.tiles_m, g.tiles_n, g.total, g.utilization) == (2, 4, 8, 1.0)
    # 100 x 100 with 64 x 64 tiles: 2 x 2 tiles covering 128 x 128; 10000 / 16384 real
    g = tiling.tile_grid(100, 100, 64, 64)
    assert (g.tiles_m, g.tiles_n, g.total) == (2, 2, 4)
    assert g.utilization == pytest.approx(10000 / 16384)


def test_tiled_traffic_by_hand():
    # m = n = k = 1024, 128 x 128 tiles, fp32 (4 B): 8 x 8 tiles.
    # A: 8 tile columns each read all of A = 8 * 1024^2; same for B; C once = 1024^2
    # (8 + 8 + 1) * 1024^2 * 4 B = 71,303,168 B
    assert tiling.tiled_matmul_traffic(1024, 1024, 1024, 128, 128, "fp32").to("byte").m == 17 * 1024**2 * 4
    # fringe, real elements only: m = 100, n = 200, k = 50, 64 x 64 tiles, bf16:
    # tiles_m = 2, tiles_n = 4; A read 4 times (4 * 100 * 50 = 20000), B 2 times (2 * 50 * 200 = 20000),
    # C 100 * 200 = 20000: 60000 elements * 2 B = 120000 B
    assert tiling.tiled_matmul_traffic(100, 200, 50, 64, 64, "bf16").to("byte").m == 120_000


def test_one_tile_covering_everything_is_the_compulsory_traffic():
    assert tiling.tiled_matmul_traffic(64, 32, 16, 64, 32, "fp16") == roofline.matmul_bytes(64, 32, 16, "fp16")


def test_naive_traffic_by_hand():
    # 2 m n k loads + m n stores: 2 * 4 * 5 * 6 + 4 * 5 = 260 elements * 2 B
    assert tiling.naive_matmul_traffic(4, 5, 6, "bf16").to("byte").m == 520


def test_intensities_by_hand():
    # naive: 2 m n k / ((2 m n k + m n) * 4) for m = n = k = 1024, fp32: 2 * 1024 / ((2 * 1024 + 1) * 4)
    assert tiling.naive_matmul_intensity(1024, 1024, 1024, "fp32").m == pytest.approx(2048 / (2049 * 4))
    # tiled above: 2 * 1024^3 / (17 * 1024^2 * 4) = 2048 / 68
    assert tiling.tiled_matmul_intensity(1024, 1024, 1024, 128, 128, "fp32").to("FLOP/byte").m == pytest.approx(
        2048 / 68
    )


def test_shared_memory_by_hand():
    # (128 * 64 + 64 * 128) * 2 B = 32768 B per stage; 3 stages = 98304 B
    assert tiling.shared_memory_bytes(128, 128, 64, "bf16").to("byte").m == 32768
    assert tiling.shared_memory_bytes(128, 128, 64, "bf16", stages=3).to("byte").m == 98304
    # fp4 is half a byte: (64 * 32 + 32 * 64) * 0.5 = 2048 B
    assert tiling.shared_memory_bytes(64, 64, 32, "fp4").to("byte").m == 2048


def test_fits_shared_memory():
    h100 = hardware.get("H100")  # 228 KiB = 233472 B per SM
    # (128 * 64 + 64 * 256) * 2 B * 4 stages = 196608 B: fits
    assert tiling.fits_shared_memory(tiling.TileConfig(128, 256, 64, "bf16", 4), h100)
    # 5 stages = 245760 B > 233472 B: does not fit
    assert not tiling.fits_shared_memory(dict(block_m=128, block_n=256, block_k=64, dtype="bf16", stages=5), "H100")
    # V100 has 96 KiB = 98304 B: 3 stages of 128 x 128 x 64 bf16 (98304 B) just fits, 4 don't
    assert tiling.fits_shared_memory(tiling.TileConfig(128, 128, 64, "bf16", 3), "V100")
    assert not tiling.fits_shared_memory(tiling.TileConfig(128, 128, 64, "bf16", 4), "V100")


dims = st.integers(min_value=1, max_value=5000)
blocks = st.sampled_from([16, 32, 64, 128, 256])


@settings(max_examples=300, deadline=None)
@given(m=dims, n=dims, k=dims, bm=blocks, bn=blocks)
def test_tiled_traffic_between_compulsory_and_naive(m, n, k, bm, bn):
    tiled = tiling.tiled_matmul_traffic(m, n, k, bm, bn, "bf16")
    assert tiled <= tiling.naive_matmul_traffic(m, n, k, "bf16")
    assert tiled >= roofline.matmul_bytes(m, n, k, "bf16")
    assert 0 < tiling.tile_grid(m, n, bm, bn).utilization <= 1


@settings(max_examples=100, deadline=None)
@given(m=dims, n=dims, k=dims, b=st.sampled_from([16, 32, 64, 128]))
def test_bigger_tiles_never_add_traffic(m, n, k, b):
    assert tiling.tiled_matmul_traffic(m, n, k, 2 * b, 2 * b, "fp16") <= tiling.tiled_matmul_traffic(
        m, n, k, b, b, "fp16"
    )


def test_errors():
    with pytest.raises(ValueError, match="positive integer"):
        tiling.tile_grid(0, 10, 4, 4)
    with pytest.raises(TypeError, match="positive integer"):
        tiling.tiled_matmul_traffic(10, 10, 10.5, 4, 4)
    with pytest.raises(ValueError, match="positive integer"):
        tiling.shared_memory_bytes(64, 64, 32, stages=0)
    with pytest.raises(ValueError, match="unknown dtype"):
        tiling.naive_matmul_traffic(4, 4, 4, "fp12")
    with pytest.raises(TypeError, match="block_m, block_n, block_k"):
        tiling.fits_shared_memory({"block_m": 64}, "H100")
    with pytest.raises(KeyError, match="unknown accelerator"):
        tiling.fits_shared_memory(tiling.TileConfig(64, 64, 32), "H900")


def test_accelerator_without_shared_memory_figure():
    # TPUs have no SM shared memory: the data file has no figure, so there is nothing to compare
    with pytest.raises(ValueError, match="no shared_memory_per_sm"):
        tiling.fits_shared_memory(tiling.TileConfig(64, 64, 32), "TPUv4")
