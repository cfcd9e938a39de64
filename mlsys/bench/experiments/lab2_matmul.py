"""Lab 2's reference matmul kernels (naive, tiled, grouped+autotuned, persistent+TMA) against torch.matmul (cuBLAS), fp16, m = n = k and two other shapes.

The kernels are not copied here: they are the code cells of the instructor notebook
``labs/source/lab2_tiled_matmul/lab2_tiled_matmul.ipynb`` and of the optional
``labs/going_further/lab2_going_further.ipynb`` (the persistent TMA kernel) tagged ``lab2-kernel``, run with
:mod:`mlsys.runtime.notebook` (the one way this course runs a notebook's cells outside Jupyter). Each kernel
and ``torch.matmul`` are timed on the same inputs in the same run, call by call in turn
(:func:`mlsys.bench.timing.time_interleaved`: the library and the kernels see the same clocks and
temperature, and a GPU spin before each call keeps Python's launch overhead out of the GPU time; the slow naive kernel alone, with :func:`mlsys.bench.timing.time_fn`); throughput = ``2 m n k`` (:func:`mlsys.roofline.matmul_flops``) / median time; every
result is checked against ``torch.matmul`` after timing, and on odd shapes beforehand. The
headline is the faster of the two reference kernels at the largest size, as a share of cuBLAS;
``lowest_share_of_cublas`` is each reference kernel's lowest share over 2048^3, 4096^3, 8192^3 and the
other shapes (the figure the targets hold, not the best).
On a GPU the record also names the kernels cuBLAS ran at each shape (``library_kernels``: its names
carry the tile it chose) and counts how the grouped kernel's compiled code loads its operands
(``grouped_loads``: 16-byte asynchronous copies against 2-byte loads, :func:`load_counts`).
On a CPU (``--quick``) it runs tiny sizes under the Triton interpreter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...runtime.paths import lab_notebook

SHOWN_IN = ("labs/source/lab2_tiled_matmul",)
NEEDS = "any"

NOTEBOOK = lab_notebook("lab2_tiled_matmul", must_exist=False)  # the instructor's notebook
#: the optional notebook beside the lab that holds the persistent TMA kernel (its cell tagged ``lab2-kernel``)
GOING_FURTHER = NOTEBOOK.parents[2] / "going_further" / "lab2_going_further.ipynb"

KERNEL_TAG = "lab2-kernel"

# sizes (m = n = k) per kernel; the naive kernel is slow, so it stops early
GPU_SIZES = {
    "naive": [256, 512, 1024, 2048],
    "tiled 64x64": [1024, 2048, 4096, 8192],
    "tiled 128x128": [1024, 2048, 4096, 8192],
    "grouped+autotuned": [1024, 2048, 4096, 8192],
    "persistent+TMA": [1024, 2048, 4096, 8192],
}
TINY_SIZES = {"naive": [8, 12], "tiled 64x64": [32, 48], "tiled 128x128": [32], "grouped+autotuned": [32, 48],
              "persistent+TMA": [32, 48]}
# odd, degenerate, uneven (one compile each), and rows aligned to 16 bytes (the TMA kernel's own path)
CHECK_SHAPES = [(65, 127, 33), (1, 1, 1), (130, 20, 50), (72, 136, 40)]
TINY_CHECK_SHAPES = [(9, 13, 33), (1, 1, 1)]  # the interpreter runs ~5 ms per program: keep the grids small
#: shapes (m, n, k) that are not cubes of a power of two: a short k (C's traffic weighs more) and a size that
#: is not a multiple of 128 (partial tiles at every edge; rows still 16-byte aligned, so TMA applies)
GPU_SHAPES = [(8192, 8192, 512), (5000, 5000, 5000)]
TINY_SHAPES = [(48, 40, 24)]
#: the sizes at which the reference's share of cuBLAS is held to a target; the record keeps the lowest
TARGET_SIZES = (2048, 4096, 8192)
REFERENCES = ("grouped+autotuned", "persistent+TMA")
#: a GPU spin before each timed call (mlsys.bench.timing.time_interleaved): the autotuned wrappers spend
#: tens of microseconds in Python per call, as long as a 2048^3 product runs; the figures are GPU time
HOST_GAP_S = 150e-6  # the headline is the faster of these at the largest size
AUTOTUNERS = {"grouped+autotuned": "matmul_kernel", "persistent+TMA": "matmul_tma_kernel"}


def kernel_sources(notebook: Path = NOTEBOOK, tag: str = KERNEL_TAG) -> list[tuple[str, str]]:
    """(grade_id, source) of the notebook's code cells tagged ``tag``, in notebook order."""
    from ...runtime.notebook import code_cells

    if not notebook.is_file():
        raise FileNotFoundError(f"expected the Lab 2 instructor notebook at {notebook}")
    cells = [(c.grade_id, c.source) for c in code_cells(notebook) if tag in c.tags]
    if not cells:
        raise ValueError(f"no code cell tagged {tag!r} in {notebook}: expected the kernel cells of Lab 2")
    return cells


def load_kernels(device: str, notebook: Path = NOTEBOOK, going_further: Path = GOING_FURTHER) -> Any:
    """Run the notebook's cells tagged ``lab2-kernel`` (:func:`mlsys.runtime.notebook.exec_cells`) in a fresh module,
    then those of the optional notebook (the persistent TMA kernel), with ``fallback`` set to the grouped ``matmul``.

    The module starts with the names the notebook's setup cell provides to them: ``torch``,
    ``triton``, ``tl`` and ``device`` (``"cuda"`` or ``"cpu"``). nbexec registers each cell's source,
    so Triton's JIT reads the kernels as it reads them in Jupyter.
    """
    import types

    import torch
    import triton
    import triton.language as tl

    from ...runtime.notebook import exec_cells

    module = types.ModuleType("lab2_kernels")
    module.__dict__.update(torch=torch, triton=triton, tl=tl, device=device)
    exec_cells(notebook, [gid for gid, _ in kernel_sources(notebook)], module.__dict__)
    module.fallback = module.matmul  # the TMA wrapper hands what it does not take to the grouped kernel
    exec_cells(going_further, [gid for gid, _ in kernel_sources(going_further)], module.__dict__)
    for name in ("naive_matmul", "tiled_matmul", "matmul", "matmul_kernel", "matmul_tma", "matmul_tma_kernel"):
        if not hasattr(module, name):
            raise AttributeError(f"the notebook's kernel cells should define {name!r}; they do not")
    return module


def kernels_of(mod: Any) -> dict[str, Any]:
    """The wrappers to benchmark, by the names used in the notebook's benchmark cell."""
    return {
        "naive": mod.naive_matmul,
        "tiled 64x64": lambda a, b: mod.tiled_matmul(a, b, 64, 64, 32, num_warps=4),
        "tiled 128x128": lambda a, b: mod.tiled_matmul(a, b, 128, 128, 64, num_warps=8),
        "grouped+autotuned": mod.matmul,
        "persistent+TMA": mod.matmul_tma,
    }


def max_error(actual: Any, expected: Any) -> tuple[float, bool]:
    """Largest |actual - expected| and whether every element is within 2e-2 + 1e-2 |expected|.

    The tolerance is the notebook's (fp16 keeps ~3 significant digits; fp32 inputs may use TF32).
    """
    import torch

    diff = (actual.float() - expected.float()).abs()
    ok = bool(torch.isfinite(actual.float()).all()) and bool((diff <= 2e-2 + 1e-2 * expected.float().abs()).all())
    return float(diff.max()), ok


def correctness(kernels: dict[str, Any], dev: str, shapes: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """Every kernel on odd and uneven ``shapes``, fp16 and fp32, against torch.matmul in fp32."""
    import torch

    rows = []
    for name, fn in kernels.items():
        for m, n, k in shapes:
            for dtype in (torch.float16, torch.float32):
                g = torch.Generator().manual_seed(m * 7 + n * 13 + k)
                a = torch.randn(m, k, generator=g).to(dtype).to(dev)
                b = torch.randn(k, n, generator=g).to(dtype).to(dev)
                row = {"kernel": name, "shape": [m, n, k], "dtype": str(dtype).replace("torch.", "")}
                try:
                    err, ok = max_error(fn(a, b), torch.matmul(a.float(), b.float()).to(dtype))
                    row.update(max_abs_error=err, ok=ok)
                except Exception as exc:  # a kernel that does not compile here: record it, go on
                    err, ok = float("nan"), False
                    row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:2000])
                rows.append(row)
    return rows


def config_of(autotuner: Any) -> dict[str, Any] | None:
    """The configuration the autotuner chose at its last call (block sizes, warps, stages)."""
    cfg = getattr(autotuner, "best_config", None)
    if cfg is None:
        return None
    return {**cfg.kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}


def benchmark(kernels: dict[str, Any], mod: Any, sizes: dict[str, list[int]], dev: str,
              repeats: int, warmup: int, shapes: list[tuple[int, int, int]] = ()) -> dict[str, Any]:
    """Median time and TFLOP/s of each kernel and of torch.matmul at each size, plus checks.

    ``sizes`` are cubes (m = n = k, keyed ``"4096"``); ``shapes`` are (m, n, k), keyed ``"8192x8192x512"``,
    run by every kernel but the naive one.
    """
    import torch

    from ...roofline import matmul_flops
    from ...units import Q_
    from ..timing import time_fn, time_interleaved

    def tflops(m: int, n: int, k: int, seconds: float) -> float:
        """``2 m n k / seconds`` in TFLOP/s."""
        return (matmul_flops(m, n, k) / Q_(seconds, "s")).to("TFLOP/s").magnitude

    out: dict[str, Any] = {"time": {}, "throughput": {}, "ratio_to_cublas": {}, "checks": [], "autotune": {},
                           "method": None, "failures": [], "library_kernels": {}, "grouped_loads": {}}
    cublas: dict[str, float] = {}
    all_sizes = sorted({s for v in sizes.values() for s in v})
    cases = [(str(s), s, s, s, [name for name in kernels if s in sizes.get(name, [])]) for s in all_sizes]
    cases += [(f"{m}x{n}x{k}", m, n, k, [name for name in kernels if name != "naive"]) for m, n, k in shapes]
    for label, m, n, k, names in cases:
        g = torch.Generator().manual_seed(m * 31 + n * 7 + k)
        a = torch.randn(m, k, generator=g).to(torch.float16).to(dev)
        b = torch.randn(k, n, generator=g).to(torch.float16).to(dev)
        expected = torch.matmul(a, b)
        fns = {"torch.matmul": lambda a=a, b=b: torch.matmul(a, b)}
        for name in names:
            if name == "naive":
                continue  # timed on its own below: seconds per call at 2048^3
            try:
                kernels[name](a, b)  # compiles (and autotunes) here, outside every timed call
            except Exception as exc:  # e.g. a compiler that rejects the TMA kernel: record it, go on
                out["failures"].append({"kernel": name, "size": label, "error": f"{type(exc).__name__}: {exc}"[:2000]})
                continue
            fns[name] = lambda fn=kernels[name], a=a, b=b: fn(a, b)
        timings = time_interleaved(fns, dev, what=f"{label} fp16", repeats=repeats, warmup=warmup,
                                   host_gap_s=HOST_GAP_S)
        if "naive" in names:
            timings["naive"] = time_fn(lambda a=a, b=b: kernels["naive"](a, b), dev, what=f"naive {label}",
                                       repeats=max(3, repeats // 4), warmup=warmup)
        t_ref = timings["torch.matmul"]
        cublas[label] = t_ref.median
        out["method"] = {k: v for k, v in t_ref.to_json().items() if k in ("method", "flush", "repeats", "warmup")}
        for name, t in timings.items():
            out["time"].setdefault(name, {})[label] = {"value": t.median, "unit": "s"}
            out["throughput"].setdefault(name, {})[label] = {"value": tflops(m, n, k, t.median), "unit": "TFLOP/s"}
            if name == "torch.matmul":
                continue
            err, ok = max_error(kernels[name](a, b), expected)  # after timing
            out["ratio_to_cublas"].setdefault(name, {})[label] = cublas[label] / t.median
            out["checks"].append({"kernel": name, "size": label, "max_abs_error_vs_torch": err, "ok": ok})
            if name in AUTOTUNERS:
                kernels[name](a, b)  # the autotuner's best_config is that of its last call: this shape's
                out["autotune"].setdefault(name, {})[label] = config_of(getattr(mod, AUTOTUNERS[name]))
        if dev == "cuda":
            out["library_kernels"][label] = library_kernels(lambda a=a, b=b: torch.matmul(a, b), dev)
            if "grouped+autotuned" in fns:
                out["grouped_loads"][label] = grouped_loads(mod, a, b)
    return out


def load_counts(ptx: str) -> dict[str, int]:
    """How a kernel's PTX reads global memory: 16-byte asynchronous copies into shared memory
    (``cp.async.cg.shared.global``, what Triton's software pipeline is built on) and 2-byte loads into
    registers (``ld.global[.modifiers].b16``/``.u16``, one fp16 element each)."""
    import re

    return {"async_copies": len(re.findall(r"cp\.async\.cg\.shared\.global", ptx)),
            "two_byte_loads": len(re.findall(r"ld\.global(?:\.\w+)*\.[bu]16\b", ptx))}


def grouped_loads(mod: Any, a: Any, b: Any) -> dict[str, Any]:
    """The grouped kernel as compiled for this shape, in the configuration its autotuner chose:
    :func:`load_counts` of its PTX and its shared memory. Triton compiles one kernel per pattern of
    its integer arguments (each divisible by 16 or not), so the counts differ between shapes."""
    import torch

    try:
        cfg = mod.matmul_kernel.best_config
        jit = mod.matmul_kernel.fn.fn  # autotune -> heuristics -> the jit function
        m, k = a.shape
        n = b.shape[1]
        c = torch.empty(m, n, device=a.device, dtype=a.dtype)
        kernel = jit.warmup(a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                            c.stride(1), **cfg.kwargs, EVEN_K=k % cfg.kwargs["BLOCK_K"] == 0,
                            num_warps=cfg.num_warps, num_stages=cfg.num_stages, grid=(1,))
        return {**load_counts(kernel.asm["ptx"]), "shared_memory": {"value": int(kernel.metadata.shared), "unit": "byte"},
                "config": config_of(mod.matmul_kernel)}
    except Exception as exc:  # a Triton whose internals differ: say so, keep the timings
        return {"error": f"{type(exc).__name__}: {exc}"[:500]}


def library_kernels(fn: Any, dev: str) -> list[str]:
    """The names of the kernels one call of ``fn`` runs (:func:`mlsys.bench.profile.kernel_profile`).

    cuBLAS names its Hopper kernels after their configuration (``nvjet_sm90_hsh_256x152_64x4_...``: a
    256 x 152 output tile, 64-wide k steps, 4 stages), so the record says which tile the library chose.
    """
    from ..profile import kernel_profile

    return [k["name"] for k in kernel_profile(fn, dev, calls=1)["kernels"]]



def lowest_shares(ratios: dict[str, dict[str, float]], labels: list[str]) -> dict[str, dict[str, Any]]:
    """Per reference kernel, its lowest share of cuBLAS over ``labels`` and where (labels it lacks are named)."""
    out = {}
    for name in REFERENCES:
        have = {lab: ratios.get(name, {}).get(lab) for lab in labels}
        measured = {lab: r for lab, r in have.items() if r is not None}
        if not measured:
            continue
        worst = min(measured, key=measured.get)
        out[name] = {"share": measured[worst], "at": worst, "over": labels,
                     "missing": [lab for lab, r in have.items() if r is None]}
    return out


def run(ctx: Any) -> dict[str, Any]:
    small = ctx.device != "cuda"
    mod = load_kernels(ctx.device)
    kernels = kernels_of(mod)
    checks = correctness(kernels, ctx.device, TINY_CHECK_SHAPES if small else CHECK_SHAPES)
    sizes = TINY_SIZES if small else GPU_SIZES
    shapes = TINY_SHAPES if small else GPU_SHAPES
    if ctx.quick and not small:
        sizes = {k: v[:2] for k, v in sizes.items()}
        shapes = shapes[:1]
    result = benchmark(kernels, mod, sizes, ctx.device, repeats=3 if small else 20, warmup=1 if small else 3,
                       shapes=shapes)
    head_size = max(int(s) for s in result["throughput"]["grouped+autotuned"] if s.isdigit())
    measured = [k for k in REFERENCES if str(head_size) in result["throughput"].get(k, {})]
    best = max(measured, key=lambda k: result["throughput"][k][str(head_size)]["value"])
    all_correct = (all(r["ok"] for r in checks) and all(r["ok"] for r in result["checks"])
                   and not result["failures"])
    if not all_correct:
        ctx.note("a kernel was wrong or failed: see correctness_odd_shapes, checks_after_timing and failures")
    target_labels = ([str(s) for s in sorted({s for v in sizes.values() for s in v}) if not small
                      and s in TARGET_SIZES] or [str(s) for s in sizes["grouped+autotuned"]])
    target_labels += [f"{m}x{n}x{k}" for m, n, k in shapes]
    return {
        "what": "Lab 2 reference kernels vs torch.matmul; m = n = k, plus the shapes named m x n x k; "
                "fp16 inputs, fp32 accumulation, fp16 output",
        "source": "labs/source/lab2_tiled_matmul/lab2_tiled_matmul.ipynb (cells tagged lab2-kernel)",
        "flops_formula": "2 m n k (mlsys.roofline.matmul_flops); throughput = 2 m n k / median time",
        "method": result["method"],
        "headline": {"kernel": best, "size": head_size,
                     "throughput": result["throughput"][best][str(head_size)],
                     "cublas_throughput": result["throughput"]["torch.matmul"][str(head_size)],
                     "ratio": result["ratio_to_cublas"][best][str(head_size)]},
        "lowest_share_of_cublas": lowest_shares(result["ratio_to_cublas"], target_labels),
        "throughput": result["throughput"], "time": result["time"], "ratio_to_cublas": result["ratio_to_cublas"],
        "autotune": result["autotune"], "failures": result["failures"],
        "library_kernels": result["library_kernels"], "grouped_loads": result["grouped_loads"],
        "checks_after_timing": result["checks"], "correctness_odd_shapes": checks, "all_correct": all_correct,
    }
