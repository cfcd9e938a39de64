"""Occupancy rules checked against hand-worked examples (H100 = compute capability 9.0:
65,536 registers/SM in 4 sub-partitions of 16,384, 256-register allocation unit per warp,
64 warps, 32 blocks, 228 KiB shared memory per SM, 227 KiB per block, 1 KiB reserved per
block, 128-byte shared-memory allocation unit)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlsys import Q_
from mlsys.occupancy import occupancy, sm_limits


def test_h100_limits_from_data():
    lim = sm_limits("H100")
    assert lim.registers_per_sm == 256 * 1024 // 4  # 256 KiB of 4-byte registers = 65,536
    assert lim.shared_memory_per_sm.m == 228 * 1024
    assert lim.max_shared_memory_per_block.m == 227 * 1024


def test_light_kernel_is_limited_by_warps_or_blocks():
    # 256 threads = 8 warps; 64 // 8 = 8 blocks; 32 regs: 1024 regs/warp, 16384 // 1024 = 16
    # warps per partition -> 64 warps -> 8 blocks; shared memory only the 1 KiB reserve:
    # 233472 // 1024 = 228 blocks. min(32, 8, 8, 228) = 8 blocks, 64 warps: 100 %.
    occ = occupancy(256, 32, 0)
    assert occ.blocks_per_sm == 8
    assert occ.warps_per_sm == 64
    assert occ.occupancy == 1.0
    # tiny blocks hit the 32-blocks limit: 32 threads = 1 warp; 32 blocks -> 32 warps = 50 %
    occ = occupancy(32, 16, 0)
    assert occ.blocks_per_sm == 32 and occ.limiter == "blocks" and occ.occupancy == 0.5


def test_register_limit_64_per_thread():
    # 64 regs x 32 lanes = 2048 per warp (a multiple of 256); 16384 // 2048 = 8 warps per
    # partition -> 32 warps; 256-thread blocks (8 warps): 4 blocks, 32/64 = 50 %.
    occ = occupancy(256, 64, 0)
    assert occ.registers_per_warp == 2048
    assert occ.blocks_per_sm == 4
    assert occ.limiter == "registers"
    assert occ.occupancy == 0.5


def test_register_rounding_and_partitions():
    # 40 regs x 32 = 1280 (multiple of 256); per partition 16384 // 1280 = 12 warps (12.8),
    # x 4 = 48 warps (not 65536 // 1280 = 51); 8-warp blocks: 6 blocks = 48 warps = 75 %.
    occ = occupancy(256, 40, 0)
    assert occ.blocks_per_sm == 6 and occ.occupancy == 0.75
    # 33 regs x 32 = 1056 -> rounded up to 1280, same as 40
    assert occupancy(256, 33, 0).registers_per_warp == 1280
    # 255 regs x 32 = 8160 -> 8192; 16384 // 8192 = 2 per partition = 8 warps; 128-thread
    # blocks (4 warps): 2 blocks, 8/64 = 12.5 %
    occ = occupancy(128, 255, 0)
    assert occ.blocks_per_sm == 2 and occ.occupancy == 0.125


def test_shared_memory_limit():
    # 48 KiB + 1 KiB reserve = 50176 B (multiple of 128); 233472 // 50176 = 4 blocks;
    # 128 threads = 4 warps -> 16 warps = 25 %
    occ = occupancy(128, 32, Q_(48, "KiB"))
    assert occ.shared_memory_per_block.m == 50176
    assert occ.blocks_per_sm == 4 and occ.limiter == "shared memory" and occ.occupancy == 0.25
    # 100 B + 1024 = 1124 -> rounded to 1152 (9 x 128); 233472 // 1152 = 202 blocks
    assert occupancy(64, 32, 100).block_limits["shared memory"] == 202
    # the per-block maximum: 227 KiB fits (one block), 228 KiB does not
    assert occupancy(128, 32, Q_(227, "KiB")).blocks_per_sm == 1
    with pytest.raises(ValueError, match="per-block maximum"):
        occupancy(128, 32, Q_(228, "KiB"))


def test_bad_launches_raise_clear_errors():
    with pytest.raises(ValueError, match="threads per block"):
        occupancy(2048, 32)
    with pytest.raises(ValueError, match="registers_per_thread"):
        occupancy(128, 256)
    with pytest.raises(ValueError, match="positive int"):
        occupancy(0, 32)
    # 1024 threads x 128 regs = 131072 registers > 65536 per block
    with pytest.raises(ValueError, match="registers per block"):
        occupancy(1024, 128)
    with pytest.raises(ValueError, match="non-negative"):
        occupancy(128, 32, -1)
    with pytest.raises(KeyError, match="no SM limits"):
        sm_limits("MI300X")


def test_a100_differs_only_in_shared_memory():
    # A100: 164 KiB per SM; 48 KiB + 1 KiB = 50176 -> 167936 // 50176 = 3 blocks
    assert occupancy(128, 32, Q_(48, "KiB"), limits="A100").blocks_per_sm == 3


@given(threads=st.integers(1, 1024), regs=st.integers(1, 63), smem=st.integers(0, 100 * 1024))
def test_more_resources_never_raise_occupancy(threads, regs, smem):
    base = occupancy(threads, regs, smem)
    assert occupancy(threads, regs + 1, smem).blocks_per_sm <= base.blocks_per_sm
    assert occupancy(threads, regs, smem + 1024).blocks_per_sm <= base.blocks_per_sm
    # resident warps never exceed 64, resident blocks never exceed 32, and at least one fits
    assert 1 <= base.blocks_per_sm <= 32
    assert base.warps_per_sm <= 64
    assert base.blocks_per_sm == min(base.block_limits.values())
