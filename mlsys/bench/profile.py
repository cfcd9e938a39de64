"""Per-kernel profiles: what one call of a function runs on the device, by name, and for how long.

A time per call (CUDA events around one call) counts everything between the two events: the kernels,
and any host work the GPU waits for (argument checks, descriptor set-up, the launch path itself). To
explain a measured time, look at the kernels: :func:`kernel_profile` records them from
``torch.profiler``, with the host's own time per call beside them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .experiment import quantity

__all__ = ["kernel_profile", "short_kernel_name"]


def short_kernel_name(name: str, args: int = 0) -> str:
    """A kernel's name without ``void``, parameters, namespaces and template arguments but the first ``args``.

    ``void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<c10::BFloat16, ...>(...)`` gives
    ``cunn_SoftMaxForwardReg``; ``void at::native::elementwise_kernel<128, 4, ...>(...)`` with ``args=2``
    gives ``elementwise_kernel<128, 4>``; a name with none of these (``nvjet_sm90_tst_64x8_...``) is
    returned as is.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"short_kernel_name needs a kernel name, got {name!r}")
    if args < 0:
        raise ValueError(f"args counts template arguments to keep, got {args}")
    head, _, rest = name.strip().removeprefix("void ").partition("<")
    head = head.split("(anonymous namespace)::")[-1].split("(", 1)[0].rsplit("::", 1)[-1].strip()
    if args and rest:
        head += "<" + ", ".join(_template_args(rest)[:args]) + ">"
    return head


def _template_args(rest: str) -> list[str]:
    """The top-level arguments of a template whose opening ``<`` was just consumed (nested ``<>``/``()`` kept)."""
    out, depth, current = [], 0, ""
    for ch in rest:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            if depth == 0:  # the template's own closing bracket
                break
            depth -= 1
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    out.append(current.strip())
    return out


def kernel_profile(fn: Callable[[], Any], device: str, calls: int = 5, flush: bool = True,
                   top: int = 8) -> dict[str, Any]:
    """What one call of ``fn`` runs, by name, from ``torch.profiler``, and where its time goes.

    Each of ``calls`` calls is profiled on its own, after the L2 (on a GPU) has been flushed by
    writing a buffer larger than it outside the profiled region, so no flush kernel is counted and no
    input starts in the cache. On a GPU the record keeps the ``top`` kernels by time (name, launches
    per call and device time per call, from the profiler's Chrome trace, ``cat == "kernel"``), how many
    distinct kernels ran, and the sum over all of them, the *device time per call*; on a CPU, where there are no kernels, it keeps the operators' self CPU
    time per call (``key_averages``), which add up the same way.

    It also keeps the *host time per call*: the median of ``calls`` calls issued back to back, each
    timed on the host by :func:`mlsys.bench.timing.time_cpu`, without waiting for the device (the
    time the Python thread spends in the call: argument checks, descriptor set-up, the launches). When it exceeds the device
    time, the host, not the kernel, sets the pace of a stream of such calls.
    """
    import json
    import os
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile

    from .timing import l2_flush_bytes, time_cpu

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
    host = time_cpu(fn, what="one call, not waiting for the device", repeats=calls, warmup=0)
    sync()
    return {
        "what": what,
        "calls": calls,
        "kernels": [{"name": name[:200], "launches_per_call": len(d) / calls,
                     "time_per_call": {"value": sum(d) / calls, "unit": "s"}} for name, d in ranked[:top]],
        "distinct": len(per_name),
        "device_time_per_call": quantity(total, "s", method=f"sum of the profiled {what}' times over {calls} calls / "
                                                   f"{calls}, each call profiled alone"
                                                   + (" after an L2 flush" if flusher is not None else "")),
        "host_time_per_call": quantity(host.median, "s", method=f"median of {calls} calls issued back to back, each "
                                                              "timed on the host (mlsys.bench.timing.time_cpu) "
                                                              "without waiting for the device"),
    }
