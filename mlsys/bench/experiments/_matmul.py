"""The one parametrised Triton matmul of the experiments that sweep tile shapes (``tile_configs``,
``wave_quantization``): stride-aware, masked at every edge, fp32 accumulation.

Program ``pid`` computes one ``BM x BN`` tile of ``C = A @ B``, looping over ``K`` in steps of ``BK``.
With ``GROUP_M > 1`` programs are numbered so that ``GROUP_M`` tile rows are walked column by column
(the ordering of the Triton matmul tutorial: tiles running at the same time share strips of A and B in
the L2); ``GROUP_M = 1`` walks the tiles row by row. ``ceil(M/BM) * ceil(N/BN)`` programs are launched.
"""

from __future__ import annotations

from functools import cache
from typing import Any

__all__ = ["matmul", "tiles"]


@cache
def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def tiled_matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,  # noqa: ANN001
                     BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
        pid = tl.program_id(0)
        tiles_m = tl.cdiv(M, BM)
        tiles_n = tl.cdiv(N, BN)
        per_group = GROUP_M * tiles_n
        first_m = (pid // per_group) * GROUP_M
        group_rows = min(tiles_m - first_m, GROUP_M)
        pid_m = first_m + (pid % per_group) % group_rows
        pid_n = (pid % per_group) // group_rows
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                        mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
            b = tl.load(b_ptr + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                        mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    return tiled_matmul


def tiles(m: int, n: int, block_m: int, block_n: int) -> int:
    """Programs launched for an ``m x n`` output: ``ceil(m / block_m) * ceil(n / block_n)``."""
    return -(-m // block_m) * -(-n // block_n)


def matmul(a: Any, b: Any, block_m: int = 128, block_n: int = 128, block_k: int = 64, num_warps: int = 8,
           num_stages: int = 3, group_m: int = 1) -> Any:
    """``a @ b`` (2-D tensors, any strides) with one tile configuration; the result has ``a``'s dtype."""
    import torch

    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs (M, K) and (K, N) matrices, got {tuple(a.shape)} and {tuple(b.shape)}")
    if group_m < 1:
        raise ValueError(f"group_m must be >= 1 (1: row by row), got {group_m}")
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty(m, n, device=a.device, dtype=a.dtype)
    _kernel()[(tiles(m, n, block_m, block_n),)](
        a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=block_m, BN=block_n, BK=block_k, GROUP_M=group_m, num_warps=num_warps, num_stages=num_stages)
    return c
