"""The roofline check: kernels of many intensities, each predicted from measured roofs and timed.

For every kernel the FLOPs ``F`` and compulsory bytes ``D`` come from the models
(:mod:`mlsys.roofline` for the matmul, :mod:`mlsys.fusion` for the add, :mod:`mlsys.layers` for
LayerNorm and softmax; the sum's ``numel - 1`` adds are counted here), the roofline lower bound
``max(F / P, D / B)`` is computed with :func:`mlsys.roofline.time_lower_bound` from the
*measured* roof (``P`` = measured matmul throughput of the dtype, ``B`` = measured copy
bandwidth), and the ratio ``predicted / measured`` (at most about 1) says how close the
kernel comes to the roof.

Tiny kernels miss the roofline by orders of magnitude: their time is a fixed per-kernel cost,
not bytes or FLOPs. That cost is modelled with :mod:`mlsys.overhead`:
``launch_time(1, fixed, bound)`` = ``fixed + bound``, where ``fixed`` is, in order of preference,

* ``kernel_latency``: a one-element ``torch.add`` timed exactly like the check's kernels (one call
  per timing, caches flushed before it), i.e. what an isolated kernel costs when it does no work;
* on a GPU without it, the CUDA-graph figure ``launch_graph`` (the GPU's cost from one kernel to
  the next; a lower bound for an isolated kernel);
* else ``launch_eager``, the host's cost of dispatching one eager op.

A kernel is flagged ``launch_dominated`` when that fixed cost exceeds its roofline bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import layers
from ..fusion import chain_traffic
from ..numerics import itemsize
from ..overhead import launch_time
from ..roofline import Roof, arithmetic_intensity, bound, matmul_bytes, matmul_flops, time_lower_bound
from ..units import Q_
from .timing import time_fn

__all__ = ["Kernel", "kernels_for", "run_check", "predict", "fixed_cost"]

@dataclass(frozen=True)
class Kernel:
    """One kernel of the check: its name, kind, dtype, shape and counted work."""

    name: str
    kind: str           # "elementwise", "reduction", "layernorm", "softmax", "matmul"
    dtype: str
    shape: tuple[int, ...]
    flops: int          # FLOP
    nbytes: int         # byte, compulsory traffic


def _pow2(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


def elementwise_add(numel: int, dtype: str) -> Kernel:
    """``z = x + y``: ``numel`` FLOPs; reads two tensors, writes one (:func:`mlsys.fusion.chain_traffic`)."""
    nbytes = chain_traffic(numel, dtype, [2], fused=True).m
    return Kernel(f"add {_pow2(numel)}", "elementwise", dtype, (numel,), numel, int(nbytes))


def reduction_sum(numel: int, dtype: str) -> Kernel:
    """``x.sum()``: ``numel - 1`` adds; reads ``numel`` elements, writes one."""
    return Kernel(f"sum {_pow2(numel)}", "reduction", dtype, (numel,), numel - 1,
                  int((numel + 1) * itemsize(dtype).m))


def _of(cost: layers.LayerCost) -> tuple[int, int]:
    """A model's cost as the check's integers: (FLOP, byte)."""
    return int(cost.flops.to("FLOP").m), int(cost.bytes.to("byte").m)


def layernorm(rows: int, hidden: int, dtype: str) -> Kernel:
    """LayerNorm over the last dimension, counted by :func:`mlsys.layers.layer_norm`."""
    flops, nbytes = _of(layers.layer_norm(rows, hidden, dtype))
    return Kernel(f"layernorm {rows}x{hidden}", "layernorm", dtype, (rows, hidden), flops, nbytes)


def softmax(rows: int, cols: int, dtype: str) -> Kernel:
    """Row softmax, counted by :func:`mlsys.layers.softmax`."""
    flops, nbytes = _of(layers.softmax(rows, cols, dtype))
    return Kernel(f"softmax {rows}x{cols}", "softmax", dtype, (rows, cols), flops, nbytes)


def matmul(m: int, n: int, k: int, dtype: str) -> Kernel:
    """``C[m,n] = A[m,k] @ B[k,n]``: :func:`mlsys.roofline.matmul_flops` and ``matmul_bytes``."""
    return Kernel(f"matmul {m}x{n}x{k}", "matmul", dtype, (m, n, k),
                  int(matmul_flops(m, n, k).m), int(matmul_bytes(m, n, k, dtype).m))


def kernels_for(device: str, quick: bool = False) -> tuple[str, list[Kernel]]:
    """The check's dtype and kernels: bf16 on a GPU, fp32 on a CPU, spanning ~0.1 to ~3000 FLOP/byte."""
    if device == "cuda":
        d = "bf16"
        big = 2**24 if quick else 2**26
        rows = 4096 if quick else 8192
        mm = [64, 256, 1024, 4096] + ([] if quick else [8192])
        ks = [elementwise_add(2**10, d), elementwise_add(2**20, d), elementwise_add(big, d),
              reduction_sum(big, d), layernorm(rows, 8192, d), softmax(rows, 8192, d),
              matmul(16, 8192, 8192, d)]
        ks += [matmul(s, s, s, d) for s in mm]
        return d, ks
    d = "fp32"
    big = 2**20 if quick else 2**22
    rows = 256 if quick else 1024
    mm = [16, 64, 256] + ([] if quick else [1024])
    ks = [elementwise_add(2**8, d), elementwise_add(2**14, d), elementwise_add(big, d),
          reduction_sum(big, d), layernorm(rows, 1024, d), softmax(rows, 1024, d),
          matmul(16, 1024, 1024, d)]
    ks += [matmul(s, s, s, d) for s in mm]
    return d, ks


def _torch_dtype(dtype: str) -> Any:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]


def _rel_err(out: Any, ref: Any) -> float:
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def _make(kernel: Kernel, device: str) -> tuple[Callable[[], Any], Callable[[Any], bool]]:
    """The callable that runs ``kernel`` on random inputs and a check of its result (float64 reference)."""
    import torch
    import torch.nn.functional as F

    dt = _torch_dtype(kernel.dtype)
    tol = 1e-4 if kernel.dtype == "fp32" else 2e-2
    gen = torch.Generator(device=device).manual_seed(1)

    def rnd(*shape: int) -> Any:
        return torch.randn(*shape, device=device, generator=gen).to(dt)

    def checker(ref_fn: Callable[[], Any]) -> Callable[[Any], bool]:
        def check(out: Any) -> bool:
            err = _rel_err(out, ref_fn())
            if not err <= tol:
                raise AssertionError(f"{kernel.name}: relative error {err:.2e} exceeds {tol}")
            return True
        return check

    if kernel.kind == "elementwise":
        x, y = rnd(*kernel.shape), rnd(*kernel.shape)
        out = torch.empty_like(x)
        return (lambda: torch.add(x, y, out=out)), checker(lambda: x.double() + y.double())
    if kernel.kind == "reduction":
        x = rnd(*kernel.shape)
        scale = x.double().abs().sum()

        def check_sum(out: Any) -> bool:
            err = abs(out.double().item() - x.double().sum().item()) / scale.item()
            if not err <= 1e-3:
                raise AssertionError(f"{kernel.name}: error {err:.2e} of the sum exceeds 1e-3 of sum |x|")
            return True
        return (lambda: x.sum()), check_sum
    if kernel.kind == "layernorm":
        rows, hidden = kernel.shape
        x, w, b = rnd(rows, hidden), rnd(hidden), rnd(hidden)
        return ((lambda: F.layer_norm(x, (hidden,), w, b)),
                checker(lambda: F.layer_norm(x.double(), (hidden,), w.double(), b.double())))
    if kernel.kind == "softmax":
        x = rnd(*kernel.shape)
        return (lambda: torch.softmax(x, dim=-1)), checker(lambda: torch.softmax(x.double(), dim=-1))
    if kernel.kind == "matmul":
        m, n, k = kernel.shape
        a, b = rnd(m, k), rnd(k, n)
        rows = slice(0, min(m, 64))
        check_rows = checker(lambda: a[rows].double() @ b.double())
        return (lambda: a @ b), (lambda out: check_rows(out[rows]))
    raise ValueError(f"unknown kernel kind {kernel.kind!r}")


def fixed_cost(figures: dict[str, Any], device: str) -> tuple[float, str]:
    """The fixed per-kernel cost (seconds) for the overhead model, and where it came from."""
    if "kernel_latency" in figures:
        return figures["kernel_latency"]["value"], ("kernel_latency (a 1-element add timed like these kernels); "
                                                    "mlsys.overhead.launch_time(1, kernel_latency, bound)")
    if device == "cuda" and "launch_graph" in figures:
        return figures["launch_graph"]["value"], ("launch_graph (per kernel in a CUDA graph); "
                                                  "mlsys.overhead.launch_time(1, launch_graph, bound)")
    return figures["launch_eager"]["value"], ("launch_eager (one eager op); "
                                              "mlsys.overhead.launch_time(1, launch_eager, bound)")


def predict(kernel: Kernel, roof: Roof, fixed_s: float, how: str = "") -> dict[str, Any]:
    """Roofline bound ``max(F / P, D / B)``, the fixed per-kernel cost ``fixed_s`` and
    ``launch_time(1, fixed, bound)`` = ``fixed + bound`` (all in seconds)."""
    flops, nbytes = Q_(kernel.flops, "FLOP"), Q_(kernel.nbytes, "byte")
    lower = time_lower_bound(flops, nbytes, roof)
    fixed = Q_(fixed_s, "s")
    with_overhead = launch_time(1, fixed, lower)
    intensity = arithmetic_intensity(flops, nbytes)
    return {
        "flops": {"value": kernel.flops, "unit": "FLOP"},
        "bytes": {"value": kernel.nbytes, "unit": "byte"},
        "intensity": {"value": intensity.to("FLOP/byte").m, "unit": "FLOP/byte"},
        "bound": bound(intensity, roof),
        "predicted": {"value": lower.to("s").m, "unit": "s"},
        "overhead": {"value": fixed.to("s").m, "unit": "s"},
        "overhead_model": how,
        "predicted_with_overhead": {"value": with_overhead.to("s").m, "unit": "s"},
        "launch_dominated": bool(fixed > lower),
    }


def run_check(device: str, roof: Roof, dtype: str, kernels: list[Kernel], fixed_s: float, how: str,
              budget_s: float, min_repeats: int,
              progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Time each kernel and compare with its prediction; returns the ``roofline_check`` block."""
    import torch

    results = []
    for kernel in kernels:
        if progress is not None:
            progress(kernel.name)
        fn, check = _make(kernel, device)
        timing = time_fn(fn, device, what=f"{kernel.name} ({kernel.dtype})", repeats=min_repeats, warmup=3,
                         budget_s=budget_s, check=check, flush_l2=True)
        pred = predict(kernel, roof, fixed_s, how)
        measured = timing.median
        row = {"kernel": kernel.name, "kind": kernel.kind, "dtype": kernel.dtype, "shape": list(kernel.shape),
               **pred, "measured": timing.to_json(),
               "ratio": pred["predicted"]["value"] / measured,
               "ratio_with_overhead": pred["predicted_with_overhead"]["value"] / measured}
        if pred["launch_dominated"]:
            row["note"] = ("launch-dominated: the fixed per-kernel cost exceeds the roofline bound, so the "
                           "roofline alone is far off; compare ratio_with_overhead")
        results.append(row)
        del fn, check
        if device == "cuda":
            torch.cuda.empty_cache()
    return {
        "dtype": dtype,
        "roof": {"peak": {"value": roof.peak.to("FLOP/s").m, "unit": "FLOP/s"},
                 "bandwidth": {"value": roof.bandwidth.to("byte/s").m, "unit": "byte/s"},
                 "method": f"measured roof: peak = matmul_{dtype}, bandwidth = copy_bandwidth"},
        "kernels": results,
    }
