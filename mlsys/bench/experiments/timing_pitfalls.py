"""A large bf16 matmul timed wrongly and rightly: host timer without sync, with sync, CUDA events, first call, a queued loop.

Every figure is a :mod:`mlsys.bench.timing` measurement; what differs is what the timed function
contains (a ``torch.cuda.synchronize()`` or not) and which clock brackets it, which is the point.
"""

from __future__ import annotations

from typing import Any

SHOWN_IN = ("chapters/03_host_and_device",)
NEEDS = "cuda"

REPEATS = 20
LOOP = 20


def run(ctx: Any) -> dict[str, Any]:
    import torch

    from ..timing import time_cpu, time_cuda

    n = 4096 if ctx.quick else 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()

    def mm() -> Any:
        return a @ b

    def mm_sync() -> Any:
        out = a @ b
        torch.cuda.synchronize()
        return out

    def loop() -> None:
        for _ in range(LOOP):
            a @ b

    def loop_sync() -> None:
        loop()
        torch.cuda.synchronize()

    first = time_cpu(mm_sync, what="the first a @ b of the process, with sync", repeats=1, warmup=0)

    def drain() -> None:
        torch.cuda.synchronize()

    # host clock without sync measures only the launch; drain the queue between repeats, outside the timed region
    no_sync = []
    for _ in range(REPEATS):
        drain()
        no_sync.append(time_cpu(mm, what="a @ b, perf_counter, no sync", repeats=1, warmup=0))
    drain()
    with_sync = time_cpu(mm_sync, what="a @ b then torch.cuda.synchronize(), perf_counter", repeats=REPEATS, warmup=3)
    events = time_cuda(mm, what="a @ b between two CUDA events", repeats=REPEATS, warmup=3, flush_l2=False)
    drain()
    enqueue = time_cpu(loop, what=f"{LOOP} x a @ b queued, perf_counter, no sync", repeats=1, warmup=0)
    drain()
    after_sync = time_cpu(loop_sync, what=f"{LOOP} x a @ b then one sync, perf_counter", repeats=1, warmup=0)

    def q(t: Any, how: str, median: float | None = None) -> dict[str, Any]:
        return {"value": t.median if median is None else median, "unit": "s", "method": how, "timing": t.to_json()}

    import statistics

    ns = statistics.median(t.median for t in no_sync)
    return {
        "op": f"bf16 matmul {n}x{n} @ {n}x{n}", "m": n, "n": n, "k": n, "dtype": "bf16", "repeats": REPEATS,
        "loop": LOOP,
        "first_call": q(first, "perf_counter around the first call and a sync (cuBLAS set-up included)"),
        "perf_counter_no_sync": q(no_sync[-1], f"perf_counter around a @ b with no sync, median of {REPEATS} "
                                  "(the queue drained between calls, outside the timed region)", ns),
        "perf_counter_with_sync": q(with_sync, "perf_counter around a @ b and torch.cuda.synchronize()"),
        "cuda_events": q(events, "CUDA events around a @ b (L2 not flushed: the operands stay where they are)"),
        "loop_enqueue": q(enqueue, f"perf_counter around {LOOP} queued a @ b, no sync"),
        "loop_after_sync": q(after_sync, f"perf_counter around {LOOP} queued a @ b and one sync"),
    }
