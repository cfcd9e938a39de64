"""Read bandwidth of all SMs sweeping a buffer of 1 MiB to 2 GiB with L2-only loads: the L2 and HBM plateaus.

A Triton kernel (16 programs per SM, 4 warps each) reads the buffer ``reps`` times over (about
4 GiB per timed call) with ``cache_modifier=".cg"`` and writes per-program sums, checked exactly
after timing. Bandwidth = bytes read / median time. Only reads are counted (the per-program
sums written are under 0.1% of the bytes).
"""

from __future__ import annotations

from typing import Any

SHOWN_IN = ("chapters/05_memory_hierarchy", "chapters/20_measuring_a_gpu")
NEEDS = "any"

KIB, MIB, GIB = 2**10, 2**20, 2**30


def run(ctx: Any) -> dict[str, Any]:
    import math
    from functools import partial

    import torch

    from ..timing import time_fn
    from ._memory_kernels import sweep

    small = ctx.device != "cuda"
    block = 64 if small else 512
    if small:
        sizes, target, programs_max = [16 * KIB, 64 * KIB], 64 * KIB, 2
    else:
        top = 28 if ctx.quick else 32
        sizes = [1 << k for k in range(20, top)]
        target = 4 * GIB
        programs_max = torch.cuda.get_device_properties(0).multi_processor_count * 16
    rows = []
    for ws in sizes:
        n = ws // 4
        n_chunks = n // block
        programs = min(programs_max, n_chunks)
        reps = max(1, target // ws)
        x = torch.ones(n, device=ctx.device, dtype=torch.float32)
        out = torch.empty(programs * block, device=ctx.device, dtype=torch.float32)

        def ok(_: Any, out: Any = out, n: int = n, reps: int = reps) -> bool:
            return math.isclose(out.double().sum().item(), float(n) * reps, rel_tol=1e-6)

        t = time_fn(partial(sweep[(programs,)], x, out, n_chunks, reps, BLOCK=block, num_warps=4), ctx.device,
                    what=f"sweep of {ws} bytes x {reps}", repeats=1 if small else 5, warmup=1, check=ok)
        rows.append({"working_set": {"value": ws, "unit": "byte"}, "read": {"value": ws * reps, "unit": "byte"},
                     "time": {"value": t.median, "unit": "s"}, "programs": programs, "timing": t.to_json(),
                     "bandwidth": {"value": ws * reps / t.median, "unit": "byte/s"}})
        del x, out
    return {"method": f"Triton kernel, up to {programs_max} programs (16 per SM), BLOCK={block} fp32 per load, "
                      "num_warps=4, loads with cache_modifier='.cg' (L2 only); each timed call reads about "
                      f"{target // MIB} MiB (the buffer reps times); bandwidth = bytes read / median of 5 (mlsys.bench."
                      "timing: CUDA events, L2 flushed before each timed call)",
            "results": rows}
