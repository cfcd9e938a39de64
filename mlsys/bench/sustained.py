"""Burst and sustained figures of one kernel: its first repeats after an idle pause vs its steady state.

A GPU starts a burst of work at its highest clock and lowers the clock once the board reaches its
power limit (the power-and-clocks chapter measures this on an H100), so a figure timed for a fraction of a second and
one timed for many seconds differ. :func:`burst_and_sustained` times a callable back to back for
about ``seconds`` (:func:`mlsys.bench.timing.time_fn`, no cache flush: the steady state of one
kernel), samples the SM clock and power with :mod:`mlsys.bench.nvml` when NVML is available, and
returns both figures and the clocks seen::

    burst     = median of the first ``burst`` repeats after an idle pause
    sustained = median of the second half of the repeats
    slowdown  = sustained / burst (times; above 1 when the card slowed down)

This is the course's one definition of *burst* and *sustained*. The roofs' matmul figures
(:func:`mlsys.bench.micro.matmul_throughput`) record a median over their run and ``fastest``, the
rate of the fastest single call (neither is a burst figure in this sense), and, in ``power_state``,
this module's burst and sustained figures with the clocks seen, from a second run of the same call.

:func:`analyse` does the arithmetic on recorded repeat times and samples (tested without a GPU).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from .nvml import Sample, Sampler, available, nvml_limits, nvml_reader, summarise

__all__ = ["analyse", "burst_and_sustained"]


def _bins(values: list[float], n_bins: int) -> list[float]:
    """Means of ``values`` over ``n_bins`` consecutive, near-equal chunks (fewer if too few values)."""
    n_bins = max(1, min(n_bins, len(values)))
    edges = [round(i * len(values) / n_bins) for i in range(n_bins + 1)]
    return [statistics.fmean(values[a:b]) for a, b in zip(edges, edges[1:], strict=False) if b > a]


def analyse(times: list[float], flops: float, samples: list[Sample], start: float, idle_from: float,
            burst: int = 10, n_bins: int = 150, min_window: float = 0.2) -> dict[str, Any]:
    """Burst vs sustained throughput from per-repeat ``times`` (s) of a kernel of ``flops`` FLOPs,
    with the sampler's readings in the idle window ``[idle_from, start)`` and during the run.

    The repeats ran back to back from ``start`` (sampler time, s), so repeat ``i`` ends at about
    ``start + sum(times[:i + 1])``. Burst = median of the first ``burst`` repeats; sustained =
    median of the second half of the repeats. With no ``samples`` the record has no clocks.
    The burst's clock window spans the first ``burst`` repeats and at least ``min_window`` seconds, so
    that a fast kernel's burst (ten 0.6 ms fp8 matmuls) still holds NVML readings (one per 10 ms).
    """
    if len(times) < 4 * burst:
        raise ValueError(f"need at least {4 * burst} repeats to tell burst from sustained, got {len(times)}")
    ends, acc = [], start
    for t in times:
        acc += t
        ends.append(acc)
    half = len(times) // 2
    burst_t = statistics.median(times[:burst])
    sustained_t = statistics.median(times[half:])

    def rate(t: float) -> dict[str, Any]:
        return {"value": flops / t / 1e12, "unit": "TFLOP/s"}

    series_t = _bins([e - start for e in ends], n_bins)
    series_rate = [flops / t / 1e12 for t in _bins(times, n_bins)]
    step = max(1, len(samples) // 600)
    thinned = samples[::step]
    result: dict[str, Any] = {
        "burst": {"time": {"value": burst_t, "unit": "s"}, "throughput": rate(burst_t),
                  "method": f"median of the first {burst} repeats after an idle pause"},
        "sustained": {"time": {"value": sustained_t, "unit": "s"}, "throughput": rate(sustained_t),
                      "method": f"median of repeats {half + 1}..{len(times)} (the second half)"},
        "first": {"time": {"value": times[0], "unit": "s"}, "throughput": rate(times[0]),
                  "method": "the first repeat after the idle pause"},
        "slowdown": {"value": sustained_t / burst_t, "unit": "", "method": "sustained median time / burst median time"},
        "run_length": {"value": ends[-1] - start, "unit": "s", "method": "sum of the repeats' event times"},
        "repeats": len(times),
    }
    if samples:
        result.update({
            "clocks": {
                "idle": summarise(samples, idle_from, start),
                "burst": summarise(samples, start, max(ends[burst - 1], start + min_window) + 0.05),
                "sustained": summarise(samples, ends[half - 1], ends[-1]),
                "method": ("NVML readings (SM clock, board power, temperature, clock-event reasons) in each window; "
                           f"the burst window is the first {burst} repeats and at least {min_window:g} s"),
            },
            "series": {
                "units": {"t": "s", "throughput": "TFLOP/s", "sample_t": "s", "sm_clock": "MHz", "power": "W",
                          "temperature": "degC"},
                "t": series_t, "throughput": series_rate,
                "sample_t": [s.t - start for s in thinned], "sm_clock": [s.sm_clock for s in thinned],
                "power": [s.power for s in thinned], "temperature": [s.temperature for s in thinned],
                "method": "repeat times averaged in equal chunks, placed at their cumulative end time; NVML samples thinned",
            },
        })
    return result


def burst_and_sustained(fn: Callable[[], Any], device: str, *, what: str, flops: float, seconds: float = 15.0,
                        burst: int = 10, idle_s: float = 2.0, interval_s: float = 0.01,
                        check: Callable[[Any], object] | None = None, sample: bool | None = None) -> dict[str, Any]:
    """Time ``fn`` (``flops`` FLOPs per call) back to back for about ``seconds`` after ``idle_s`` idle,
    and return :func:`analyse`'s record plus the timing and, on a GPU with NVML, the clocks and limits.

    ``sample`` defaults to ``device == "cuda"`` where the ``pynvml`` module is installed (:func:`mlsys.bench.nvml.available`).
    """
    from .timing import time_fn

    if not isinstance(flops, (int, float)) or flops <= 0:
        raise ValueError(f"flops must be the positive number of FLOPs one call does, got {flops!r}")
    if not isinstance(seconds, (int, float)) or seconds <= 0:
        raise ValueError(f"seconds must be a positive duration, got {seconds!r}")
    sample = (device == "cuda" and available()) if sample is None else sample
    estimate = time_fn(fn, device, what=f"{what} (estimate)", repeats=3, warmup=2, flush_l2=False).median
    repeats = max(4 * burst, int(seconds / max(estimate, 1e-9)))
    index = 0
    if device == "cuda":
        import torch

        index = torch.cuda.current_device()
    reader = nvml_reader(index) if sample else (lambda t: Sample(t, 0.0, 0.0, 0.0, 0.0))
    with Sampler(reader, interval_s=interval_s) as sampler:
        time.sleep(idle_s)
        start = sampler.mark("start")
        timing = time_fn(fn, device, what=what, repeats=repeats, warmup=0, flush_l2=False, check=check)
        sampler.mark("end")
    result = analyse(list(timing.times), flops, sampler.samples if sample else [], start, idle_from=min(0.2, idle_s / 2),
                     burst=burst)
    result["timing"] = timing.to_json()
    if sample:
        result["limits"] = nvml_limits(index)
    return result
