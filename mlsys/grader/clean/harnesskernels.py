"""The performance grader's own per-call work on a GPU, as two memory-bound Triton kernels.

Every timed call gets fresh inputs and has its output fingerprinted (:mod:`mlsys.grader.clean.perfworker`).
Done with torch's ops, that work cost about 330 us of device time per call on an H200 (Philox normals,
then a float64 copy of the output for each of the sum and the norm), ten times a Lab 3 kernel: it was
subtracted from every round, so its noise compressed the shares. Here each is one pass over memory:

- :func:`fresh_inputs`: values from a counter-based hash of (seed, index), uniform with unit variance,
  written once (the write is the floor of "fresh storage with fresh values");
- :func:`fingerprint`: the output read once, each element widened to float64 in registers, per-block
  (sum, sum of squares) partials in float64, then the partials summed: (sum, 2-norm) in float64.

Both are the grader's: the verdict process rebuilds a call's inputs with the same :func:`fresh_inputs`
and the same seed, on its own GPU. Used only with ``MLSYS_GRADER_HARNESS=light``
(:data:`mlsys.grader.clean.perfworker.HARNESS_ENV` says why it is off by default).
"""

from __future__ import annotations

import functools
import math
from typing import Any

__all__ = ["fresh_inputs", "fingerprint_partials", "reduce_partials", "fingerprint", "BLOCK", "KERNEL_NAMES"]

BLOCK = 4096
"""Elements per Triton program (both kernels)."""

KERNEL_NAMES = ("_grader_fill", "_grader_fingerprint")
"""The Triton kernels of the grader's own: a learner's kernel may not take these names."""


@functools.cache
def _kernels() -> tuple[Any, Any]:
    import triton
    import triton.language as tl

    @triton.jit
    def _grader_fill(out_ptr, n, k0, k1, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        lo = offs.to(tl.uint32)
        hi = (offs >> 32).to(tl.uint32)
        x = lo * 0x9E3779B9 + k0
        x = x ^ (hi * 0x85EBCA6B) ^ k1
        # two rounds of a 32-bit avalanche mix ("lowbias32"), keyed again between them
        x = x ^ (x >> 16)
        x = x * 0x7FEB352D
        x = x ^ (x >> 15)
        x = x * 0x846CA68B
        x = x ^ (x >> 16)
        x = x ^ k1
        x = x ^ (x >> 16)
        x = x * 0x7FEB352D
        x = x ^ (x >> 15)
        x = x * 0x846CA68B
        x = x ^ (x >> 16)
        u = (x >> 8).to(tl.float32) * (1.0 / 16777216.0)  # [0, 1) in steps of 2^-24
        v = (u * 2.0 - 1.0) * 1.7320508075688772  # uniform on [-sqrt 3, sqrt 3): mean 0, variance 1
        tl.store(out_ptr + offs, v.to(out_ptr.dtype.element_ty), mask=m)

    @triton.jit
    def _grader_fingerprint(x_ptr, part_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float64)
        tl.store(part_ptr + 2 * pid, tl.sum(x, axis=0))
        tl.store(part_ptr + 2 * pid + 1, tl.sum(x * x, axis=0))

    return _grader_fill, _grader_fingerprint


def _keys(seed: int, i: int) -> tuple[int, int]:
    """Two 31-bit keys of argument ``i`` of a call drawn from ``seed`` (a 62-bit integer), mixed so that
    neighbouring seeds and arguments give unrelated values (kept below 2^31: Triton passes them as int32)."""
    z = (int(seed) * 0x9E3779B97F4A7C15 + (i + 1) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & (2**64 - 1)
    z ^= z >> 31
    return z & 0x7FFFFFFF, (z >> 33) & 0x7FFFFFFF


def fresh_inputs(torch: Any, shapes: list[list[int]], dtype: Any, seed: int, device: str = "cuda") -> tuple:
    """New CUDA tensors of ``shapes`` and ``dtype``, filled from ``seed`` (the same seed, the same values)."""
    fill, _ = _kernels()
    out = []
    for i, s in enumerate(shapes):
        t = torch.empty(*s, device=device, dtype=dtype)
        n = t.numel()
        if n:
            k0, k1 = _keys(seed, i)
            fill[(math.ceil(n / BLOCK),)](t, n, k0, k1, BLOCK=BLOCK)
        out.append(t)
    return tuple(out)


def fingerprint_partials(torch: Any, out: Any) -> Any:
    """Float64 (sum, sum of squares) of each block of :data:`BLOCK` elements of a CUDA tensor, interleaved,
    on the device: one read of the output, nothing else launched (:func:`reduce_partials` finishes it)."""
    _, fp = _kernels()
    x = out.detach().reshape(-1)  # a copy only for a non-contiguous output
    if not x.is_floating_point():
        x = x.double()
    n = x.numel()
    blocks = math.ceil(n / BLOCK)
    parts = torch.empty(2 * blocks, device=x.device, dtype=torch.float64)
    if n:
        fp[(blocks,)](x, parts, n, BLOCK=BLOCK)
    return parts


def reduce_partials(torch: Any, parts: list[Any]) -> list[list[float]]:
    """[sum, 2-norm] of each call from its :func:`fingerprint_partials`, after the device is idle: every
    call's partials reach the host in one copy and are summed there in float64."""
    if not parts:
        return []
    flat = torch.cat(parts).cpu()
    out, off = [], 0
    for p in parts:
        pairs = flat[off:off + p.numel()].view(-1, 2)
        off += p.numel()
        s = pairs.sum(0) if pairs.numel() else torch.zeros(2, dtype=torch.float64)
        out.append([float(s[0]), math.sqrt(max(float(s[1]), 0.0))])
    return out


def fingerprint(torch: Any, out: Any) -> Any:
    """(sum, 2-norm) of a CUDA tensor's values in float64, as one 2-element float64 tensor on the device."""
    s = fingerprint_partials(torch, out).view(-1, 2).sum(0)
    return torch.stack((s[0], s[1].sqrt()))
