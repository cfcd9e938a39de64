"""A chip's peak rate scales with its SM clock.

A GPU's tensor-core peak is ``SMs x FLOP per SM per clock x clock``. The datasheet quotes it at one
clock; under a power cap the SMs run slower, and the peak a kernel can reach falls in proportion:

    peak(f) = sm_count * flop_per_sm_per_clock * f          (FLOP/s)

H100 SXM, dense bf16: 132 SMs x 4096 FLOP per SM per clock (NVIDIA's H100 whitepaper: twice the A100's
1024 FMA per SM per clock) at 1830 MHz gives the datasheet's 989 TFLOP/s.
"""

from __future__ import annotations

import pint

from .units import Q_, positive, require_count

__all__ = ["peak_at_clock", "clock_for_peak"]


def peak_at_clock(sm_count: int, flop_per_sm_per_clock: int, clock: object) -> pint.Quantity:
    """``sm_count * flop_per_sm_per_clock * clock`` in FLOP/s (``clock`` a frequency, e.g. ``Q_(1830, "MHz")``)."""
    sms = require_count(sm_count, "sm_count")
    per_sm = require_count(flop_per_sm_per_clock, "flop_per_sm_per_clock")
    return (sms * per_sm * positive(clock, "Hz", "clock") * Q_(1, "FLOP")).to("FLOP/s")


def clock_for_peak(peak: object, sm_count: int, flop_per_sm_per_clock: int) -> pint.Quantity:
    """The clock at which ``peak`` (FLOP/s) is reached: ``peak / (sm_count * flop_per_sm_per_clock)``, in MHz."""
    per_clock = peak_at_clock(sm_count, flop_per_sm_per_clock, Q_(1, "Hz"))
    return (positive(peak, "FLOP/s", "peak") / per_clock * Q_(1, "Hz")).to("MHz")
