"""2:4 semi-structured sparsity: a matmul with a 2:4-pruned weight through
``torch.sparse.to_sparse_semi_structured`` against the same matmul dense, per backend.

The weight ``W[m, k]`` keeps the two largest-magnitude values of every group of four along ``k``;
``Y = W @ X`` with ``X[k, n]``. Dense and sparse compute the same product (checked after timing);
the speedup is dense time / sparse time, medians, fp16 on a GPU. Each backend torch offers
(cuSPARSELt, CUTLASS) is tried; one that is missing or fails records the reason instead.

A time per call (CUDA events around one ``torch.mm``) counts whatever the call does on the host
while the GPU waits: PyTorch's semi-structured ``mm`` builds its cuSPARSELt descriptors on every
call (pytorch/pytorch#153825). So each case also keeps a per-kernel profile
(:func:`._part2.kernel_profile`): the kernels one call runs, their device times from
``torch.profiler``, and the host time per call. The kernel speed-up (dense kernel time / sparse
kernel time) and the per-call speed-up are both recorded; they answer different questions.
"""

from __future__ import annotations

from typing import Any

from ._part2 import figure, kernel_profile, rel_error, timed

SHOWN_IN = ("chapters/07_tensor_cores_and_formats",)
NEEDS = "cuda"


def prune_2_4(w: Any) -> Any:
    """Zero the two smallest-magnitude values of every group of four consecutive elements in a row."""
    import torch

    m, k = w.shape
    if k % 4:
        raise ValueError(f"2:4 pruning needs a row length divisible by 4, got {k}")
    groups = w.reshape(m, k // 4, 4)
    keep = groups.abs().topk(2, dim=-1).indices
    mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, keep, True)
    return (groups * mask).reshape(m, k)


def run(ctx: Any) -> dict[str, Any]:
    import torch
    from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured

    sizes = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 2048)] if not ctx.quick else [(2048, 2048, 2048)]
    cap = torch.cuda.get_device_capability()
    out: dict[str, Any] = {"dtype": "fp16", "compute_capability": f"{cap[0]}.{cap[1]}",
                           "cusparselt_available": bool(getattr(torch.backends, "cusparselt", None)
                                                        and torch.backends.cusparselt.is_available())}
    g = torch.Generator(device="cuda").manual_seed(0)
    for m, k, n in sizes:
        w = prune_2_4(torch.randn(m, k, device="cuda", generator=g).half())
        x = torch.randn(k, n, device="cuda", generator=g).half()
        ref_rows = w[:32].double() @ x.double()
        t_dense = timed(lambda w=w, x=x: torch.mm(w, x), "cuda", f"dense fp16 mm {m}x{k}x{n}", ctx.quick,
                        check=lambda y, r=ref_rows: rel_error(y[:32], r) < 1e-2)
        p_dense = kernel_profile(lambda w=w, x=x: torch.mm(w, x), "cuda", calls=3 if ctx.quick else 5)
        case: dict[str, Any] = {"m": m, "k": k, "n": n,
                                "dense": figure(2 * m * n * k / t_dense.median, "FLOP/s",
                                                "2 m n k / median time of torch.mm on the pruned dense weight",
                                                t_dense),
                                "dense_profile": p_dense}
        for backend, force_cutlass in (("cusparselt", False), ("cutlass", True)):
            try:
                SparseSemiStructuredTensor._FORCE_CUTLASS = force_cutlass
                ws = to_sparse_semi_structured(w)
                t = timed(lambda ws=ws, x=x: torch.mm(ws, x), "cuda", f"2:4 {backend} mm {m}x{k}x{n}", ctx.quick,
                          check=lambda y, r=ref_rows: rel_error(y[:32], r) < 1e-2)
                prof = kernel_profile(lambda ws=ws, x=x: torch.mm(ws, x), "cuda", calls=3 if ctx.quick else 5)
                k_dense = p_dense["device_time_per_call"]["value"]
                k_sparse = prof["device_time_per_call"]["value"]
                case[backend] = {
                    "profile": prof,
                    "kernel_speedup": {"value": k_dense / k_sparse, "unit": "",
                                       "method": "dense kernels' device time / sparse kernels' device time, "
                                                 "per call, from torch.profiler"},
                    "class": type(ws).__name__,
                    "throughput": figure(2 * m * n * k / t.median, "FLOP/s",
                                         "2 m n k (dense-equivalent) / median time of torch.mm on the 2:4 tensor",
                                         t),
                    "speedup": {"value": t_dense.median / t.median, "unit": "",
                                "method": "dense median time per call / sparse median time per call (CUDA events "
                                          "around one call: kernels plus any host work the GPU waits for)"},
                }
            except Exception as exc:  # noqa: BLE001 - the reason is the result
                case[backend] = {"unsupported": f"{type(exc).__name__}: {str(exc)[:300]}"}
                ctx.note(f"{backend} {m}x{k}x{n}: {type(exc).__name__}: {str(exc)[:200]}")
            finally:
                SparseSemiStructuredTensor._FORCE_CUTLASS = False
        out[f"mm_{m}x{k}x{n}"] = case
    return out
