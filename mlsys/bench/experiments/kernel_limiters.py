"""What limits the kernels Part II writes, tiles and fuses: each timed, and all profiled with Nsight Compute,
on one GPU in one run.

The cases:

* "Writing kernels": ``c = a + b`` on 2^26 fp32 elements and a row softmax of 32768 x 1024 fp32, each three
  ways: the chapter's CUDA C++ kernel (:data:`.kernel_artefacts.CUDA_SOURCE`, built by ``nvcc`` and launched
  through the CUDA driver API, 256 threads a block), its Triton kernel, and PyTorch;
* "Tiling": the experiments' one Triton matmul (:mod:`._matmul`) at 4096^3 bf16 with 32x32x32, 64x64x64 and
  128x128x64 tiles (the configurations of ``tile_configs``);
* "Fusion": ``gelu(x + b) * s`` on 8192 x 8192 bf16 (:func:`.inductor_code.bias_gelu_scale`), eager and
  ``torch.compile``'d.

Each case is timed with :func:`._part2.timed` (CUDA events, the L2 cleared by a read sweep before each call)
and its compulsory bytes and FLOPs are counted. Then ONE ``ncu`` run profiles them all
(:func:`mlsys.bench.limiters.ncu_argv`): the child process (:func:`profile_child`) builds and warms every
case, then between ``cudaProfilerStart``/``Stop`` runs each once followed by a boundary kernel, and the
parent splits ncu's table at the boundaries (:func:`mlsys.bench.limiters.split_cases`). Each case's record
keeps its time beside its kernels' throughput breakdown, occupancy, top stalls and limiter. A case that
cannot be built on the machine (no ``nvcc``, say) is recorded as failed, with the reason, and the rest go on.

    PATH=/usr/local/cuda/bin:$PATH python -m mlsys.bench run kernel_limiters --device cuda
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from typing import Any

from .. import limiters
from ._part2 import figure, rel_error, timed

SHOWN_IN = ("chapters/08_writing_kernels", "chapters/09_tiling", "chapters/10_fusion_and_compilers")
NEEDS = "cuda"

BOUNDARY = "mlsys_case_boundary"
"""The Triton kernel run after each case inside the profiled window; ncu's rows are split at it."""

N_ADD = 1 << 26
SOFTMAX = (32768, 1024)
MATMUL = 4096
TILES = {"matmul_32": (32, 32, 32, 4, 2, 1), "matmul_64": (64, 64, 64, 4, 3, 1), "matmul_128": (128, 128, 64, 8, 3, 1)}
CHAIN = (8192, 8192)
THREADS = 256  # threads per block of the CUDA kernels (the chapter's launch)


def _driver() -> Any:
    """libcuda with the argument types of the three calls used, and the primary context made current."""
    import ctypes

    import torch

    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuLaunchKernel.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                                   ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    torch.zeros(1, device="cuda")  # torch's runtime creates and binds the device's primary context
    ctx = ctypes.c_void_p()
    _ok(lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:
        raise RuntimeError("no current CUDA context after torch initialised the device")
    return lib


def _ok(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} failed with CUDA driver error {rc}")


def cuda_kernels() -> dict[str, Callable[..., None]]:
    """The chapter's CUDA kernels built by nvcc for this GPU; ``{name: launch(grid, shared_bytes, *args)}``."""
    import ctypes
    import tempfile
    from pathlib import Path

    import torch

    from .kernel_artefacts import CUDA_SOURCE, _tool

    major, minor = torch.cuda.get_device_capability()
    work = Path(tempfile.mkdtemp(prefix="mlsys-kernel-limiters-"))
    (work / "k.cu").write_text(CUDA_SOURCE, encoding="utf-8")
    subprocess.run([_tool("nvcc"), f"-arch=sm_{major}{minor}", "-O3", "-cubin", str(work / "k.cu"), "-o",
                    str(work / "k.cubin")], check=True, capture_output=True, timeout=120)
    lib = _driver()
    module = ctypes.c_void_p()
    _ok(lib.cuModuleLoadData(ctypes.byref(module), (work / "k.cubin").read_bytes()), "cuModuleLoadData")

    def launcher(name: str) -> Callable[..., None]:
        fn = ctypes.c_void_p()
        _ok(lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()), f"cuModuleGetFunction({name})")

        def launch(grid: int, shared: int, *args: Any) -> None:
            held = [ctypes.c_void_p(a.data_ptr()) if hasattr(a, "data_ptr") else ctypes.c_int(a) for a in args]
            params = (ctypes.c_void_p * len(held))(*[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in held])
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            _ok(lib.cuLaunchKernel(fn, grid, 1, 1, THREADS, 1, 1, shared, stream, params, None), f"launch {name}")
        return launch

    return {name: launcher(name) for name in ("vector_add", "softmax_rows")}


def _writing_cases(quick: bool) -> dict[str, tuple[Callable[[], Any], Callable[[Any], bool], dict[str, Any]]]:
    """Vector add and row softmax, CUDA / Triton / torch: ``{case: (fn, check, counts)}``."""
    import torch
    import triton

    from .kernel_artefacts import _triton_kernels

    n = N_ADD >> 4 if quick else N_ADD
    rows, cols = (SOFTMAX[0] >> 4, SOFTMAX[1]) if quick else SOFTMAX
    g = torch.Generator(device="cuda").manual_seed(0)
    a, b = torch.randn(n, device="cuda", generator=g), torch.randn(n, device="cuda", generator=g)
    c = torch.empty_like(a)
    x = torch.randn(rows, cols, device="cuda", generator=g)
    y = torch.empty_like(x)
    add_ref, sm_ref = (a + b)[:4096].double(), torch.softmax(x[:64].double(), -1)
    add_ok, sm_ok = (lambda o: rel_error(o[:4096], add_ref) < 1e-6), (lambda o: rel_error(o[:64], sm_ref) < 1e-4)
    tri = _triton_kernels()
    add_counts = {"elements": n, "bytes": 3 * 4 * n, "dtype": "fp32"}
    sm_counts = {"shape": [rows, cols], "bytes": 2 * 4 * rows * cols, "dtype": "fp32"}

    def triton_add() -> Any:
        tri["vector_add"][(triton.cdiv(n, 1024),)](a, b, c, n, BLOCK=1024)
        return c

    def triton_softmax() -> Any:
        tri["softmax_rows"][(rows,)](x, y, cols, x.stride(0), BLOCK=cols)
        return y

    cases = {"add_torch": (lambda: torch.add(a, b, out=c), add_ok, add_counts),
             "add_triton": (triton_add, add_ok, add_counts),
             "softmax_torch": (lambda: torch.softmax(x, -1), sm_ok, sm_counts),
             "softmax_triton": (triton_softmax, sm_ok, sm_counts)}
    try:
        cu = cuda_kernels()
    except Exception as exc:  # noqa: BLE001 - no nvcc or driver on this machine: the CUDA cases are recorded as failed
        return {**cases, "add_cuda": _failed(exc), "softmax_cuda": _failed(exc)}

    def cuda_add() -> Any:
        cu["vector_add"](triton.cdiv(n, THREADS), 0, a, b, c, n)
        return c

    def cuda_softmax() -> Any:
        cu["softmax_rows"](rows, 4 * THREADS, x, y, cols)
        return y

    return {**cases, "add_cuda": (cuda_add, add_ok, add_counts), "softmax_cuda": (cuda_softmax, sm_ok, sm_counts)}


def _failed(exc: BaseException) -> tuple[None, None, dict[str, Any]]:
    return None, None, {"failed": f"{type(exc).__name__}: {str(exc)[:300]}"}


def _tiling_and_fusion_cases(quick: bool) -> dict[str, tuple[Callable[[], Any], Callable[[Any], bool], dict[str, Any]]]:
    """The three matmul tilings and the eager / compiled bias-GELU-scale chain."""
    import torch

    from ._matmul import matmul
    from .inductor_code import bias_gelu_scale

    s = MATMUL >> 1 if quick else MATMUL
    g = torch.Generator(device="cuda").manual_seed(0)
    p, q = torch.randn(s, s, device="cuda", generator=g).bfloat16(), torch.randn(s, s, device="cuda", generator=g).bfloat16()
    ref = p[:16].double() @ q.double()
    mm_counts = {"size": s, "flops": 2 * s ** 3, "bytes": 3 * 2 * s * s, "dtype": "bf16"}
    out: dict[str, Any] = {}
    for name, cfg in TILES.items():
        out[name] = ((lambda c=cfg: matmul(p, q, *c)), (lambda o: rel_error(o[:16], ref) < 2e-2),
                     {**mm_counts, "config": dict(zip(("block_m", "block_n", "block_k", "num_warps", "num_stages",
                                                       "group_m"), cfg, strict=True))})
    rows, cols = (CHAIN[0] >> 2, CHAIN[1]) if quick else CHAIN
    x = torch.randn(rows, cols, device="cuda", generator=g).bfloat16()
    b, sc = torch.randn(cols, device="cuda", generator=g).bfloat16(), torch.randn(cols, device="cuda", generator=g).bfloat16()
    chain_ref = bias_gelu_scale(x[:8].float(), b.float(), sc.float()).double()
    compiled = torch.compile(bias_gelu_scale)
    counts = {"shape": [rows, cols], "bytes": 2 * 2 * rows * cols + 2 * 2 * cols, "dtype": "bf16"}

    def ok(o: Any) -> bool:
        return rel_error(o[:8], chain_ref) < 2e-2

    out["chain_eager"] = ((lambda: bias_gelu_scale(x, b, sc)), ok, counts)
    out["chain_compiled"] = ((lambda: compiled(x, b, sc)), ok, counts)
    return out


def cases(quick: bool = False) -> dict[str, tuple[Any, Any, dict[str, Any]]]:
    """Every case, in the order the profile runs them: ``{case: (fn or None, check or None, counts)}``."""
    return {**_writing_cases(quick), **_tiling_and_fusion_cases(quick)}


def _boundary() -> Callable[[], None]:
    """A one-program Triton kernel named :data:`BOUNDARY`, run after each case in the profiled window."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def mlsys_case_boundary(p):  # noqa: ANN001, ANN202 - a Triton kernel
        tl.store(p, tl.load(p) + 1)

    kernel = mlsys_case_boundary
    flag = torch.zeros(1, device="cuda", dtype=torch.int32)
    return lambda: kernel[(1,)](flag)


def profile_child(case: str = "all") -> None:
    """The ncu child: build and warm every case, then profile one call of each, a boundary kernel after each."""
    import torch

    if case != "all":
        raise ValueError(f"kernel_limiters profiles its cases together; expected 'all', got {case!r}")
    built = cases()
    boundary = _boundary()
    for fn, _check, _counts in built.values():
        for _ in range(3 if fn is not None else 0):
            fn()
    boundary()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for fn, _check, _counts in built.values():
        if fn is not None:
            fn()
        boundary()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def _profile(names: list[str]) -> dict[str, list[dict[str, Any]]]:
    import os

    # Inductor compiles in the child's own process (no worker pool for ncu to follow)
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    done = subprocess.run(limiters.ncu_argv("kernel_limiters", "all"), capture_output=True, text=True, timeout=900,
                          check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"ncu failed (rc {done.returncode}): {done.stderr[-2000:]}")
    return dict(zip(names, limiters.split_cases(limiters.parse_ncu_csv(done.stdout), BOUNDARY, len(names)),
                    strict=True))


def run(ctx: Any) -> dict[str, Any]:
    built = cases(ctx.quick)
    out: dict[str, Any] = {"metrics": limiters.metric_names(), "boundary": BOUNDARY, "threads_per_cuda_block": THREADS}
    for name, (fn, check, counts) in built.items():
        if fn is None:
            out[name] = {**counts}
            continue
        t = timed(fn, "cuda", name, ctx.quick, check=check)
        out[name] = {**counts, "time": figure(t.median, "s", "median of the timed calls", t)}
    try:
        profiles = _profile(list(built))
    except (RuntimeError, ValueError, FileNotFoundError, subprocess.TimeoutExpired) as exc:
        # the timings stand on their own; each case says why it has no profile
        profiles = {name: exc for name in built}
    for name, kernels in profiles.items():
        if "failed" in out[name]:
            continue
        if isinstance(kernels, BaseException):
            out[name]["limiters"] = {"failed": f"{type(kernels).__name__}: {str(kernels)[:300]}"}
        else:
            out[name]["limiters"] = limiters.kernel_limiters(kernels) if kernels else {"failed": "no kernel profiled"}
    return out


def limiter_phrase(row: dict[str, Any] | None) -> str | None:
    """``"dram-bound: DRAM at 91% of its peak, occupancy 88%"`` for a :func:`summary` row with a profile: the
    limiter's unit first (the busiest unit for a latency-bound case), then the busiest unit where it differs (for
    a DRAM-bound case, the L2 carrying the same bytes), else DRAM beside it; ``None`` without a profile."""
    if row is None or row.get("limiter") is None:
        return None
    names = {"dram": "DRAM", "l2": "the L2", "l1": "L1/shared memory", "issue": "instruction issue",
             "tensor": "the tensor pipe", "fp32": "the FP32 pipe"}
    units, busiest = row["units"], row["busiest"]
    head = busiest if row["limiter"] not in names else row["limiter"]
    text = f"{row['limiter']}-bound: {names[head]} at {units[head]:.0f}% of its peak"
    if busiest != head:
        text += f", {names[busiest]} at {units[busiest]:.0f}% (the same bytes, counted again on their way in)"
    elif head != "dram" and "dram" in units:
        text += f", DRAM at {units['dram']:.0f}%"
    return text + f", occupancy {row['occupancy']:.0f}%"


MISSING = "not in the course's data yet"
"""What a page shows for a figure of this experiment while no record of it exists."""


def summary(data: dict[str, Any] | None, names: list[str], copy_bandwidth: float) -> list[dict[str, Any]] | None:
    """Per case of a record's ``results``: median time (s, and ``time_us``), compulsory bytes over that time (B/s,
    and ``tb_per_s``), its share of
    ``copy_bandwidth`` (B/s, the same GPU's measured copy roof), FLOP/s where counted, and the limiter, busiest
    unit and achieved occupancy (%) of the case's longest kernel (``None``, with ``not_profiled`` saying why, when
    the case has a time but no profile). ``None`` when there is no record (``data`` is None): the page then shows
    :data:`MISSING`. A case the record lacks or that failed is ``{"case": name, "failed": why}``."""
    if data is None:
        return None
    if copy_bandwidth <= 0:
        raise ValueError(f"copy_bandwidth must be a positive rate in B/s, got {copy_bandwidth}")
    out = []
    for name in names:
        case = data.get(name) or {"failed": "not recorded"}
        if "failed" in case or "time" not in case:
            out.append({"case": name, "failed": case.get("failed", "no time recorded")})
            continue
        t = case["time"]["value"]
        row = {"case": name, "time": t, "time_us": t * 1e6, "bandwidth": case["bytes"] / t,
               "tb_per_s": case["bytes"] / t / 1e12, "share": case["bytes"] / t / copy_bandwidth,
               "flops": case["flops"] / t if "flops" in case else None, "limiter": None, "busiest": None,
               "busiest_pct": None, "units": {}, "occupancy": None, "kernels": 0,
               "not_profiled": case.get("limiters", {}).get("failed", "no profile recorded")}
        if "kernels" in case.get("limiters", {}):
            longest = max(case["limiters"]["kernels"], key=lambda k: k["duration"]["value"])
            unit = max(longest["units"], key=longest["units"].get)
            row.update(limiter=limiters.case_limiter(case["limiters"]), busiest=unit, busiest_pct=longest["units"][unit],
                       units=dict(longest["units"]),
                       occupancy=longest["occupancy"], kernels=len(case["limiters"]["kernels"]), not_profiled=None)
        out.append(row)
    return out
