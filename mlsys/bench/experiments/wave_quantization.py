"""Wave quantization: matmul throughput against matrix size, for cuBLAS and for a Triton kernel with
one fixed 128 x 128 tile, showing the sawtooth that appears when the tile count crosses a multiple
of the SM count.

``C[s, s] = A[s, k] @ B[k, s]`` with ``k`` fixed and ``s`` stepped by 64. Throughput is ``2 s s k``
over the median time (bf16 on a GPU). The Triton kernel (the experiments' one matmul, :mod:`._matmul`)
launches ``ceil(s/128)^2`` programs, one per output tile, each looping over ``k`` in steps of 64; so it needs ``ceil(tiles / SMs)`` waves when one
tile runs per SM at a time. On a CPU only cuBLAS' stand-in (``torch.matmul``, fp32) runs.
Every cuBLAS point also keeps the kernel it ran, by name, with its device time from
``torch.profiler`` (:func:`._part2.kernel_profile`): cuBLAS changes tile shape with the size, which
moves its steps.
"""

from __future__ import annotations

from typing import Any

from ._matmul import matmul
from ._part2 import figure, kernel_profile, rel_error, timed, torch_dtype

SHOWN_IN = ("chapters/09_tiling",)
NEEDS = "any"

BLOCK_M = BLOCK_N = 128
BLOCK_K = 64

def _triton_matmul(a: Any, b: Any) -> Any:
    """The experiments' Triton matmul (:mod:`._matmul`) with one fixed 128 x 128 x 64 tile, row by row."""
    return matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, num_warps=8, num_stages=3, group_m=1)


def run(ctx: Any) -> dict[str, Any]:
    import torch

    dt, dname = torch_dtype(ctx.device)
    if ctx.device == "cuda" and not ctx.quick:
        k, sizes = 4096, list(range(512, 6144 + 1, 64))
        sms = torch.cuda.get_device_properties(0).multi_processor_count
    else:
        k, sizes, sms = 256, [128, 192, 256], 0
    g = torch.Generator(device=ctx.device).manual_seed(0)
    kernels = {"cublas": torch.matmul}
    if ctx.device == "cuda":
        kernels["triton_fixed_tile"] = _triton_matmul
    else:
        ctx.note("triton_fixed_tile: skipped on a CPU (the interpreter's speed says nothing about waves)")
    out: dict[str, Any] = {"dtype": dname, "k": k, "sm_count": sms,
                           "tile": {"block_m": BLOCK_M, "block_n": BLOCK_N, "block_k": BLOCK_K}}
    for name, fn in kernels.items():
        rows = []
        for s in sizes:
            a = torch.randn(s, k, device=ctx.device, generator=g).to(dt)
            b = torch.randn(k, s, device=ctx.device, generator=g).to(dt)

            def check(c: Any, a: Any = a, b: Any = b) -> bool:
                return rel_error(c[:16], a[:16].double() @ b.double()) < 2e-2

            t = timed(lambda a=a, b=b, fn=fn: fn(a, b), ctx.device, f"{name} {s}x{s}x{k}", ctx.quick,
                      check=check, repeats=5 if ctx.quick else 10)
            row = {"size": s, "throughput": figure(2 * s * s * k / t.median, "FLOP/s",
                                                   f"2 s^2 k / median time ({name})", t)}
            if name == "cublas":
                row["profile"] = kernel_profile(lambda a=a, b=b: torch.matmul(a, b), ctx.device, calls=1, top=2)
            rows.append(row)
        out[name] = rows
    return out
