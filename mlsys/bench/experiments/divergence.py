"""Warp divergence: time of a kernel whose 32 lanes per warp take k = 1..32 different paths, against paths that differ only between warps.

Each thread does ``iters`` dependent FMAs on the path ``key % paths``; ``key`` is the lane
(``threadIdx % 32``: paths differ inside a warp) or the warp index (paths differ only between
warps). CUDA C through cupy, timed with :func:`mlsys.bench.timing.time_fn` (CUDA events on the
default stream, which cupy launches on too).
"""

from __future__ import annotations

from typing import Any

SHOWN_IN = ("chapters/04_execution_model",)
NEEDS = "cuda"

DIVERGENCE_CUDA_C = r"""
extern "C" __global__ void diverge(float *out, int paths, int warp_level, int iters) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    int key = warp_level ? (tid / 32) : (threadIdx.x % 32);
    int path = key % paths;
    float x = (float)tid;
    for (int p = 0; p < 32; ++p) {
        if (path == p) {
            for (int j = 0; j < iters; ++j) x = x * 0.999f + (float)p;
        }
    }
    out[tid] = x;
}
"""




def run(ctx: Any) -> dict[str, Any]:
    import cupy as cp
    import numpy as np
    import torch

    from ..timing import time_fn

    kernel = cp.RawKernel(DIVERGENCE_CUDA_C, "diverge")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    blocks, threads, iters = sms * 8, 256, (1024 if ctx.quick else 4096)
    out = cp.empty(blocks * threads, dtype=cp.float32)

    def timed(paths: int, warp_level: int) -> Any:
        args = (out, np.int32(paths), np.int32(warp_level), np.int32(iters))
        return time_fn(lambda: kernel((blocks,), (threads,), args), "cuda",
                       what=f"diverge paths={paths} warp_level={warp_level}", repeats=5, warmup=1, flush_l2=False)

    base = timed(1, 0)
    rows = []
    for k in ([1, 2, 4, 8, 16, 32] if ctx.quick else list(range(1, 33))):
        lane, warp = timed(k, 0), timed(k, 1)
        rows.append({"paths": k, "within_warp": {"value": lane.median, "unit": "s"},
                     "between_warps": {"value": warp.median, "unit": "s"},
                     "slowdown_within_warp": lane.median / base.median,
                     "slowdown_between_warps": warp.median / base.median})
    return {"backend": f"cupy {cp.__version__} RawKernel", "kernel_source_cuda_c": DIVERGENCE_CUDA_C,
            "method": "each thread does `iters` dependent FMAs on the path `key % paths`; key is the lane (paths differ "
                      f"inside a warp) or the warp index (paths differ only between warps); {blocks} blocks x {threads} "
                      f"threads, iters={iters}; median of 5 (CUDA events)",
            "blocks": blocks, "threads_per_block": threads, "iters": iters,
            "uniform": {"value": base.median, "unit": "s", "timing": base.to_json()}, "results": rows}
