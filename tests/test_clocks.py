"""A chip's clock-scaled peak (mlsys.clocks), worked by hand."""

from __future__ import annotations

import pytest

from mlsys import clocks, hardware
from mlsys.units import Q_


def test_h100_dense_bf16_peak_from_sms_flop_per_clock_and_clock():
    # 132 x 4096 = 540,672 FLOP per clock; x 1.83e9 Hz = 9.8943e14 FLOP/s
    assert clocks.peak_at_clock(132, 4096, Q_(1830, "MHz")).to("FLOP/s").m == pytest.approx(9.8943e14, rel=1e-4)
    # the datasheet's 989.4 TFLOP/s (stored in mlsys.hardware) implies 1830 MHz
    assert clocks.clock_for_peak(hardware.get("H100").peak("bf16"), 132, 4096).to("MHz").m == pytest.approx(1830, rel=1e-3)


def test_the_peak_falls_in_proportion_to_the_clock():
    # 1980 MHz -> 1500 MHz: 1500/1980 of the rate; 2 SMs x 10 FLOP x 1 GHz = 20 GFLOP/s
    assert clocks.peak_at_clock(2, 10, Q_(1, "GHz")) == Q_(20e9, "FLOP/s")
    ratio = clocks.peak_at_clock(132, 4096, Q_(1500, "MHz")) / clocks.peak_at_clock(132, 4096, Q_(1980, "MHz"))
    assert ratio.to("").m == pytest.approx(1500 / 1980)


@pytest.mark.parametrize(("args", "error"), [((0, 4096, Q_(1, "GHz")), ValueError), ((132, 4096, Q_(1, "GB")), Exception),
                                             ((132.0, 4096, Q_(1, "GHz")), TypeError)])
def test_bad_input_is_refused(args, error):
    with pytest.raises(error):
        clocks.peak_at_clock(*args)
