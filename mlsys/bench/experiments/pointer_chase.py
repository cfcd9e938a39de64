"""Latency of one dependent load for working sets of 16 KiB to 1 GiB: a single thread chasing pointers, cached in L1+L2 and in L2 only.

One thread follows ``j = next[j]`` through a random cyclic permutation of the working set's
128-byte lines (one hop per line, so no prefetcher can guess the next address). Two CUDA C
kernels (cupy) differ only in the load: ``ld.global.ca`` (L1 and L2: the L1 plateau) and
``ld.global.cg`` (L2 only: the L2 and HBM plateaus). The time is read inside the kernel
(``%globaltimer`` ns and ``clock64`` cycles around the timed hops, after a warm-up walk in the
same launch), which is the only clock fine enough for one load; every walk's end index is
checked against the same walk on the host.
"""

from __future__ import annotations

import statistics
from typing import Any

SHOWN_IN = ("chapters/04_execution_model", "chapters/05_memory_hierarchy")
NEEDS = "cuda"

KIB, MIB = 2**10, 2**20
LINE = 128
VARIANTS = ("ca", "cg")

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



def latencies(record: Any, loads: str = "cg") -> dict[int, Any]:
    """Working-set size in bytes -> latency of one dependent load (a pint quantity), from a recorded run.

    ``record`` is the experiment's :class:`~mlsys.bench.records.Record`; ``loads`` is ``"cg"`` (L2 only)
    or ``"ca"`` (L1 and L2, stored as ``results_ca`` or, in older records, ``results``).
    """
    if loads not in VARIANTS:
        raise ValueError(f"latencies: loads={loads!r}; expected one of {VARIANTS}")
    key = "results_cg" if loads == "cg" else ("results_ca" if "results_ca" in record.results else "results")
    return {int(r["working_set"]["value"]): record.q(key, i, "latency") for i, r in enumerate(record[key])}


def run(ctx: Any) -> dict[str, Any]:
    import cupy as cp
    import numpy as np
    import torch

    from ..timing import l2_flush_bytes

    kernels = {v: cp.RawKernel(CHASE_CUDA_C, f"chase_{v}") for v in VARIANTS}
    end = cp.zeros(1, dtype=cp.uint32)
    times = cp.zeros(2, dtype=cp.int64)
    flush_bytes = l2_flush_bytes(0)
    scratch = cp.zeros(flush_bytes // 4, dtype=cp.float32)
    spacing = LINE // 4

    def build(order: Any) -> Any:
        nxt = cp.zeros(order.size * spacing, dtype=cp.uint32)
        o = cp.asarray(order)
        nxt[o * spacing] = (cp.roll(o, -1) * spacing).astype(cp.uint32)
        return nxt

    def walk(nxt: Any, start: int, warm: int, steps: int, variant: str) -> tuple[int, float, float]:
        kernels[variant]((1,), (1,), (nxt, np.uint32(start), np.int64(warm), np.int64(steps), end, times))
        cycles, ns = (int(t) for t in times.get())  # .get() waits for the kernel
        return int(end.get()[0]), ns / steps, cycles / steps

    top = 24 if ctx.quick else 31
    sizes = [1 << k for k in range(14, top)]  # 16 KiB .. 1 GiB
    steps, repeats = (20_000, 2) if ctx.quick else (100_000, 3)
    full_lap_max, warm_beyond = 1 << 19, 1 << 15  # slots
    rng = np.random.default_rng(0)
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    implied = []
    for ws in sizes:
        slots = ws // LINE
        order = rng.permutation(slots).astype(np.int64)
        position = np.empty(slots, dtype=np.int64)
        position[order] = np.arange(slots)
        nxt = build(order)
        warm = slots if slots <= full_lap_max else warm_beyond
        j = 0
        for variant in VARIANTS:
            cp.add(scratch, 1.0, out=scratch)  # evict the L2
            ns_runs, cyc_runs = [], []
            for _ in range(repeats):
                start = j
                j, ns, cyc = walk(nxt, start, warm, steps, variant)
                expect = int(order[(position[start // spacing] + warm + steps) % slots]) * spacing
                if j != expect:
                    raise AssertionError(f"pointer chase {ws} B {variant}: ended at {j}, the host walk says {expect}")
                ns_runs.append(ns)
                cyc_runs.append(cyc)
            ns, cyc = statistics.median(ns_runs), statistics.median(cyc_runs)
            implied.append(cyc / ns * 1e3)
            rows[variant].append({"working_set": {"value": ws, "unit": "byte"}, "slots": slots,
                                  "latency": {"value": ns, "unit": "ns"}, "latency_cycles": cyc,
                                  "warmup_steps": warm, "timed_steps": steps})
        del nxt
    torch.cuda.synchronize()
    return {
        "backend": f"cupy {cp.__version__} RawKernel (CUDA C, inline PTX loads, clock64 and globaltimer)",
        "kernel_source_cuda_c": CHASE_CUDA_C,
        "method": "one thread follows j = next[j] (32-bit indices) through a random cyclic permutation of the "
                  f"{LINE}-byte lines of the working set. Per working set and variant: flush the L2 (write "
                  f"{flush_bytes // MIB} MiB of scratch), then {repeats} launches, each continuing where the last "
                  f"stopped, of a warm-up walk (a full lap up to {full_lap_max * LINE // MIB} MiB; {warm_beyond} hops "
                  f"beyond) followed in the same launch by {steps} timed dependent loads; latency = globaltimer ns / "
                  "steps, cycles = clock64 cycles / steps, medians of the launches. 'results': ld.global.ca (L1 and "
                  "L2); 'results_cg': ld.global.cg (L2 only). Large sets include TLB misses.",
        "line": {"value": LINE, "unit": "byte"},
        "sm_clock_implied": {"value": statistics.median(implied), "unit": "MHz",
                             "method": "median of clock64 cycles / globaltimer ns over all walks"},
        "results": rows["ca"],
        "results_cg": rows["cg"],
    }
