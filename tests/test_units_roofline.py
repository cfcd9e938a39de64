"""mlsys.units, mlsys.roofline and mlsys.book.claims: values worked out by hand."""

from __future__ import annotations

import pint
import pytest

from mlsys import Q_, hardware, roofline
from mlsys.book.claims import ClaimError, check, fmt
from mlsys.units import DimensionError, as_quantity


def test_byte_and_flop_have_their_own_dimensions():
    # pint's default registry would turn TB/s into 8e12 1/s; ours must refuse.
    with pytest.raises(Exception, match="Cannot convert"):
        Q_(1, "TB/s").to("1/s")
    with pytest.raises(Exception, match="Cannot convert"):
        Q_(1, "FLOP").to("byte")
    assert Q_(1, "GiB").to("byte").m == 2**30
    assert Q_(1, "GB").to("byte").m == 10**9
    assert Q_(8, "bit").to("byte").m == 1
    assert Q_(1, "MAC").to("FLOP").m == 2


def test_as_quantity_refuses_plain_numbers_and_wrong_dimensions():
    with pytest.raises(DimensionError, match="plain int"):
        as_quantity(3, "byte/s", "bandwidth")
    with pytest.raises(DimensionError, match="dimension of byte/s"):
        as_quantity(Q_(3, "TFLOP/s"), "byte/s", "bandwidth")
    assert as_quantity("3.35 TB/s", "byte/s").to("GB/s").m == pytest.approx(3350)


@pytest.mark.parametrize(
    ("m", "n", "k", "dtype", "flops", "nbytes"),
    [
        # 2*m*n*k;  (m*k + k*n + m*n) * itemsize
        (4096, 4096, 4096, "bf16", 2 * 4096**3, 3 * 4096**2 * 2),
        (1, 4096, 4096, "fp32", 2 * 4096 * 4096, (4096 + 4096 * 4096 + 4096) * 4),  # GEMV-shaped
        (128, 256, 64, "fp8", 2 * 128 * 256 * 64, (128 * 64 + 64 * 256 + 128 * 256) * 1),
        (3, 5, 7, "fp4", 210, (21 + 35 + 15) * 0.5),
    ],
)
def test_matmul_counts_by_hand(m, n, k, dtype, flops, nbytes):
    assert roofline.matmul_flops(m, n, k).to("FLOP").m == flops
    assert roofline.matmul_bytes(m, n, k, dtype).to("byte").m == nbytes
    assert roofline.matmul_intensity(m, n, k, dtype).to("FLOP/byte").m == pytest.approx(flops / nbytes)


def test_square_bf16_matmul_intensity_is_n_over_3():
    # 2 n^3 / (3 n^2 * 2 bytes) = n / 3
    assert roofline.matmul_intensity(8192, 8192, 8192, "bf16").m == pytest.approx(8192 / 3)


def test_attainable_on_both_sides_of_the_ridge():
    h100 = hardware.get("H100")
    # below the ridge: 3.35 TB/s * 10 FLOP/B = 33.5 TFLOP/s
    assert roofline.attainable_flops(10, h100, "bf16").to("TFLOP/s").m == pytest.approx(33.5)
    assert roofline.bound(10, h100, "bf16") == "memory"
    # above the ridge (295.4): the peak
    assert roofline.attainable_flops(1000, h100, "bf16").to("TFLOP/s").m == pytest.approx(989.5)
    assert roofline.bound(1000, h100, "bf16") == "compute"
    # fp32 on H100: ridge 67/3.35 = 20, so intensity 25 is compute-bound at 67 TFLOP/s
    assert roofline.bound(Q_(25, "FLOP/byte"), "H100", "fp32") == "compute"
    assert roofline.attainable_flops(25, "H100", "fp32").to("TFLOP/s").m == pytest.approx(67)


def test_time_lower_bound_by_hand():
    # 8192^3 bf16 on H100: compute 2*8192^3 / 989.5e12 = 1.1112 ms; memory 3*8192^2*2 / 3.35e12 = 0.1202 ms
    t = roofline.time_lower_bound(roofline.matmul_flops(8192, 8192, 8192), roofline.matmul_bytes(8192, 8192, 8192), "H100")
    assert t.to("ms").m == pytest.approx(2 * 8192**3 / 989.5e12 * 1e3, rel=1e-9)
    # a copy of 1 GB: 0 FLOPs, 2 GB moved (read + write) -> 2e9 / 3.35e12 s = 0.597 ms
    t2 = roofline.time_lower_bound(0, Q_(2, "GB"), "H100")
    assert t2.to("ms").m == pytest.approx(2e9 / 3.35e12 * 1e3)


def test_arithmetic_intensity_units_and_errors():
    assert roofline.arithmetic_intensity(Q_(2, "GFLOP"), Q_(1, "GB")).m == pytest.approx(2)
    with pytest.raises(DimensionError):
        roofline.arithmetic_intensity(Q_(2, "GB"), Q_(1, "GB"))
    with pytest.raises(ValueError, match="positive"):
        roofline.arithmetic_intensity(Q_(2, "GFLOP"), Q_(0, "GB"))
    with pytest.raises(ValueError, match="non-negative"):
        roofline.arithmetic_intensity(Q_(-2, "GFLOP"), Q_(1, "GB"))


@pytest.mark.parametrize("bad", [0, -4, 2.5, True, "8"])
def test_matmul_sizes_must_be_positive_integers(bad):
    with pytest.raises((ValueError, TypeError), match="m must be a positive"):
        roofline.matmul_flops(bad, 4, 4)


def test_roof_from_measurements_and_wrong_units():
    roof = roofline.Roof(Q_(800, "TFLOP/s"), Q_(3, "TB/s"), "measured")
    assert roof.ridge_point.m == pytest.approx(800 / 3)
    assert roofline.attainable_flops(100, roof).to("TFLOP/s").m == pytest.approx(300)
    with pytest.raises(DimensionError, match="bandwidth"):
        roofline.Roof(Q_(800, "TFLOP/s"), Q_(3, "TFLOP/s"))


def test_check_and_fmt():
    check(1 < 2, "one is less than two")
    with pytest.raises(ClaimError, match="claim does not hold: nope"):
        check(False, "nope")
    assert fmt(Q_(989.5e12, "FLOP/s"), "TFLOP/s") == "990 TFLOP/s"
    assert fmt(0.000123) == "0.000123"
    assert fmt(1.5e-9) == "1.5e-9"  # tiny but never "0"
    assert fmt(4096) == "4,096"
    assert fmt(295.373) == "295"
    assert fmt(0.0) == "0"
    with pytest.raises(TypeError):
        fmt("12")


def test_celsius_is_known_for_provenance_temperatures():
    # nvidia-smi reports degrees Celsius; the provenance of a GPU record stores them as degC
    # (0 degC = 273.15 K, so 40 degC = 313.15 K)
    from mlsys.units import ureg

    assert ureg.Quantity(40, "degC").to("K").magnitude == pytest.approx(313.15)


def test_units_readers_use_worked_by_hand():
    # 1 Gbps = 1e9 bit/s = 1e9 / 8 byte/s = 0.125 GB/s; an NDR InfiniBand port, 400 Gbps, moves 50 GB/s
    assert Q_(1, "Gbps").to("GB/s").magnitude == pytest.approx(0.125)
    assert Q_(400, "Gbps").to("GB/s").magnitude == pytest.approx(50)
    assert Q_(100, "Mbps").to("byte/s").magnitude == pytest.approx(12.5e6)
    # 1 kWh = 1000 W x 3600 s = 3.6e6 J; a 700 W GPU for 24 h uses 16.8 kWh
    assert Q_(1, "kWh").to("J").magnitude == pytest.approx(3.6e6)
    assert (Q_(700, "W") * Q_(24, "h")).to("kWh").magnitude == pytest.approx(16.8)
    # 1 TOPS = 1e12 operations per second, the same dimension as FLOP/s
    assert Q_(1, "TOPS").to("FLOP/s").magnitude == pytest.approx(1e12)
    assert Q_(3958, "TOPS").to("POPS").magnitude == pytest.approx(3.958)
    with pytest.raises(pint.DimensionalityError):
        Q_(1, "Gbps").to("FLOP/s")
    with pytest.raises(pint.DimensionalityError):
        Q_(1, "kWh").to("W")



def test_achieved_rates_are_counted_work_over_measured_time():
    from mlsys.roofline import achieved_bandwidth, achieved_flops

    # 2 GB in 1 ms is 2 TB/s; 1 TFLOP in 2 ms is 500 TFLOP/s
    assert achieved_bandwidth(Q_(2, "GB"), Q_(1, "ms")).to("TB/s").m == pytest.approx(2.0)
    assert achieved_flops(Q_(1, "TFLOP"), Q_(2, "ms")).to("TFLOP/s").m == pytest.approx(500.0)
    with pytest.raises(ValueError, match="time"):
        achieved_bandwidth(Q_(1, "GB"), Q_(0, "s"))
