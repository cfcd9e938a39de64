"""Microbenchmarks: the figures that make a machine's measured roofline.

Each function measures one figure on ``"cpu"`` or ``"cuda"`` and returns it as a
JSON-ready dict ``{"value", "unit", "method", "size", "timing"}`` (the schema of
:mod:`mlsys.bench.records`), or raises :class:`Skip` saying why the figure does not apply
here. Inputs are random (never zeros: an all-zero input can hide wrong indexing and even
run faster), and every result is checked after it was timed.

Bytes are counted as the compulsory traffic: a copy of ``N`` bytes moves ``2 N`` (read
``N``, write ``N``); a reduction of ``N`` bytes moves ``N`` (plus one element written).
A matmul of ``m n k`` does ``2 m n k`` FLOPs (:func:`mlsys.roofline.matmul_flops`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..numerics import itemsize
from ..roofline import matmul_flops
from .timing import Timing, time_fn

__all__ = ["Skip", "Sizes", "sizes_for", "roof_dtype", "quick_roof", "copy_bandwidth", "read_bandwidth", "matmul_throughput",
           "launch_eager", "launch_triton", "launch_graph", "kernel_latency", "h2d_copy", "MICROBENCHMARKS"]


class Skip(Exception):
    """A figure that does not apply on this device; the message says why."""


@dataclass(frozen=True)
class Sizes:
    """Problem sizes: large enough to approach the device's peak, small enough to run quickly."""

    stream_numel: int      # fp32 elements per buffer for the copy and reduction
    matmul_n: int          # square matmul size for fp32/tf32/fp16/bf16/fp8
    h2d_bytes: int         # bytes per host-to-device copy
    launches: int          # launches per timed call in the launch-overhead loops
    budget_s: float        # time each figure's repeats may take
    min_repeats: int
    sustain_s: float = 0.0  # seconds of back-to-back matmuls for burst vs sustained (0: not measured)


def sizes_for(device: str, quick: bool = False) -> Sizes:
    """Sizes per device: on a GPU, 1 GiB buffers (20x an H100's L2) and 8192^3 matmuls."""
    if device == "cuda":
        if quick:
            return Sizes(2**26, 4096, 2**26, 100, 0.05, 10, 1.0)
        return Sizes(2**28, 8192, 2**28, 200, 0.5, 30, 10.0)
    if quick:
        return Sizes(2**24, 512, 0, 50, 0.1, 5, 0.2)
    return Sizes(2**25, 2048, 0, 100, 0.6, 7, 2.0)


def _torch() -> Any:
    import torch

    return torch


def roof_dtype(device: str) -> str:
    """The matmul dtype of a quick roof on ``device``: ``"fp32"`` on a CPU (torch has no fast fp16 matmul
    there); on a GPU ``"bf16"``, or ``"fp16"`` where bf16 is not supported (a T4 or V100)."""
    if device != "cuda":
        return "fp32"
    return "bf16" if _torch().cuda.is_bf16_supported() else "fp16"


def quick_roof(device: str) -> tuple[float, float]:
    """``(peak FLOP/s, bandwidth byte/s)`` of ``device`` at the quick sizes, without the burst/sustained run:
    :func:`matmul_throughput` in :func:`roof_dtype` and :func:`copy_bandwidth` (about 1 s on a 2-core CPU).

    Each is the rate of the *fastest* timed call (the figures' ``fastest``), not the median: other work on a
    busy machine only ever slows a call down, so the fastest call is the closest this run gets to the idle
    machine, and a bound taken from it does not move with the load.
    """
    sizes = replace(sizes_for(device, quick=True), sustain_s=0.0)
    peak = matmul_throughput(device, sizes, roof_dtype(device))["fastest"]["value"]
    return peak, copy_bandwidth(device, sizes)["fastest"]["value"]


def _figure(value: float, unit: str, method: str, size: str, timing: Timing, **extra: Any) -> dict[str, Any]:
    return {"value": value, "unit": unit, "method": method, "size": size, "timing": timing.to_json(), **extra}


def _time(fn: Callable[[], Any], device: str, sizes: Sizes, what: str, **kw: Any) -> Timing:
    kw.setdefault("budget_s", sizes.budget_s)
    kw.setdefault("repeats", sizes.min_repeats)
    kw.setdefault("warmup", 3)
    return time_fn(fn, device, what=what, **kw)


def copy_bandwidth(device: str, sizes: Sizes) -> dict[str, Any]:
    """Device-to-device copy of ``N`` fp32 elements: bandwidth = ``2 * 4 N`` bytes / median time.

    The figure also records ``fastest``, the same bytes over the fastest timed call (``timing.min``)."""
    torch = _torch()
    n = sizes.stream_numel
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    t = _time(lambda: dst.copy_(src), device, sizes, f"dst.copy_(src), fp32, {n} elements",
              check=lambda out: bool(torch.equal(out, src)))
    nbytes = 2 * n * itemsize("fp32").m
    fastest = {"value": nbytes / t.min, "unit": "byte/s", "method": "bytes read + bytes written / the fastest timed call"}
    return _figure(nbytes / t.median, "byte/s", "bytes read + bytes written / median time of Tensor.copy_",
                   f"{n} fp32 elements ({n * 4} bytes per buffer)", t, fastest=fastest)


def read_bandwidth(device: str, sizes: Sizes) -> dict[str, Any]:
    """Read-only reduction ``x.sum()`` over ``N`` fp32 elements: ``4 N + 4`` bytes / median time."""
    torch = _torch()
    n = sizes.stream_numel
    x = torch.randn(n, device=device)
    ref = x.double().sum().item()
    scale = x.abs().double().sum().item()

    def check(out: Any) -> bool:
        return abs(out.item() - ref) <= 1e-5 * scale

    t = _time(lambda: x.sum(), device, sizes, f"x.sum(), fp32, {n} elements", check=check)
    nbytes = (n + 1) * itemsize("fp32").m
    return _figure(nbytes / t.median, "byte/s", "(4 N bytes read + one 4-byte result written) / median time of "
                   "Tensor.sum (a reduction: its kernel also combines partial sums, so it is a lower bound on "
                   "the read bandwidth)",
                   f"{n} fp32 elements ({n * 4} bytes)", t)


def _matmul_supported(device: str, dtype: str) -> None:
    torch = _torch()
    if device == "cpu":
        if dtype in ("tf32", "fp8"):
            raise Skip(f"{dtype} is a GPU tensor-core format; a CPU has no {dtype} matmul")
        if dtype == "fp16":
            raise Skip("torch has no vectorised fp16 matmul on a CPU (it runs orders of magnitude "
                       "slower than fp32); not measured, to keep the run short")
        return
    major, minor = torch.cuda.get_device_capability()
    if dtype == "tf32" and major < 8:
        raise Skip(f"tf32 needs compute capability 8.0 or newer, this GPU is {major}.{minor}")
    if dtype == "bf16" and not torch.cuda.is_bf16_supported():
        raise Skip(f"bf16 is not supported on compute capability {major}.{minor}")
    if dtype == "fp8":
        if (major, minor) < (8, 9):
            raise Skip(f"fp8 matmul needs compute capability 8.9 or newer, this GPU is {major}.{minor}")
        if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            raise Skip("this torch has no torch._scaled_mm / float8_e4m3fn")


_TOL = {"fp32": 1e-4, "tf32": 5e-3, "fp16": 1e-2, "bf16": 2e-2, "fp8": 2e-2}


def matmul_throughput(device: str, sizes: Sizes, dtype: str) -> dict[str, Any]:
    """Square matmul ``C = A @ B`` of size ``n``: throughput = ``2 n^3`` FLOP / median time.

    The figure also records ``fastest`` = ``2 n^3`` / the fastest timed call (``timing.min``): the
    most the product ever reached in this run, a bound for "no kernel beats the roof". It is not the
    *burst* rate, which has one definition, in :mod:`mlsys.bench.sustained` (the median of the first
    repeats after an idle pause, timed back to back); the ``value`` is the median over the run.

    When ``sizes.sustain_s`` is positive the same call is then run back to back for that long by
    :func:`mlsys.bench.sustained.burst_and_sustained`, and the figure records its ``power_state``:
    the burst and sustained throughputs (TFLOP/s), their ratio, and on a GPU with NVML the SM clock,
    power and clock-event reasons seen idle, in the burst and in the sustained half, with the card's
    limits (the per-second series are left out of the roofs file; the power-and-clocks chapter records one).

    fp32 runs with ``torch.set_float32_matmul_precision("highest")`` (true fp32), tf32 with
    ``"high"`` (TF32 tensor cores, as ``torch.backends.cuda.matmul.allow_tf32 = True``), fp16 and
    bf16 with ``torch.matmul``, fp8 (e4m3 operands, bf16 output, unit scales) with
    ``torch._scaled_mm``. After timing, rows of C are checked against a float64 product of the
    same (rounded) operands: ``|C - ref| / |ref|`` must stay under a per-dtype tolerance.
    """
    torch = _torch()
    _matmul_supported(device, dtype)
    n = sizes.matmul_n
    gen = torch.Generator(device=device).manual_seed(0)
    a32 = torch.randn(n, n, device=device, generator=gen)
    b32 = torch.randn(n, n, device=device, generator=gen)
    torch_dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
                   "bf16": torch.bfloat16}.get(dtype)
    method = f"2 n^3 / median time of torch.matmul on {dtype} operands"
    prev_precision = torch.get_float32_matmul_precision()
    if dtype == "fp8":
        a = a32.to(torch.float8_e4m3fn)
        b = b32.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major B, as cuBLASLt wants
        one = torch.tensor(1.0, device=device)

        def fn() -> Any:
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                    use_fast_accum=True)
        method = ("2 n^3 / median time of torch._scaled_mm (e4m3 operands, unit scales, bf16 output, "
                  "use_fast_accum=True)")
    else:
        a, b = a32.to(torch_dtype), b32.to(torch_dtype)

        def fn() -> Any:
            return torch.matmul(a, b)
        if dtype in ("fp32", "tf32"):
            torch.set_float32_matmul_precision("highest" if dtype == "fp32" else "high")
            method += (" with torch.set_float32_matmul_precision("
                       f"{'highest' if dtype == 'fp32' else 'high'!r})")
    rows = slice(0, 64)

    def check(out: Any) -> bool:
        ref = a[rows].double() @ b.double()
        err = (out[rows].double() - ref).norm() / ref.norm()
        if not bool(torch.isfinite(out[rows]).all()) or err.item() > _TOL[dtype]:
            raise AssertionError(f"matmul {dtype}: relative error {err.item():.2e} exceeds {_TOL[dtype]}")
        return True

    flops = matmul_flops(n, n, n).m
    what = f"{dtype} matmul {n}x{n}x{n}"
    extra: dict[str, Any] = {}
    try:
        t = _time(fn, device, sizes, what, check=check)
        if sizes.sustain_s > 0:
            extra["power_state"] = _power_state(fn, device, what, flops, sizes.sustain_s, check)
    finally:
        torch.set_float32_matmul_precision(prev_precision)
    fastest = {"value": flops / t.min, "unit": "FLOP/s",
               "method": "2 n^3 / the fastest timed call (not a burst figure: burst and sustained are defined in mlsys.bench.sustained)"}
    return _figure(flops / t.median, "FLOP/s", method + f" (median of {t.repeats} calls)",
                   f"m = n = k = {n}", t, fastest=fastest, **extra)


def _power_state(fn: Callable[[], Any], device: str, what: str, flops: float, seconds: float,
                 check: Callable[[Any], object]) -> dict[str, Any]:
    """Burst vs sustained throughput and the clocks seen, for the roofs file (no per-second series)."""
    from .sustained import burst_and_sustained

    out = burst_and_sustained(fn, device, what=what, flops=flops, seconds=seconds, check=check)
    out.pop("series", None)
    out.pop("timing", None)
    out["method"] = (f"mlsys.bench.sustained.burst_and_sustained: {seconds:g} s of back-to-back calls after an "
                     "idle pause" + ("" if "clocks" in out else "; no clock readings (no NVML here)"))
    return out


def launch_eager(device: str, sizes: Sizes) -> dict[str, Any]:
    """Eager PyTorch op on a one-element tensor, ``L`` times in a loop: overhead = time / ``L``.

    The op does almost no work, so the time per op is what it costs to dispatch and launch
    one (on a GPU: the host issues launches slower than the GPU runs them).
    """
    torch = _torch()
    x, y = torch.ones(1, device=device), torch.ones(1, device=device)
    out = torch.empty_like(x)
    count = sizes.launches

    def fn() -> Any:
        for _ in range(count):
            torch.add(x, y, out=out)
        return out

    t = _time(fn, device, sizes, f"{count} x torch.add(x, y, out=z) on 1-element tensors", per_call=count,
              flush_l2=False, check=lambda z: bool((z == 2.0).all()))
    return _figure(t.median, "s", "median time of a loop of eager ops / ops per loop",
                   "1 fp32 element", t)


def kernel_latency(device: str, sizes: Sizes) -> dict[str, Any]:
    """One ``torch.add`` on one-element tensors, timed like the roofline-check kernels: one call
    per timing with the caches flushed before it. The median is what an isolated kernel costs
    when it does no work (on a GPU: event to event, kernel start-up and cold caches included)."""
    torch = _torch()
    x, y = torch.ones(1, device=device), torch.ones(1, device=device)
    out = torch.empty_like(x)
    t = _time(lambda: torch.add(x, y, out=out), device, sizes, "one torch.add(x, y, out=z) on 1-element tensors",
              flush_l2=True, check=lambda z: bool((z == 2.0).all()))
    return _figure(t.median, "s", "median time of one isolated tiny kernel, timed like the roofline check",
                   "1 fp32 element", t)


_EMPTY_KERNEL: Any = None


def _empty_kernel() -> Any:
    global _EMPTY_KERNEL
    if _EMPTY_KERNEL is None:
        import triton

        @triton.jit
        def empty_kernel(x_ptr):  # noqa: ANN001, ARG001 - a kernel that does nothing
            pass

        _EMPTY_KERNEL = empty_kernel
    return _EMPTY_KERNEL


def launch_triton(device: str, sizes: Sizes) -> dict[str, Any]:
    """An empty Triton kernel (one program), ``L`` launches in a loop: overhead = time / ``L``.

    On a CPU the kernel runs under the Triton interpreter, so the figure is the interpreter's
    cost per launch, not a GPU's.
    """
    try:
        kernel = _empty_kernel()
    except ImportError as exc:
        raise Skip(f"triton is not importable ({exc})") from exc
    torch = _torch()
    x = torch.ones(1, device=device)
    count = sizes.launches if device == "cuda" else max(sizes.launches // 10, 1)

    def fn() -> Any:
        for _ in range(count):
            kernel[(1,)](x)
        return x

    t = _time(fn, device, sizes, f"{count} launches of an empty @triton.jit kernel", per_call=count,
              flush_l2=False)
    note = "Triton interpreter (TRITON_INTERPRET=1)" if device == "cpu" else "compiled kernel"
    return _figure(t.median, "s", f"median time of a loop of launches / launches per loop; {note}",
                   "grid (1,)", t)


def launch_graph(device: str, sizes: Sizes) -> dict[str, Any]:
    """``L`` tiny kernels captured in one CUDA graph, replayed: per-kernel time = replay time / ``L``.

    A graph replay submits all its kernels in one call, so what remains is the GPU's own cost
    to start one kernel after another.
    """
    if device != "cuda":
        raise Skip("CUDA graphs need a CUDA device")
    torch = _torch()
    count = sizes.launches
    x = torch.ones(1, device=device)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            x.mul_(1.0)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(count):
            x.mul_(1.0)

    def fn() -> Any:
        graph.replay()
        return x

    t = _time(fn, device, sizes, f"replay of a CUDA graph of {count} Tensor.mul_ kernels",
              per_call=count, flush_l2=False, check=lambda out: bool((out == 1.0).all()))
    return _figure(t.median, "s", "median time of a graph replay / kernels in the graph",
                   "1 fp32 element per kernel", t)


def h2d_copy(device: str, sizes: Sizes, pinned: bool) -> dict[str, Any]:
    """Host-to-device copy of ``N`` bytes from pageable or pinned host memory: ``N`` / median time."""
    if device != "cuda":
        raise Skip("a host-to-device copy needs a separate device; on a CPU there is none")
    torch = _torch()
    n = sizes.h2d_bytes // 4
    src = torch.randn(n)
    if pinned:
        src = src.pin_memory()
    dst = torch.empty(n, device=device)
    t = _time(lambda: dst.copy_(src, non_blocking=pinned), device, sizes,
              f"{'pinned' if pinned else 'pageable'} host -> device copy, {n * 4} bytes",
              flush_l2=False, check=lambda out: bool(torch.equal(out[:4096].cpu(), src[:4096])))
    kind = "pinned (page-locked)" if pinned else "pageable"
    return _figure(n * 4 / t.median, "byte/s", f"bytes copied / median time of Tensor.copy_ from {kind} "
                   "host memory", f"{n * 4} bytes", t)


#: figure name -> function(device, sizes) measuring it, in the order they run
MICROBENCHMARKS: dict[str, Callable[[str, Sizes], dict[str, Any]]] = {
    "copy_bandwidth": copy_bandwidth,
    "read_bandwidth": read_bandwidth,
    **{f"matmul_{d}": (lambda dev, s, d=d: matmul_throughput(dev, s, d))
       for d in ("fp32", "tf32", "fp16", "bf16", "fp8")},
    "launch_eager": launch_eager,
    "launch_triton": launch_triton,
    "launch_graph": launch_graph,
    "kernel_latency": kernel_latency,
    "h2d_pageable": lambda dev, s: h2d_copy(dev, s, pinned=False),
    "h2d_pinned": lambda dev, s: h2d_copy(dev, s, pinned=True),
}
