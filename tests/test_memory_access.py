"""Coalescing, Little's law and the Horowitz energy table, against hand arithmetic."""

import pytest

from mlsys import Q_
from mlsys.energy import HOROWITZ_45NM, energy, ratio
from mlsys.memory_access import bytes_in_flight, coalescing_efficiency, sectors_per_warp


@pytest.mark.parametrize(("stride", "sectors"), [
    (1, 4),    # 32 lanes x 4 B = 128 B contiguous = 4 sectors of 32 B
    (2, 8),    # span 32 x 8 B = 256 B -> 8 sectors, half of each used
    (4, 16),   # 512 B span -> 16 sectors
    (8, 32),   # lanes 32 B apart: one sector each
    (32, 32),  # further apart: still one sector per lane
])
def test_sectors_fp32(stride, sectors):
    assert sectors_per_warp(stride, 4) == sectors


def test_efficiency():
    assert coalescing_efficiency(1, 4) == 1.0
    assert coalescing_efficiency(8, 4) == 128 / (32 * 32)  # 1/8
    # 8-byte elements at stride 1: 256 B = 8 sectors, all used
    assert coalescing_efficiency(1, 8) == 1.0
    # a 4-byte element straddling a sector boundary counts both sectors: itemsize 4 at
    # stride 1 never straddles, but itemsize 3 (offsets 0,3,..,93) spans bytes 0..95 = 3 sectors
    assert sectors_per_warp(1, 3) == 3
    with pytest.raises(ValueError, match="positive int"):
        sectors_per_warp(0)


def test_littles_law():
    # 3 TB/s x 500 ns = 3e12 x 5e-7 = 1.5e6 bytes
    assert bytes_in_flight(Q_(3, "TB/s"), Q_(500, "ns")).to("byte").m == pytest.approx(1.5e6)
    with pytest.raises(Exception, match="byte"):
        bytes_in_flight(Q_(3, "TFLOP/s"), Q_(1, "ns"))
    with pytest.raises(ValueError, match="positive"):
        bytes_in_flight(Q_(0, "TB/s"), Q_(1, "ns"))


def test_energy_table():
    assert energy("fp32 mult").to("pJ").m == pytest.approx(3.7)
    # DRAM 1.3 nJ / fp32 add 0.9 pJ = 1444.4
    assert ratio("DRAM read (low)", "fp32 add") == pytest.approx(1300 / 0.9)
    assert all(c.energy.m > 0 for c in HOROWITZ_45NM.values())
    with pytest.raises(KeyError, match="known"):
        energy("fp64 fma")
