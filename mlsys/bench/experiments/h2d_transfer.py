"""Host-to-device copies from pageable and pinned memory, and device-to-host into pinned memory, 64 KiB to 1 GiB.

Figures are this machine's host path: a pageable copy is staged by the driver through a pinned
bounce buffer with the CPU copying, so its rate depends on the host's memory bandwidth and load
(a VM's host path, not the GPU's link); a pinned copy is a DMA over the link.
"""

from __future__ import annotations

from typing import Any

SHOWN_IN = ("chapters/03_host_and_device",)
NEEDS = "cuda"

MIB = 2**20


def run(ctx: Any) -> dict[str, Any]:
    import torch

    from ..timing import time_fn

    sizes = (64 * 1024, MIB, 16 * MIB) if ctx.quick else (64 * 1024, MIB, 16 * MIB, 256 * MIB, 1024 * MIB)
    rows = []
    for size in sizes:
        pageable = torch.empty(size, dtype=torch.uint8).fill_(1)
        pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True).fill_(1)
        dst = torch.empty(size, dtype=torch.uint8, device="cuda")
        reps = 10 if size >= 256 * MIB else 30
        row: dict[str, Any] = {"size": {"value": size, "unit": "byte"}}
        for kind, src, d in (("pageable", pageable, dst), ("pinned", pinned, dst), ("d2h_pinned", dst, pinned)):
            t = time_fn(lambda s=src, d=d: d.copy_(s, non_blocking=True), "cuda", what=f"{kind} copy of {size} bytes",
                        repeats=reps, warmup=3, flush_l2=False)
            row[kind] = {"value": size / t.median, "unit": "byte/s", "time": {"value": t.median, "unit": "s"},
                         "timing": t.to_json()}
        rows.append(row)
        del pageable, pinned, dst
    return {"rows": rows,
            "method": "bytes / median time of dst.copy_(src, non_blocking=True) between CUDA events; pageable copies "
                      "go through the driver's pinned staging buffer (this machine's host memory path)"}
