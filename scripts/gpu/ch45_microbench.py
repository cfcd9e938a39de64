"""Microbenchmarks for chapters 4 (execution model) and 5 (memory hierarchy).

Run on a CUDA GPU from the repository root::

    OUT=/some/dir python3 scripts/gpu/ch45_microbench.py

and it writes ``$OUT/ch45_h100.json`` (about a minute on an H100). Without a GPU it runs the
same code at tiny sizes (Triton interpreter, numba's CUDA simulator) so that it can be tested
on a laptop; those numbers mean nothing and the file says ``"tiny_cpu_test": true``.

What it measures (each section records its method next to its numbers):

* ``strided_read``: useful read bandwidth when consecutive lanes read elements ``stride``
  apart (stride 1 is coalesced), for strides 1, 2, 4, ..., 32 fp32 elements.
* ``divergence``: time of a kernel in which the 32 lanes of each warp follow ``k`` different
  paths (k = 1 ... 32) through the same amount of work, and a control where paths differ only
  between warps (no divergence inside a warp).
* ``pointer_chase``: latency of one dependent load (ns and SM cycles), a single thread following
  a random cycle through a buffer of 16 KiB ... 1 GiB (one hop per 128-byte line, a warm-up lap
  first), with loads cached in L1 and L2 (``results``: the L1 plateau) and in L2 only
  (``results_cg``: the L2 and HBM plateaus). CUDA C through cupy; Triton if cupy is unusable.
* ``bandwidth_vs_working_set``: read bandwidth of all SMs repeatedly sweeping a buffer of
  1 MiB ... 2 GiB with loads that bypass L1 (``.cg``), which shows the L2 and HBM plateaus.
* ``device``: properties from ``torch.cuda.get_device_properties``.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

CUDA = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
if not CUDA:
    # Triton and numba read these when first imported.
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

DEVICE = "cuda" if CUDA else "cpu"
TINY = not CUDA
KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


# --------------------------------------------------------------------------- timing
def timed(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` in seconds (CUDA events on a GPU, perf_counter on a CPU)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if CUDA:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def sm_count() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count if CUDA else 4


# --------------------------------------------------------------------------- strided read
@triton.jit
def _strided_sum(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    """Program p reads elements (p*BLOCK + i) * stride, i < BLOCK, and writes their sum."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs.to(tl.int64) * stride, mask=mask, other=0.0)
    tl.store(out_ptr + pid, tl.sum(x, axis=0))


def strided_read() -> dict[str, Any]:
    array_elems = (1 << 12) if TINY else (1 << 28)  # fp32: 1 GiB on the GPU
    block = 64 if TINY else 1024
    x = torch.rand(array_elems, device=DEVICE, dtype=torch.float32)
    results = []
    for stride in (1, 2, 4, 8, 16, 32):
        n = array_elems // stride
        grid = (triton.cdiv(n, block),)
        out = torch.empty(grid[0], device=DEVICE, dtype=torch.float32)

        run = partial(_strided_sum[grid], x, out, n, stride, BLOCK=block, num_warps=4)
        t = timed(run, repeats=1 if TINY else 10)
        expect = x[: n * stride : stride].double().sum().item()
        got = out.double().sum().item()
        assert math.isclose(got, expect, rel_tol=1e-4), (stride, got, expect)
        results.append({"stride_elements": stride, "elements_read": n, "useful_bytes": n * 4,
                        "time_s": t, "useful_bandwidth_GBps": n * 4 / t / 1e9})
    return {
        "dtype": "float32", "element_bytes": 4, "array_bytes": array_elems * 4,
        "method": f"Triton kernel, BLOCK={block} elements per program, num_warps=4; lane i of a "
                  "program loads element (p*BLOCK+i)*stride; useful bandwidth = elements*4 B / "
                  "median time of 10 runs (CUDA events)",
        "results": results,
    }


# --------------------------------------------------------------------------- bandwidth vs working set
@triton.jit
def _sweep(x_ptr, out_ptr, n_chunks, reps, BLOCK: tl.constexpr):
    """Each program reads chunks pid, pid+P, pid+2P, ... of the buffer, ``reps`` times over,
    with loads cached in L2 only (.cg), and writes its running sum (so nothing is dead code)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(reps):
        for c in range(pid, n_chunks, nprog):
            offs = c * BLOCK + tl.arange(0, BLOCK)  # < 2**31 elements: int32 is enough
            acc += tl.load(x_ptr + offs, cache_modifier=".cg")
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)


def bandwidth_vs_working_set() -> dict[str, Any]:
    block = 64 if TINY else 512
    sizes = [16 * KiB, 64 * KiB] if TINY else [(1 << k) for k in range(20, 32)]  # 1 MiB .. 2 GiB
    target = 64 * KiB if TINY else 4 * GiB  # bytes read per timed run
    programs_max = 2 if TINY else sm_count() * 16  # 16 programs x 4 warps = 64 warps per SM
    results = []
    for ws in sizes:
        n = ws // 4
        n_chunks = n // block
        programs = min(programs_max, n_chunks)
        reps = max(1, target // ws)
        x = torch.ones(n, device=DEVICE, dtype=torch.float32)
        out = torch.empty(programs * block, device=DEVICE, dtype=torch.float32)

        run = partial(_sweep[(programs,)], x, out, n_chunks, reps, BLOCK=block, num_warps=4)
        t = timed(run, repeats=1 if TINY else 5)
        total = out.double().sum().item()  # integers below 2**53: exact in float64
        assert math.isclose(total, float(n) * reps, rel_tol=1e-6), (ws, total, n * reps)
        results.append({"working_set_bytes": ws, "bytes_read": ws * reps, "time_s": t,
                        "bandwidth_GBps": ws * reps / t / 1e9, "programs": programs})
        del x, out, run
    return {
        "method": f"Triton kernel, {programs_max} programs max (16 per SM), BLOCK={block} fp32 per "
                  "load, num_warps=4, loads with cache_modifier='.cg' (L2 only); each run reads "
                  "about 4 GiB in total (the buffer reps times); median of 5 runs (CUDA events)",
        "results": results,
    }


# --------------------------------------------------------------------------- pointer chase
# One thread follows j = next[j]. Two kernels differ only in the load: `.ca` (the default for a
# global load: cached in L1 and L2) and `.cg` (cached in L2 only), so that the first shows the L1
# plateau and the second the L2 and HBM plateaus. The loads are inline PTX, so the compiler can
# neither pick another cache operator nor drop or merge them; `end` receives j, so the chain is live.
# The warm-up walk runs in the same launch as the timed walk: L1 contents do not survive from one
# kernel to the next (and the next one may run on another SM).
CHASE_CUDA_C = r"""
__device__ __forceinline__ unsigned int load_ca(const unsigned int *p) {
    unsigned int v;
    asm volatile("ld.global.ca.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ unsigned int load_cg(const unsigned int *p) {
    unsigned int v;
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ long long global_ns() {
    long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// warm hops (not timed), then steps hops timed: times[0] = SM cycles, times[1] = nanoseconds.
template <bool CG>
__device__ __forceinline__ void chase(const unsigned int *next, unsigned int start, long long warm,
                                      long long steps, unsigned int *end, long long *times) {
    unsigned int j = start;
    for (long long s = 0; s < warm; ++s) j = CG ? load_cg(next + j) : load_ca(next + j);
    long long c0 = clock64();
    long long t0 = global_ns();
    for (long long s = 0; s < steps; ++s) j = CG ? load_cg(next + j) : load_ca(next + j);
    long long c1 = clock64();
    long long t1 = global_ns();
    end[0] = j;
    times[0] = c1 - c0;
    times[1] = t1 - t0;
}

extern "C" __global__ void chase_ca(const unsigned int *next, unsigned int start, long long warm,
                                    long long steps, unsigned int *end, long long *times) {
    chase<false>(next, start, warm, steps, end, times);
}

extern "C" __global__ void chase_cg(const unsigned int *next, unsigned int start, long long warm,
                                    long long steps, unsigned int *end, long long *times) {
    chase<true>(next, start, warm, steps, end, times);
}
"""

CHASE_VARIANTS = ("ca", "cg")

# A backend: (name, build, walk, flush). build(order, spacing) puts the chain on the device;
# walk(chain, start, warm, steps, variant) -> (index after warm + steps hops, ns per timed hop,
# SM cycles per timed hop or None); flush() evicts the L2.
ChaseBackend = tuple[str, Callable[[np.ndarray, int], Any],
                     Callable[[Any, int, int, int, str], tuple[int, float, float | None]],
                     Callable[[], None]]


def _flush_bytes() -> int:
    """Bytes of scratch written to evict the L2: four times its size (16 KiB on a CPU)."""
    if not CUDA:
        return 16 * KiB
    return 4 * int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * MiB))


def _chase_cupy() -> ChaseBackend:
    import cupy as cp

    kernels = {v: cp.RawKernel(CHASE_CUDA_C, f"chase_{v}") for v in CHASE_VARIANTS}
    end = cp.zeros(1, dtype=cp.uint32)
    times = cp.zeros(2, dtype=cp.int64)
    scratch = cp.zeros(_flush_bytes() // 4, dtype=cp.float32)

    def build(order: np.ndarray, spacing: int) -> Any:
        nxt = cp.zeros(order.size * spacing, dtype=cp.uint32)
        o = cp.asarray(order)
        nxt[o * spacing] = (cp.roll(o, -1) * spacing).astype(cp.uint32)
        return nxt

    def walk(nxt: Any, start: int, warm: int, steps: int,
             variant: str) -> tuple[int, float, float | None]:
        args = (nxt, np.uint32(start), np.int64(warm), np.int64(steps), end, times)
        kernels[variant]((1,), (1,), args)
        cycles, ns = (int(t) for t in times.get())  # .get() waits for the kernel
        return int(end.get()[0]), ns / steps, cycles / steps

    def flush() -> None:
        cp.add(scratch, 1.0, out=scratch)

    return ("cupy " + cp.__version__ + " RawKernel (CUDA C, inline PTX loads, clock64 and "
            "globaltimer)", build, walk, flush)


@triton.jit(do_not_specialize=["start", "steps"])  # one compilation, not one per value
def _chase(next_ptr, out_ptr, start, steps, CG: tl.constexpr):
    """Fallback: one program follows idx = next[idx] ``steps`` times (steps >= 1)."""
    if CG:
        idx = tl.load(next_ptr + start, cache_modifier=".cg")  # a tensor: fixes the loop-carried type
        for _ in range(steps - 1):
            idx = tl.load(next_ptr + idx, cache_modifier=".cg")
    else:
        idx = tl.load(next_ptr + start)
        for _ in range(steps - 1):
            idx = tl.load(next_ptr + idx)
    tl.store(out_ptr, idx)


def _chase_triton() -> ChaseBackend:
    out = torch.zeros(1, device=DEVICE, dtype=torch.int32)
    scratch = torch.zeros(_flush_bytes() // 4, device=DEVICE, dtype=torch.float32)

    def build(order: np.ndarray, spacing: int) -> Any:
        nxt = torch.zeros(order.size * spacing, device=DEVICE, dtype=torch.int32)
        o = torch.from_numpy(order).to(DEVICE)
        nxt[o * spacing] = (torch.roll(o, -1) * spacing).to(torch.int32)
        return nxt

    def seconds(nxt: Any, start: int, n: int, variant: str) -> float:
        run = partial(_chase[(1,)], nxt, out, start, n, CG=variant == "cg", num_warps=1)
        if not CUDA:
            c0 = time.perf_counter()
            run()
            return time.perf_counter() - c0
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        run()
        t1.record()
        torch.cuda.synchronize()
        return t0.elapsed_time(t1) / 1e3

    def walk(nxt: Any, start: int, warm: int, steps: int,
             variant: str) -> tuple[int, float, float | None]:
        # no timer inside a Triton kernel: time warm and warm + steps hops from the same start
        # and take the difference, so that launch cost and warm-up cancel
        t_warm = seconds(nxt, start, max(warm, 1), variant)
        t_all = seconds(nxt, start, warm + steps, variant)
        return int(out.item()), (t_all - t_warm) / steps * 1e9, None

    def flush() -> None:
        scratch.add_(1.0)

    return "triton " + triton.__version__ + " (fallback: one program, num_warps=1)", build, walk, flush


def _sm_clock_mhz() -> dict[str, Any]:
    """Current and maximum SM clock from NVML (MHz), or the reason it could not be read."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            return {"current": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                    "max": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)}
        finally:
            pynvml.nvmlShutdown()
    except Exception as e:  # noqa: BLE001 - no NVML (CPU test, missing package): say why
        return {"error": f"{type(e).__name__}: {e}"}


def _checked_walk(walk: Callable[..., tuple[int, float, float | None]], chain: Any,
                  order: np.ndarray, position: np.ndarray, spacing: int, start: int, warm: int,
                  steps: int, variant: str) -> tuple[int, float, float | None]:
    """walk(), with its end index checked against the same walk done on the host."""
    end, ns, cycles = walk(chain, start, warm, steps, variant)
    expect = int(order[(position[start // spacing] + warm + steps) % order.size]) * spacing
    assert end == expect, (order.size, variant, warm + steps, end, expect)
    return end, ns, cycles


def pointer_chase() -> dict[str, Any]:
    """Latency of one dependent load for working sets of 16 KiB ... 1 GiB, in two variants.

    For each working set W: a random cyclic permutation of its W/128 lines (one index per
    128-byte line, so hardware prefetchers cannot guess the next line); the L2 is flushed by
    writing 4x its size of scratch; then 3 launches, each continuing where the last stopped,
    of one thread doing a warm-up walk (a full lap for W <= 64 MiB, so that sets which fit in
    L1 or L2 sit there; 2**15 hops beyond) followed, in the same launch, by ``steps`` timed
    dependent loads. latency = globaltimer ns / steps and clock64 cycles / steps, median of 3.
    """
    line = 128  # bytes between consecutive slots: one hop per cache line
    spacing = line // 4
    sizes = [4 * KiB, 16 * KiB] if TINY else [(1 << k) for k in range(14, 31)]  # 16 KiB .. 1 GiB
    steps, repeats = (48, 1) if TINY else (100_000, 3)
    full_lap_max, warm_beyond = 1 << 19, 1 << 15  # slots

    errors = []
    backend: ChaseBackend | None = None
    for make in (_chase_cupy, _chase_triton):
        try:
            candidate = make()
            _, build, walk, _ = candidate
            probe = build(np.array([0, 2, 1], dtype=np.int64), spacing)  # cycle 0 -> 2 -> 1 -> 0
            for variant in CHASE_VARIANTS:
                got = walk(probe, 0, 1, 1, variant)[0]
                assert got == 1 * spacing, f"{variant}: 2 hops from slot 0 gave {got}, expected {spacing}"
            backend = candidate
            break
        except Exception:  # noqa: BLE001 - record why a backend was unusable and try the next
            errors.append(traceback.format_exc(limit=3))
    if backend is None:
        return {"skipped": True, "errors": errors}
    name, build, walk, flush = backend

    rng = np.random.default_rng(0)
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in CHASE_VARIANTS}
    implied_clock = []
    for ws in sizes:
        slots = ws // line
        order = rng.permutation(slots).astype(np.int64)
        position = np.empty(slots, dtype=np.int64)
        position[order] = np.arange(slots)
        nxt = build(order, spacing)
        warm = slots if slots <= full_lap_max else warm_beyond
        j = 0  # slot 0's index; every slot is on the cycle
        for variant in CHASE_VARIANTS:
            flush()
            ns_runs, cycle_runs = [], []
            for _ in range(repeats):
                j, ns, cycles = _checked_walk(walk, nxt, order, position, spacing, j, warm, steps,
                                              variant)
                ns_runs.append(ns)
                if cycles is not None:
                    cycle_runs.append(cycles)
            ns = statistics.median(ns_runs)
            cycles = statistics.median(cycle_runs) if cycle_runs else None
            if cycles is not None and ns > 0:
                implied_clock.append(cycles / ns * 1e3)
            rows[variant].append({"working_set_bytes": ws, "slots": slots, "latency_ns": ns,
                                  "latency_cycles": cycles, "variant": variant,
                                  "warmup_steps": warm, "timed_steps": steps})
        del nxt
    clock = _sm_clock_mhz()
    clock["implied_by_clock64_over_globaltimer_median"] = (statistics.median(implied_clock)
                                                           if implied_clock else None)
    if not implied_clock and "current" in clock:  # Triton fallback: cycles from the NVML clock
        for r in rows["ca"] + rows["cg"]:
            r["latency_cycles"] = r["latency_ns"] * clock["current"] / 1e3
    return {
        "backend": name, "errors_from_other_backends": errors,
        "kernel_source_cuda_c": CHASE_CUDA_C if name.startswith("cupy") else None,
        "method": "one thread follows j = next[j] (32-bit indices) through a random cyclic "
                  f"permutation of the {line}-byte lines of the working set. Per working set "
                  f"and variant: flush the L2 (write {_flush_bytes() // MiB} MiB of scratch), "
                  f"then {repeats} launches, each continuing where the last stopped, of a "
                  f"warm-up walk (a full lap up to {full_lap_max * line // MiB} MiB, so that "
                  f"sets that fit sit in L1/L2; {warm_beyond} hops beyond) followed in the same "
                  f"launch by {steps} timed dependent loads; latency_ns = globaltimer ns / "
                  "steps and latency_cycles = clock64 cycles / steps (cupy), medians of the "
                  "launches. Triton fallback: (t(warm+steps) - t(warm)) / steps with CUDA "
                  "events, cycles = ns x NVML SM clock. 'results': ld.global.ca (L1 and L2; "
                  "Triton: default load), shows the L1 plateau; 'results_cg': ld.global.cg "
                  "(L2 only), shows the L2 and HBM plateaus. Large sets include TLB misses. "
                  "Every walk's end index is checked against the same walk on the host.",
        "line_bytes": line,
        "sm_clock_mhz": clock,
        "results": rows["ca"],
        "results_cg": rows["cg"],
    }


# --------------------------------------------------------------------------- divergence
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


def _divergence_numba() -> tuple[str, Callable[[int, int, int, int, int], float]]:
    # module globals, so that numba's CUDA simulator can swap in its own `cuda` for the kernel
    global cuda, float32
    from numba import cuda, float32

    @cuda.jit
    def diverge(out, paths, warp_level, iters):
        tid = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        key = tid // 32 if warp_level else cuda.threadIdx.x % 32
        path = key % paths
        x = float32(tid)
        for p in range(32):
            if path == p:
                for _ in range(iters):
                    x = x * float32(0.999) + float32(p)
        out[tid] = x

    def run(blocks: int, threads: int, paths: int, warp_level: int, iters: int) -> float:
        out = cuda.device_array(blocks * threads, dtype=np.float32)

        def go() -> None:
            diverge[blocks, threads](out, paths, warp_level, iters)
            cuda.synchronize()

        if not CUDA:
            t0 = time.perf_counter()
            go()
            return time.perf_counter() - t0
        go()  # compile and warm up
        times = []
        for _ in range(5):
            start, end = cuda.event(), cuda.event()
            start.record()
            diverge[blocks, threads](out, paths, warp_level, iters)
            end.record()
            end.synchronize()
            times.append(cuda.event_elapsed_time(start, end) / 1e3)
        return statistics.median(times)

    return "numba.cuda " + __import__("numba").__version__, run


def _divergence_cupy() -> tuple[str, Callable[[int, int, int, int, int], float]]:
    import cupy as cp

    kernel = cp.RawKernel(DIVERGENCE_CUDA_C, "diverge")

    def run(blocks: int, threads: int, paths: int, warp_level: int, iters: int) -> float:
        out = cp.empty(blocks * threads, dtype=cp.float32)
        args = (out, np.int32(paths), np.int32(warp_level), np.int32(iters))
        kernel((blocks,), (threads,), args)
        cp.cuda.Device().synchronize()
        times = []
        for _ in range(5):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            kernel((blocks,), (threads,), args)
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        return statistics.median(times)

    return "cupy " + cp.__version__ + " RawKernel", run


def divergence() -> dict[str, Any]:
    errors = []
    backend = None
    for make in (_divergence_numba, _divergence_cupy):
        try:
            name, run = make()
            run(1, 32, 1, 0, 1)  # smoke test: compiles and runs
            backend = (name, run)
            break
        except Exception:  # noqa: BLE001 - record why a backend was unusable and try the next
            errors.append(traceback.format_exc(limit=2))
    if backend is None:
        return {"skipped": True, "errors": errors}
    name, run = backend
    blocks, threads, iters = (1, 64, 4) if TINY else (sm_count() * 8, 256, 4096)
    path_counts = [1, 2, 4, 8] if TINY else list(range(1, 33))
    base = run(blocks, threads, 1, 0, iters)
    rows = []
    for k in path_counts:
        t_lane = run(blocks, threads, k, 0, iters)
        t_warp = run(blocks, threads, k, 1, iters)
        rows.append({"paths": k, "time_s_paths_within_warp": t_lane,
                     "time_s_paths_between_warps": t_warp,
                     "slowdown_within_warp": t_lane / base, "slowdown_between_warps": t_warp / base})
    return {
        "backend": name, "errors_from_other_backends": errors,
        "kernel_source_cuda_c": DIVERGENCE_CUDA_C,
        "method": "each thread does `iters` dependent FMAs on the path `key % paths`; key is the "
                  "lane (threadIdx % 32: paths differ inside a warp) or the warp index (paths "
                  f"differ only between warps); {blocks} blocks x {threads} threads, "
                  f"iters={iters}; median of 5 runs",
        "blocks": blocks, "threads_per_block": threads, "iters": iters,
        "uniform_time_s": base, "results": rows,
    }


# --------------------------------------------------------------------------- provenance
def device_properties() -> dict[str, Any]:
    if not CUDA:
        return {"name": "cpu (tiny test run, numbers meaningless)", "cpu": platform.processor()}
    p = torch.cuda.get_device_properties(0)
    keys = ["name", "major", "minor", "multi_processor_count", "total_memory", "L2_cache_size",
            "regs_per_multiprocessor", "shared_memory_per_multiprocessor", "shared_memory_per_block",
            "shared_memory_per_block_optin", "max_threads_per_multi_processor", "warp_size",
            "max_threads_per_block", "clock_rate", "memory_clock_rate", "memory_bus_width"]
    props: dict[str, Any] = {}
    for k in keys:
        v = getattr(p, k, None)
        if v is not None:
            props[k] = v if isinstance(v, (int, float, str)) else str(v)
    try:  # SM clock (kHz) from the driver, for converting latencies to cycles
        from numba import cuda as ncuda
        props["numba_clock_rate_khz"] = int(ncuda.get_current_device().CLOCK_RATE)
    except Exception:  # noqa: BLE001
        pass
    return props


def versions() -> dict[str, Any]:
    v: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__,
                         "triton": triton.__version__, "numpy": np.__version__,
                         "cuda_runtime": torch.version.cuda}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        v["driver"] = smi.stdout.strip() or None
    except Exception:  # noqa: BLE001
        v["driver"] = None
    for mod in ("numba", "cupy"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            v[mod] = None
    return v


def main() -> None:
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    record: dict[str, Any] = {
        "script": "scripts/gpu/ch45_microbench.py",
        "date": _dt.datetime.now(_dt.timezone.utc)  # noqa: UP017 (Python < 3.11)
        .strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tiny_cpu_test": TINY,
        "device": device_properties(),
        "versions": versions(),
    }
    sections = [("strided_read", strided_read), ("bandwidth_vs_working_set", bandwidth_vs_working_set),
                ("pointer_chase", pointer_chase), ("divergence", divergence)]
    for key, fn in sections:
        t = time.perf_counter()
        try:
            record[key] = fn()
        except Exception:  # noqa: BLE001 - keep the other sections if one fails
            record[key] = {"skipped": True, "errors": [traceback.format_exc()]}
        print(f"{key}: {time.perf_counter() - t:.1f} s", flush=True)
        if CUDA:
            torch.cuda.empty_cache()
    record["runtime_s"] = time.perf_counter() - t0
    path = out_dir / "ch45_h100.json"
    path.write_text(json.dumps(record, indent=1))
    print(f"wrote {path} in {record['runtime_s']:.1f} s")


if __name__ == "__main__":
    main()
