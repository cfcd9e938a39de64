"""Matmul throughput against one dimension that steps through multiples and non-multiples of 8.

``C[m, n] = A[m, k] @ B[k, n]`` with ``m`` fixed and either ``n`` or ``k`` swept one element at a
time around a multiple of 64. Throughput is ``2 m n k`` over the median time of ``torch.matmul``
(bf16 on a GPU, fp32 on a CPU). On a GPU, a row length that is not a multiple of 8 bf16 elements
(16 bytes) rules out the 16-byte-aligned loads and TMA copies the fastest tensor-core kernels need.
Each point also keeps the kernels ``torch.matmul`` ran there, by name, with their device times from
``torch.profiler`` (:func:`._part2.kernel_profile`), so a step in the sweep can be traced to a
change of kernel.
"""

from __future__ import annotations

from typing import Any

from ._part2 import figure, kernel_profile, rel_error, timed, torch_dtype

SHOWN_IN = ("chapters/07_tensor_cores_and_formats",)
NEEDS = "any"


def run(ctx: Any) -> dict[str, Any]:
    import torch

    dt, dname = torch_dtype(ctx.device)
    if ctx.device == "cuda" and not ctx.quick:
        base, span = 4096, range(-16, 17)
    else:
        base, span = 256, range(-2, 3)
    g = torch.Generator(device=ctx.device).manual_seed(0)
    out: dict[str, Any] = {"dtype": dname, "m": base, "base": base}
    for axis in ("n", "k"):
        rows = []
        for d in span:
            size = base + d
            m, n, k = base, (size if axis == "n" else base), (size if axis == "k" else base)
            a = torch.randn(m, k, device=ctx.device, generator=g).to(dt)
            b = torch.randn(k, n, device=ctx.device, generator=g).to(dt)

            def check(c: Any, a: Any = a, b: Any = b) -> bool:
                return rel_error(c[:32], a[:32].double() @ b.double()) < 2e-2

            t = timed(lambda a=a, b=b: torch.matmul(a, b), ctx.device, f"matmul {m}x{n}x{k}", ctx.quick,
                      check=check)
            rows.append({"m": m, "n": n, "k": k,
                         "throughput": figure(2 * m * n * k / t.median, "FLOP/s",
                                              "2 m n k / median time of torch.matmul", t),
                         "profile": kernel_profile(lambda a=a, b=b: torch.matmul(a, b), ctx.device, calls=2,
                                                   top=3)})
        out[f"sweep_{axis}"] = rows
    return out
