"""A 512 MiB pinned host-to-device copy and four bf16 8192^3 matmuls, one after the other and on two streams."""

from __future__ import annotations

from typing import Any

SHOWN_IN = ("chapters/03_host_and_device",)
NEEDS = "cuda"

MIB = 2**20


def run(ctx: Any) -> dict[str, Any]:
    import torch

    from ..timing import time_cpu

    size = (64 if ctx.quick else 512) * MIB
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True).fill_(1)
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    n = 4096 if ctx.quick else 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    copy_stream, compute_stream = torch.cuda.Stream(), torch.cuda.Stream()

    def copy() -> None:
        dev.copy_(host, non_blocking=True)

    def compute() -> None:
        for _ in range(4):
            a @ b

    def one_stream() -> None:
        copy()
        compute()

    def two_streams() -> None:
        with torch.cuda.stream(copy_stream):
            copy()
        with torch.cuda.stream(compute_stream):
            compute()

    res: dict[str, Any] = {"copy_size": {"value": size, "unit": "byte"}, "compute": f"4 x bf16 matmul {n}^3",
                           "method": "perf_counter around the work and a torch.cuda.synchronize(), median of 5"}
    for name, fn in (("copy_only", copy), ("compute_only", compute), ("one_stream", one_stream),
                     ("two_streams", two_streams)):
        def synced(fn: Any = fn) -> None:
            fn()
            torch.cuda.synchronize()
        t = time_cpu(synced, what=name, repeats=5, warmup=1)
        res[name] = {"value": t.median, "unit": "s", "timing": t.to_json()}
    return res
