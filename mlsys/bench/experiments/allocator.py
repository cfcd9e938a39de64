"""PyTorch's caching allocator: memory_allocated vs memory_reserved through allocations and frees, and a real OOM message."""

from __future__ import annotations

import os
from typing import Any

SHOWN_IN = ("chapters/03_host_and_device",)
NEEDS = "cuda"

MIB = 2**20


def run(ctx: Any) -> dict[str, Any]:
    import torch

    torch.cuda.empty_cache()
    steps: list[dict[str, Any]] = []

    def snap(label: str) -> None:
        st = torch.cuda.memory_stats()
        steps.append({"step": label,
                      "allocated": {"value": torch.cuda.memory_allocated(), "unit": "byte"},
                      "reserved": {"value": torch.cuda.memory_reserved(), "unit": "byte"},
                      "segments": st.get("segment.all.current"),
                      "cuda_malloc_calls_so_far": st.get("segment.all.allocated"),
                      "inactive_split": {"value": st.get("inactive_split_bytes.all.current", 0), "unit": "byte"}})

    snap("start")
    blocks: list[Any] = [torch.empty(256 * MIB, dtype=torch.uint8, device="cuda") for _ in range(8)]
    snap("allocate 8 x 256 MiB")
    for i in range(0, 8, 2):
        blocks[i] = None
    snap("free every other block (4 x 256 MiB)")
    again = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
    snap("allocate 256 MiB (fits a cached block)")
    big = torch.empty(512 * MIB, dtype=torch.uint8, device="cuda")
    snap("allocate 512 MiB (no cached block is big enough)")
    del again, big
    blocks = []
    snap("free everything")
    torch.cuda.empty_cache()
    snap("torch.cuda.empty_cache()")
    small = [torch.empty(1000, dtype=torch.float32, device="cuda") for _ in range(10)]
    snap("allocate 10 x 4000 B")
    del small
    # segment sizes the allocator picks for single requests of several sizes (the rounding rule's range)
    segments = []
    for req in (512 * 1024, MIB + 1, 4 * MIB, 9 * MIB, 11 * MIB, 100 * MIB + 1):
        torch.cuda.empty_cache()
        before = torch.cuda.memory_reserved()
        t = torch.empty(req, dtype=torch.uint8, device="cuda")
        segments.append({"request": {"value": req, "unit": "byte"},
                         "reserved_growth": {"value": torch.cuda.memory_reserved() - before, "unit": "byte"}})
        del t
    oom = None
    try:
        torch.empty(4 * 2**40, dtype=torch.uint8, device="cuda")  # 4 TiB
    except torch.OutOfMemoryError as exc:
        oom = str(exc).splitlines()[0][:400]
    torch.cuda.empty_cache()
    return {"PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), "steps": steps,
            "segment_for_request": segments, "oom_message_4TiB": oom}
