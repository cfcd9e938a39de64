"""Helpers shared by the Part II experiments (not an experiment: the runner skips ``_`` modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..timing import Timing, time_fn


def figure(value: float, unit: str, method: str, timing: Timing | None = None, **extra: Any) -> dict[str, Any]:
    """A recorded quantity ``{"value", "unit", "method"}`` with its timing record when there is one."""
    out: dict[str, Any] = {"value": float(value), "unit": unit, "method": method, **extra}
    if timing is not None:
        out["timing"] = timing.to_json()
    return out


def timed(fn: Callable[[], Any], device: str, what: str, quick: bool, **kw: Any) -> Timing:
    """:func:`mlsys.bench.timing.time_fn` with the Part II defaults: 3 warm-up calls and 15 repeats
    (5 when ``quick``), L2 (or CPU caches) flushed before each timed call unless told otherwise."""
    kw.setdefault("repeats", 5 if quick else 15)
    kw.setdefault("warmup", 1 if quick else 3)
    return time_fn(fn, device, what=what, **kw)


def rel_error(out: Any, ref: Any) -> float:
    """``||out - ref|| / ||ref||`` computed in float64."""
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / ref.norm())


def torch_dtype(device: str) -> tuple[Any, str]:
    """bf16 on a GPU (tensor cores), fp32 on a CPU (where bf16 matmuls are slow emulations)."""
    import torch

    return (torch.bfloat16, "bf16") if device == "cuda" else (torch.float32, "fp32")


def kernel_profile(fn: Callable[[], Any], device: str, calls: int = 5, flush: bool = True,
                   top: int = 8) -> dict[str, Any]:
    """What one call of ``fn`` runs, by name, from ``torch.profiler``, and where its time goes.

    Each of ``calls`` calls is profiled on its own, after the L2 (on a GPU) has been flushed by
    writing a buffer larger than it outside the profiled region, so no flush kernel is counted and no
    input starts in the cache. On a GPU the record keeps every kernel (name, launches per call and
    device time per call, from the profiler's Chrome trace, ``cat == "kernel"``) and their sum, the
    *device time per call*; on a CPU, where there are no kernels, it keeps the operators' self CPU
    time per call (``key_averages``), which add up the same way.

    It also keeps the *host time per call*: ``calls`` calls issued back to back with
    ``time.perf_counter`` around them, without waiting for the device (the time the Python thread
    spends in the call: argument checks, descriptor set-up, the launches). When it exceeds the device
    time, the host, not the kernel, sets the pace of a stream of such calls.
    """
    import json
    import os
    import tempfile
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    from ..timing import l2_flush_bytes

    if calls < 1:
        raise ValueError(f"kernel_profile needs at least one call, got {calls}")
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    flusher = torch.empty(l2_flush_bytes() // 4, dtype=torch.float32, device="cuda") if cuda and flush else None
    fn()
    sync()
    per_name: dict[str, list[float]] = {}
    for _ in range(calls):
        if flusher is not None:
            flusher.zero_()
        sync()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            fn()
            sync()
        if cuda:
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "trace.json")
                prof.export_chrome_trace(path)
                with open(path, encoding="utf-8") as f:
                    events = json.load(f).get("traceEvents", [])
            for e in events:
                if e.get("cat") == "kernel" and "dur" in e:
                    per_name.setdefault(e["name"], []).append(float(e["dur"]) * 1e-6)
        else:
            for e in prof.key_averages():
                if e.self_cpu_time_total > 0:
                    per_name.setdefault(e.key, []).append(e.self_cpu_time_total * 1e-6)
    ranked = sorted(per_name.items(), key=lambda kv: -sum(kv[1]))
    total = sum(sum(d) for d in per_name.values()) / calls
    what = "kernels" if cuda else "operators (self CPU time)"
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls
    sync()
    return {
        "what": what,
        "calls": calls,
        "kernels": [{"name": name[:200], "launches_per_call": len(d) / calls,
                     "time_per_call": {"value": sum(d) / calls, "unit": "s"}} for name, d in ranked[:top]],
        "distinct": len(per_name),
        "device_time_per_call": figure(total, "s", f"sum of the profiled {what}' times over {calls} calls / "
                                                   f"{calls}, each call profiled alone"
                                                   + (" after an L2 flush" if flusher is not None else "")),
        "host_time_per_call": figure(host, "s", f"time.perf_counter around {calls} back-to-back calls / {calls}, "
                                                "not waiting for the device"),
    }
