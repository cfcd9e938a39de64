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

import time
from typing import Any

from ..sustained import analyse

SHOWN_IN = ("chapters/13_runtime_power_clocks",)
NEEDS = "cuda"

BURST_REPEATS = 10
PROBED_REPEATS = 1500  # about 2 s of 8192^3 matmuls, each followed by a 100,000-cycle probe

__all__ = ["analyse", "run"]


def run(ctx: Any) -> dict[str, Any]:
    import torch

    from ...roofline import matmul_flops
    from ..nvml import Sampler, nvml_limits, nvml_reader, update_interval
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
    result["sensor_update_interval"] = {
        f: {"value": update_interval([x for x in sampler.samples if x.t >= start], f), "unit": "s"}
        for f in ("sm_clock", "power")}
    result["probed"] = _probed_burst(fn, 200 if ctx.quick else PROBED_REPEATS, idle)
    result["size"] = f"{n}x{n}x{n} bf16, A and B random normal"
    result["timing"] = timing.to_json()
    result["limits"] = nvml_limits(torch.cuda.current_device())
    ctx.note("the repeats' time axis assumes they ran back to back from the moment the first was queued")
    return result


def _probed_burst(fn: Any, repeats: int, idle_s: float) -> dict[str, Any]:
    """After ``idle_s`` of rest, ``repeats`` matmuls each followed by a clock probe; per repeat its time
    (CUDA events) and the SM clock the probe read just after it (MHz)."""
    import torch

    from ..clockprobe import ClockProbe

    torch.cuda.synchronize()
    time.sleep(idle_s)
    probe = ClockProbe(cycles=100_000)
    probe.probe("idle")
    events = []
    for i in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
        probe.probe(i)
    probes = probe.read()
    return {"cycles": probe.cycles, "idle_clock": {"value": probes[0]["mhz"], "unit": "MHz"},
            "repeat_time": [round(s.elapsed_time(e), 5) for s, e in events],
            "probe_t": [round(p["t_ms"], 4) for p in probes[1:]],
            "probe_clock": [round(p["mhz"], 2) for p in probes[1:]],
            "units": "repeat_time and probe_t in ms (probe_t from the idle probe's start), probe_clock in MHz",
            "method": "each matmul followed by torch.cuda._sleep(cycles) between two CUDA events; "
                      "clock = cycles / elapsed"}
