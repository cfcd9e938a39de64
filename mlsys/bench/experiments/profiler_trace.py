"""Profiler trace of a small training step: kernel names, CPU vs GPU time, gaps, allocated vs reserved memory.

Two multilayer perceptrons (a tiny one, where the host's launch cost should dominate, and a
large one, where the GPU should be busy) each take training steps (bf16 autocast forward, loss,
backward, AdamW step) under ``torch.profiler``. From the profiler's trace (its Chrome-trace
export) the record keeps the kernels that took the most GPU time, the GPU's busy time, the gaps
between consecutive kernels on the stream, and the host's time for the same steps (timed with
:func:`mlsys.bench.timing.time_fn`). Memory allocated and reserved by PyTorch's caching
allocator is read at each phase of one step. On a CPU the same code runs with CPU operators
only (no kernels, no device memory).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from typing import Any

SHOWN_IN = ("chapters/14_profiling",)
NEEDS = "any"

PROFILED_STEPS = 3


def kernel_stats(events: list[dict[str, Any]], steps: int, top: int = 8) -> dict[str, Any]:
    """Summarise Chrome-trace ``events`` (``ts``/``dur`` in microseconds): GPU kernels by total time,
    busy time, and the gaps between consecutive kernels (sorted by start), per step."""
    kernels = sorted((e for e in events if e.get("cat") == "kernel" and "dur" in e), key=lambda e: e["ts"])
    if not kernels:
        return {"kernels": 0}
    by_name: dict[str, list[float]] = {}
    for k in kernels:
        by_name.setdefault(k["name"], []).append(float(k["dur"]))
    busy = sum(float(k["dur"]) for k in kernels)
    gaps = [max(0.0, float(b["ts"]) - float(a["ts"]) - float(a["dur"])) for a, b in zip(kernels, kernels[1:], strict=False)]
    span = float(kernels[-1]["ts"]) + float(kernels[-1]["dur"]) - float(kernels[0]["ts"])
    ranked = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]
    return {
        "kernels": len(kernels),
        "kernels_per_step": len(kernels) / steps,
        "distinct": len(by_name),
        "busy_per_step": {"value": busy / steps * 1e-6, "unit": "s"},
        "span_per_step": {"value": span / steps * 1e-6, "unit": "s"},
        "busy_fraction": {"value": busy / span if span > 0 else 1.0, "unit": "",
                          "method": "sum of kernel durations / time from first kernel start to last kernel end"},
        "gap_median": {"value": statistics.median(gaps) * 1e-6 if gaps else 0.0, "unit": "s"},
        "gap_max": {"value": max(gaps) * 1e-6 if gaps else 0.0, "unit": "s"},
        "gaps_per_step": {"value": sum(gaps) / steps * 1e-6, "unit": "s"},
        "top": [{"name": name[:120], "calls": len(d), "total": {"value": sum(d) * 1e-6, "unit": "s"},
                 "share": {"value": sum(d) / busy, "unit": ""}} for name, d in ranked],
    }


def _model(torch: Any, width: int, depth: int, device: str) -> Any:
    layers: list[Any] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).to(device)


def _config(torch: Any, ctx: Any, name: str, batch: int, width: int, depth: int) -> dict[str, Any]:
    from ..timing import time_fn

    dev = ctx.device
    torch.manual_seed(0)
    model = _model(torch, width, depth, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=dev)
    y = torch.randn(batch, width, device=dev)
    dtype = torch.bfloat16
    cuda = dev == "cuda"
    memory: dict[str, Any] = {}

    def note_memory(phase: str) -> None:
        if cuda:
            memory[phase] = {"allocated": {"value": torch.cuda.memory_allocated(), "unit": "B"},
                             "reserved": {"value": torch.cuda.memory_reserved(), "unit": "B"}}

    def step(record: bool = False) -> Any:
        if record:
            note_memory("before forward")
        with torch.autocast(device_type=dev, dtype=dtype):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        if record:
            note_memory("after forward")
        loss.backward()
        if record:
            note_memory("after backward")
        opt.step()
        if record:
            note_memory("after optimizer step")
        opt.zero_grad(set_to_none=True)
        if record:
            note_memory("after zero_grad")
        return loss

    for _ in range(3):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    step(record=True)
    if cuda:
        memory["peak allocated"] = {"value": torch.cuda.max_memory_allocated(), "unit": "B"}
    timing = time_fn(step, dev, what=f"{name} MLP training step", repeats=5 if ctx.quick else 20, warmup=1,
                     flush_l2=False)

    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(PROFILED_STEPS):
            step()
        if cuda:
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            events = json.load(f).get("traceEvents", [])
    ops = prof.key_averages()
    top_cpu = sorted(ops, key=lambda e: -e.self_cpu_time_total)[:6]
    params = sum(p.numel() for p in model.parameters())
    return {
        "shape": {"batch": batch, "width": width, "depth": depth, "parameters": params},
        "step": {"time": {"value": timing.median, "unit": "s"}, "timing": timing.to_json(),
                 "method": "median wall time of one step (CUDA events on a GPU), outside the profiler"},
        "gpu": kernel_stats(events, PROFILED_STEPS),
        "cpu_ops": [{"name": e.key, "calls": e.count // PROFILED_STEPS,
                     "self_cpu": {"value": e.self_cpu_time_total * 1e-6 / PROFILED_STEPS, "unit": "s"}}
                    for e in top_cpu],
        "cpu_self_total": {"value": sum(e.self_cpu_time_total for e in ops) * 1e-6 / PROFILED_STEPS, "unit": "s",
                           "method": "sum of every operator's self CPU time per step, from key_averages()"},
        "memory": memory,
    }


def run(ctx: Any) -> dict[str, Any]:
    import torch

    small = (64, 256, 4) if ctx.quick or ctx.device != "cuda" else (64, 512, 8)
    large = (256, 512, 4) if ctx.quick or ctx.device != "cuda" else (8192, 4096, 8)
    return {
        "tiny": _config(torch, ctx, "tiny", *small),
        "large": _config(torch, ctx, "large", *large),
        "method": f"torch.profiler over {PROFILED_STEPS} steps after 3 warm-up steps; kernels from its Chrome trace",
    }
