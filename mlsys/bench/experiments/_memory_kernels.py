"""Triton kernels of the memory experiments, imported inside ``run`` (after the runner has chosen the
interpreter or the GPU: ``@triton.jit`` reads ``TRITON_INTERPRET`` when it decorates)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def strided_sum(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    """Program p reads elements (p*BLOCK + i) * stride, i < BLOCK, and writes their sum."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs.to(tl.int64) * stride, mask=mask, other=0.0)
    tl.store(out_ptr + pid, tl.sum(x, axis=0))


@triton.jit
def sweep(x_ptr, out_ptr, n_chunks, reps, BLOCK: tl.constexpr):
    """Program p reads chunks p, p+P, ... ``reps`` times over (L2-only loads) and writes its running sum."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(reps):
        for c in range(pid, n_chunks, nprog):
            offs = c * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, cache_modifier=".cg")
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)
