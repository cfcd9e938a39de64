"""Useful read bandwidth when neighbouring lanes read fp32 elements ``stride`` apart (stride 1: coalesced), strides 1-32.

A Triton kernel: lane i of program p loads element ``(p * BLOCK + i) * stride`` of a 1 GiB array
and each program writes the sum of what it read (checked against float64 after timing). Useful
bandwidth counts only the elements used (4 bytes each); the DRAM traffic the access pattern
causes is a model's business (:mod:`mlsys.memory_access`).
"""

from __future__ import annotations

from typing import Any

SHOWN_IN = ("chapters/04_execution_model",)
NEEDS = "any"

STRIDES = (1, 2, 4, 8, 16, 32)


def run(ctx: Any) -> dict[str, Any]:
    import math
    from functools import partial

    import torch
    import triton

    from ..timing import time_fn
    from ._memory_kernels import strided_sum

    small = ctx.quick or ctx.device != "cuda"
    elems = (1 << 12) if small else (1 << 28)  # fp32: 1 GiB on the GPU
    block = 64 if small else 1024
    x = torch.rand(elems, device=ctx.device, dtype=torch.float32)
    rows = []
    for stride in STRIDES:
        n = elems // stride
        grid = (triton.cdiv(n, block),)
        out = torch.empty(grid[0], device=ctx.device, dtype=torch.float32)
        expect = x[: n * stride: stride].double().sum().item()

        def ok(_: Any, out: Any = out, expect: float = expect) -> bool:
            return math.isclose(out.double().sum().item(), expect, rel_tol=1e-4)

        t = time_fn(partial(strided_sum[grid], x, out, n, stride, BLOCK=block, num_warps=4), ctx.device,
                    what=f"strided read, stride {stride}", repeats=1 if small else 10, warmup=1, check=ok)
        rows.append({"stride": stride, "elements_read": n, "useful": {"value": n * 4, "unit": "byte"},
                     "time": {"value": t.median, "unit": "s"}, "timing": t.to_json(),
                     "useful_bandwidth": {"value": n * 4 / t.median, "unit": "byte/s"}})
    return {"dtype": "float32", "element": {"value": 4, "unit": "byte"}, "array": {"value": elems * 4, "unit": "byte"},
            "block": block,
            "method": f"Triton kernel, BLOCK={block} elements per program, num_warps=4; lane i of a program loads "
                      "element (p*BLOCK+i)*stride; useful bandwidth = elements read x 4 B / median time (mlsys.bench."
                      "timing: CUDA events, L2 flushed before each timed call)",
            "results": rows}
