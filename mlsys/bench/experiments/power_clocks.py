"""Power and clocks: a bf16 matmul's first repeats vs its sustained median, with the SM clock and power sampled by NVML.

The GPU is left idle for a moment, then one square bf16 matmul is repeated back to back for
about fifteen seconds while :class:`mlsys.bench.nvml.Sampler` reads the SM clock, board power,
temperature and clock-event reasons every few milliseconds in a background thread. Each
repeat is timed with CUDA events (:func:`mlsys.bench.timing.time_fn`, no L2 flush: the point is
the steady state of one kernel). The record keeps the burst figure (median of the first
repeats), the sustained figure (median of the second half), the clocks and power in the idle,
burst and sustained windows, and a thinned time series for the chapter's figure. Nothing
about the card is changed (no clocks, limits or modes are set).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

SHOWN_IN = ("chapters/13_runtime_power_clocks",)
NEEDS = "cuda"

BURST_REPEATS = 10


def _bins(values: list[float], n_bins: int) -> list[float]:
    """Means of ``values`` over ``n_bins`` consecutive, near-equal chunks (fewer if too few values)."""
    n_bins = max(1, min(n_bins, len(values)))
    edges = [round(i * len(values) / n_bins) for i in range(n_bins + 1)]
    return [statistics.fmean(values[a:b]) for a, b in zip(edges, edges[1:], strict=False) if b > a]


def analyse(times: list[float], flops: float, samples: list[Any], start: float, idle_from: float,
            burst: int = BURST_REPEATS, n_bins: int = 150) -> dict[str, Any]:
    """Burst vs sustained throughput from per-repeat ``times`` (s) of a kernel of ``flops`` FLOPs,
    with the sampler's readings in the idle window ``[idle_from, start)`` and during the run.

    The repeats ran back to back from ``start`` (sampler time, s), so repeat ``i`` ends at about
    ``start + sum(times[:i + 1])``. Burst = median of the first ``burst`` repeats; sustained =
    median of the second half of the repeats.
    """
    from ..nvml import summarise

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
    return {
        "burst": {"time": {"value": burst_t, "unit": "s"}, "throughput": rate(burst_t),
                  "method": f"median of the first {burst} repeats after an idle pause"},
        "sustained": {"time": {"value": sustained_t, "unit": "s"}, "throughput": rate(sustained_t),
                      "method": f"median of repeats {half + 1}..{len(times)} (the second half)"},
        "first": {"time": {"value": times[0], "unit": "s"}, "throughput": rate(times[0]),
                  "method": "the first repeat after the idle pause"},
        "slowdown": {"value": sustained_t / burst_t, "unit": "", "method": "sustained median time / burst median time"},
        "run_length": {"value": ends[-1] - start, "unit": "s", "method": "sum of the repeats' event times"},
        "repeats": len(times),
        "clocks": {
            "idle": summarise(samples, idle_from, start),
            "burst": summarise(samples, start, ends[burst - 1] + 0.05),
            "sustained": summarise(samples, ends[half - 1], ends[-1]),
            "method": "NVML readings (SM clock, board power, temperature, clock-event reasons) in each window",
        },
        "series": {
            "units": {"t": "s", "throughput": "TFLOP/s", "sample_t": "s", "sm_clock": "MHz", "power": "W",
                      "temperature": "degC"},
            "t": series_t, "throughput": series_rate,
            "sample_t": [s.t - start for s in thinned], "sm_clock": [s.sm_clock for s in thinned],
            "power": [s.power for s in thinned], "temperature": [s.temperature for s in thinned],
            "method": "repeat times averaged in equal chunks, placed at their cumulative end time; NVML samples thinned",
        },
    }


def run(ctx: Any) -> dict[str, Any]:
    import torch

    from ...roofline import matmul_flops
    from ..nvml import Sampler, nvml_limits, nvml_reader
    from ..timing import time_fn

    n = 4096 if ctx.quick else 8192
    repeats = 400 if ctx.quick else 10000
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)

    def fn() -> Any:
        return torch.matmul(a, b, out=c)

    for _ in range(3):  # cuBLAS handle and kernel choice, outside the record
        fn()
    torch.cuda.synchronize()
    ref = (a[:64].double() @ b.double()).to(torch.float32)

    def correct(out: Any) -> bool:
        err = ((out[:64].float() - ref).norm() / ref.norm()).item()
        return err < 1e-2

    idle = 1.0 if ctx.quick else 2.0
    with Sampler(nvml_reader(torch.cuda.current_device()), interval_s=0.01) as sampler:
        time.sleep(idle)
        start = sampler.mark("start")
        timing = time_fn(fn, "cuda", what=f"bf16 matmul {n}x{n}x{n}, back to back", repeats=repeats, warmup=0,
                         flush_l2=False, check=correct)
        sampler.mark("end")
        time.sleep(0.5)
    flops = matmul_flops(n, n, n).to("FLOP").m
    result = analyse(list(timing.times), flops, sampler.samples, start, idle_from=0.2)
    result["size"] = f"{n}x{n}x{n} bf16, A and B random normal"
    result["timing"] = timing.to_json()
    result["limits"] = nvml_limits(torch.cuda.current_device())
    ctx.note("the repeats' time axis assumes they ran back to back from the moment the first was queued")
    return result
