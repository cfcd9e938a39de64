"""Inputs that used to give a wrong answer instead of an error (issue 19), one test each.

Expected values are worked out by hand in the comments.
"""

from __future__ import annotations

import math

import pytest

from mlsys import Q_, cli, comm, hardware, memory_access, numerics, occupancy, roofline, tiling
from mlsys.units import DimensionError, as_amount, as_quantity, positive, require_count, require_fraction


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_non_finite_quantities_are_refused(bad):
    with pytest.raises(ValueError, match="finite"):
        as_quantity(Q_(bad, "GB/s"), "byte/s", "bandwidth")
    with pytest.raises(ValueError, match="finite"):
        as_amount(bad, "byte", "nbytes")
    with pytest.raises(ValueError, match="finite"):
        roofline.time_lower_bound(Q_(bad, "FLOP"), Q_(1, "GB"), "H100")
    with pytest.raises(ValueError, match="finite"):
        comm.allreduce_time(Q_(1, "GB"), 8, Q_(bad, "GB/s"))
    with pytest.raises(ValueError, match="finite"):
        memory_access.bytes_in_flight(Q_(bad, "TB/s"), Q_(500, "ns"))


def test_inf_strings_are_refused():
    with pytest.raises(ValueError, match="finite"):
        as_quantity("inf TB/s", "byte/s")


def test_millibyte_is_never_meant():
    with pytest.raises(DimensionError, match="millibyte"):
        as_quantity("1 mB", "byte")
    with pytest.raises(DimensionError, match="millibyte"):
        comm.allreduce_bytes_per_gpu(Q_(1, "mB"), 4)
    assert as_quantity("1 MB", "byte").to("byte").m == 1e6
    assert as_quantity("5 ms", "s").to("s").m == pytest.approx(5e-3)  # milli is fine for time


def test_bare_numbers_only_for_counts():
    assert as_amount(2e9, "FLOP").to("GFLOP").m == 2
    assert as_amount(3, "byte").to("byte").m == 3
    with pytest.raises(DimensionError, match="plain"):
        as_amount(450, "byte/s", "bandwidth")
    with pytest.raises(DimensionError, match="plain"):
        as_amount(5, "s", "latency")
    # one policy: comm now takes a float byte count as roofline does (1e9 B over 4 GPUs: 2*3/4*1e9)
    assert comm.allreduce_bytes_per_gpu(1e9, 4).to("byte").m == 1.5e9


def test_validators():
    assert positive("0 s", "s", "t", allow_zero=True).m == 0
    with pytest.raises(ValueError, match="positive"):
        positive(0, "byte", "n")
    with pytest.raises(TypeError):
        require_count(2.0, "world_size")
    with pytest.raises(TypeError):
        require_count(True, "world_size")
    assert require_count(0, "k", minimum=0) == 0
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        require_fraction(1.5, "overlap")
    with pytest.raises(ValueError, match="finite"):
        require_fraction(math.nan, "overlap")


@pytest.mark.parametrize(
    ("dtype", "bits"),
    [
        ("nvfp4", 4 + 8 / 16),   # 4.5 bits: e2m1 + one e4m3 scale per 16
        ("mxfp4", 4 + 8 / 32),   # 4.25 bits: e2m1 + one e8m0 scale per 32
        ("mxfp8", 8 + 8 / 32),   # 8.25 bits
        ("fp4", 4),
    ],
)
def test_block_scaled_itemsize_counts_the_scales(dtype, bits):
    assert numerics.itemsize(dtype).to("byte").m == pytest.approx(bits / 8)


def test_block_scaled_formats_run_at_the_element_rate_and_encode_as_elements():
    b200 = hardware.get("B200")
    assert b200.peak("nvfp4") == b200.peak("fp4")
    assert numerics.float_format("nvfp4").name == "fp4_e2m1"
    # nvfp4 traffic of a 1024^2 tensor: 1,048,576 * 0.5625 B = 589,824 B (plain fp4 would say 524,288)
    assert (1024**2 * numerics.itemsize("nvfp4")).to("byte").m == 589_824


def test_fits_shared_memory_uses_the_per_block_limit():
    # 227 KiB per block on an H100 (228 KiB per SM): bf16, stages=1, (bm*bk + bk*bn) * 2 B
    # block_m = block_n = 227, block_k = 256: 2 * 227 * 256 * 2 B = 232,448 B = 227 KiB exactly -> fits
    assert tiling.fits_shared_memory(tiling.TileConfig(227, 227, 256), "H100")
    # 228 * 256 * 2 * 2 B = 233,472 B = 228 KiB: fits the SM, but not one block
    assert not tiling.fits_shared_memory(tiling.TileConfig(228, 228, 256), "H100")
    assert occupancy.sm_limits("H100").max_shared_memory_per_block.to("KiB").m == 227


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bound", "H100", "--flops", "inf", "--bytes", "1 GB"], "finite"),
        (["bound", "H100", "--flops", "nan GFLOP", "--bytes", "1 GB"], "finite"),
        (["allreduce", "--size", "1 GB", "--world", "8", "--bandwidth", "inf GB/s"], "finite"),
        (["allreduce", "--size", "1 GB", "--world", "8", "--bandwidth", "450"], "give a unit"),
        (["allreduce", "--size", "1 GB", "--world", "8", "--bandwidth", "450 GB/s", "--latency", "5"], "give a unit"),
        (["bound", "H100", "--flops", "1 GFLOP", "--bytes", "1 mB"], "millibyte"),
    ],
)
def test_cli_refuses(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("mlsys: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_cli_warns_on_a_bare_count(capsys):
    code, out, err = run(capsys, "bound", "H100", "--flops", "2e9", "--bytes", "1 GB")
    assert code == 0 and "intensity" in out
    assert "mlsys: warning: --flops 2e9 read as" in err


def test_cli_missing_data_file(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("MLSYS_ACCELERATORS", str(tmp_path / "missing.toml"))
    hardware._registry.cache_clear()
    try:
        code, out, err = run(capsys, "show", "H100")
    finally:
        monkeypatch.delenv("MLSYS_ACCELERATORS")
        hardware._registry.cache_clear()
    assert code == 2 and err.startswith("mlsys: error: ") and "does not exist" in err


def test_show_h100_gives_binary_sizes_with_the_datasheet_wording(capsys):
    code, out, _ = run(capsys, "show", "H100")
    assert code == 0
    assert "50 MiB" in out and "80 GiB" in out and "datasheet: 80 GB" in out
    assert "450 GB/s" in out and "900 GB/s bidirectional" in out


def test_per_block_limits_of_older_and_inference_parts():
    # CUDA C++ Programming Guide, compute capabilities: 8.9 (L4) 99 KiB per block of 100 KiB per SM,
    # 7.5 (T4) 64 KiB, 7.0 (V100) 96 KiB; bf16 tiles (bm*bk + bk*bn) * 2 B
    assert tiling.fits_shared_memory(tiling.TileConfig(99, 99, 256), "L4")        # 99 KiB
    assert not tiling.fits_shared_memory(tiling.TileConfig(100, 100, 256), "L4")  # 100 KiB: the SM's, not a block's
    assert occupancy.sm_limits("T4").max_shared_memory_per_block.to("KiB").m == 64
    # L4: 1536 threads per SM -> 256-thread blocks, 32 registers, no shared memory: 6 blocks, 48 warps, occupancy 1
    occ = occupancy.occupancy(256, 32, 0, "L4")
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.occupancy) == (6, 48, 1.0)
