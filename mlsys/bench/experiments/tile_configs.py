"""One Triton matmul, many tile configurations: throughput of a 4096^3 bf16 product for each
(block_m, block_n, block_k, num_warps, num_stages, group_m), showing how wide the spread of a
tiling search space is and what grouped (L2-friendly) program ordering is worth.

The kernel is the fixed-tile kernel of ``wave_quantization`` with one addition: with ``group_m > 1``
programs are numbered so that ``group_m`` tile rows are walked column by column (the ordering of the
Triton matmul tutorial), so tiles running at the same time share strips of A and B in the L2.
Throughput is ``2 m n k`` over the median time; cuBLAS (``torch.matmul``) runs in the same call as
the yardstick.
"""

from __future__ import annotations

from typing import Any

from ._part2 import figure, rel_error, timed

SHOWN_IN = ("chapters/09_tiling",)
NEEDS = "cuda"

CONFIGS = [  # (block_m, block_n, block_k, num_warps, num_stages, group_m)
    (32, 32, 32, 4, 2, 1), (64, 64, 32, 4, 2, 1), (64, 64, 64, 4, 3, 1), (128, 64, 64, 4, 3, 1),
    (128, 128, 32, 8, 3, 1), (128, 128, 64, 8, 3, 1), (128, 128, 64, 8, 4, 1), (128, 128, 64, 8, 1, 1),
    (128, 256, 64, 8, 3, 1), (256, 128, 64, 8, 3, 1), (128, 128, 64, 4, 3, 1),
    (128, 128, 64, 8, 3, 8), (128, 256, 64, 8, 3, 8), (64, 64, 64, 4, 3, 8),
]

_KERNEL: list[Any] = []


def _kernel() -> Any:
    if _KERNEL:
        return _KERNEL[0]
    import triton
    import triton.language as tl

    @triton.jit
    def grouped_matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,  # noqa: ANN001
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

    _KERNEL.append(grouped_matmul)
    return grouped_matmul


def matmul(a: Any, b: Any, bm: int, bn: int, bk: int, warps: int, stages: int, group_m: int) -> Any:
    """``a @ b`` with the grouped Triton kernel and one tile configuration."""
    import torch

    m, k = a.shape
    n = b.shape[1]
    c = torch.empty(m, n, device=a.device, dtype=a.dtype)
    grid = (-(-m // bm) * -(-n // bn),)
    _kernel()[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                    BM=bm, BN=bn, BK=bk, GROUP_M=group_m, num_warps=warps, num_stages=stages)
    return c


def run(ctx: Any) -> dict[str, Any]:
    import torch

    s = 2048 if ctx.quick else 4096
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(s, s, device="cuda", generator=g).bfloat16()
    b = torch.randn(s, s, device="cuda", generator=g).bfloat16()
    ref = a[:16].double() @ b.double()
    flops = 2 * s * s * s
    t = timed(lambda: torch.matmul(a, b), "cuda", f"cuBLAS {s}^3", ctx.quick,
              check=lambda c: rel_error(c[:16], ref) < 2e-2)
    out: dict[str, Any] = {"size": s, "dtype": "bf16",
                           "cublas": figure(flops / t.median, "FLOP/s", "2 s^3 / median time of torch.matmul", t)}
    rows = []
    for bm, bn, bk, warps, stages, group_m in CONFIGS:
        cfg = {"block_m": bm, "block_n": bn, "block_k": bk, "num_warps": warps, "num_stages": stages,
               "group_m": group_m}
        try:
            t = timed(lambda c=(bm, bn, bk, warps, stages, group_m): matmul(a, b, *c), "cuda", f"triton {cfg}",
                      ctx.quick, check=lambda c: rel_error(c[:16], ref) < 2e-2)
            rows.append({"config": cfg, "throughput": figure(flops / t.median, "FLOP/s",
                                                             "2 s^3 / median time of the Triton kernel", t)})
        except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory: that is a result too
            rows.append({"config": cfg, "failed": f"{type(exc).__name__}: {str(exc)[:200]}"})
    out["configs"] = rows
    return out
