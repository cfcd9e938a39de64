"""One Triton matmul, many tile configurations: throughput of a 4096^3 bf16 product for each
(block_m, block_n, block_k, num_warps, num_stages, group_m), showing how wide the spread of a
tiling search space is and what grouped (L2-friendly) program ordering is worth.

The kernel is the experiments' one parametrised Triton matmul (:mod:`._matmul`, shared with
``wave_quantization``): with ``group_m > 1`` programs are numbered so that ``group_m`` tile rows are
walked column by column (the ordering of the Triton matmul tutorial), so tiles running at the same time
share strips of A and B in the L2.
Throughput is ``2 m n k`` over the median time; cuBLAS (``torch.matmul``) runs in the same call as
the yardstick.
"""

from __future__ import annotations

from typing import Any

from ._matmul import matmul
from ._part2 import figure, rel_error, timed

SHOWN_IN = ("chapters/09_tiling",)
NEEDS = "cuda"

CONFIGS = [  # (block_m, block_n, block_k, num_warps, num_stages, group_m)
    (32, 32, 32, 4, 2, 1), (64, 64, 32, 4, 2, 1), (64, 64, 64, 4, 3, 1), (128, 64, 64, 4, 3, 1),
    (128, 128, 32, 8, 3, 1), (128, 128, 64, 8, 3, 1), (128, 128, 64, 8, 4, 1), (128, 128, 64, 8, 1, 1),
    (128, 256, 64, 8, 3, 1), (256, 128, 64, 8, 3, 1), (128, 128, 64, 4, 3, 1),
    (128, 128, 64, 8, 3, 8), (128, 256, 64, 8, 3, 8), (64, 64, 64, 4, 3, 8),
]

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
