"""Warp divergence: time of a kernel whose 32 lanes per warp take k = 1..32 different paths, against paths that differ only between warps.

Each thread does ``iters`` dependent FMAs on the path ``key % paths``; ``key`` is the lane
(``threadIdx % 32``: paths differ inside a warp) or the warp index (paths differ only between
warps). CUDA C through cupy, timed with :func:`mlsys.bench.timing.time_fn` (CUDA events on the
default stream, which cupy launches on too).

On a CPU (``mlsys.bench.run("divergence", quick=True)`` on a laptop) the same kernel runs as a NumPy
emulation of a SIMT machine: each warp of 32 lanes executes every path that at least one of its lanes
takes, over all 32 lanes with the others masked off, so a warp whose lanes take k paths does k
passes. The record names the backend; it shows the mechanism, not a GPU's timings.
"""

from __future__ import annotations

from typing import Any

SHOWN_IN = ("chapters/04_execution_model",)
NEEDS = "any"
WARP = 32

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

def simt_emulation(warps: int, paths: int, warp_level: bool, iters: int) -> tuple[Any, int]:
    """The kernel's output for ``warps`` warps of 32 lanes, computed as a SIMT machine does (NumPy),
    and the number of warp-passes it took.

    For each path ``p``, the warps with at least one lane on ``p`` execute its loop over all their
    lanes, with only those lanes' results kept (the mask): ``sum over p of (warps taking p)`` warp-passes,
    ``k * warps`` when the lanes of every warp take k paths, ``warps`` when paths differ only between warps.
    """
    import numpy as np

    tid = np.arange(warps * WARP).reshape(warps, WARP)
    key = tid // WARP if warp_level else tid % WARP
    path = key % paths
    x = tid.astype(np.float32)
    passes = 0
    for p in range(min(paths, WARP)):
        mask = path == p
        active = mask.any(axis=1)  # the warps that must step through path p
        if not active.any():
            continue
        passes += int(active.sum())
        xs, ms = x[active], mask[active]
        y = xs.copy()
        for _ in range(iters):
            y = y * np.float32(0.999) + np.float32(p)
        x[active] = np.where(ms, y, xs)
    return x.reshape(-1), passes


def _run_cpu(ctx: Any) -> dict[str, Any]:
    import numpy as np

    from ..timing import time_fn

    warps, iters = (64, 16) if ctx.quick else (256, 64)

    def timed(paths: int, warp_level: bool) -> Any:
        return time_fn(lambda: simt_emulation(warps, paths, warp_level, iters), "cpu",
                       what=f"simt emulation paths={paths} warp_level={int(warp_level)}", repeats=5, warmup=1,
                       flush_l2=False)

    base = timed(1, False)
    rows = []
    for k in ([1, 2, 4, 8, 16, 32] if ctx.quick else list(range(1, 33))):
        lane, warp = timed(k, False), timed(k, True)
        rows.append({"paths": k, "within_warp": {"value": lane.median, "unit": "s"},
                     "between_warps": {"value": warp.median, "unit": "s"},
                     "slowdown_within_warp": lane.median / base.median,
                     "slowdown_between_warps": warp.median / base.median,
                     "warp_passes_within_warp": simt_emulation(warps, k, False, 1)[1],
                     "warp_passes_between_warps": simt_emulation(warps, k, True, 1)[1]})
    ctx.note("CPU: a NumPy emulation of SIMT masking, not a GPU measurement")
    return {"backend": f"numpy {np.__version__} SIMT emulation (CPU)", "kernel_source_cuda_c": DIVERGENCE_CUDA_C,
            "method": "the CUDA kernel's paths emulated warp by warp in NumPy: a warp executes every path one of its "
                      f"lanes takes, all 32 lanes masked; {warps} warps of {WARP} lanes, iters={iters}; median of 5 "
                      "(perf_counter)",
            "blocks": warps, "threads_per_block": WARP, "iters": iters,
            "uniform": {"value": base.median, "unit": "s", "timing": base.to_json()}, "results": rows}


def run(ctx: Any) -> dict[str, Any]:
    if ctx.device != "cuda":
        return _run_cpu(ctx)
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
