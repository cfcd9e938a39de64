"""Lab 2's reference matmul kernels (naive, tiled, grouped+autotuned, persistent+TMA) against torch.matmul (cuBLAS), fp16, m = n = k.

The kernels are not copied here: they are the code cells of the instructor notebook
``labs/source/lab2_tiled_matmul/lab2_tiled_matmul.ipynb`` tagged ``lab2-kernel``, run with
:mod:`mlsys.runtime.notebook` (the one way this course runs a notebook's cells outside Jupyter). Each kernel
and ``torch.matmul`` are timed with :func:`mlsys.bench.timing.time_fn` on the same inputs in the
same run; throughput = ``2 m n k`` (:func:`mlsys.roofline.matmul_flops``) / median time; every
result is checked against ``torch.matmul`` after timing, and on odd shapes beforehand. The
headline is the faster of the two reference kernels at the largest size, as a share of cuBLAS.
On a CPU (``--quick``) it runs tiny sizes under the Triton interpreter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SHOWN_IN = ("labs/source/lab2_tiled_matmul",)
NEEDS = "any"

REPO = Path(__file__).resolve().parents[3]
NOTEBOOK = REPO / "labs" / "source" / "lab2_tiled_matmul" / "lab2_tiled_matmul.ipynb"

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
REFERENCES = ("grouped+autotuned", "persistent+TMA")  # the headline is the faster of these at the largest size
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


def load_kernels(device: str, notebook: Path = NOTEBOOK) -> Any:
    """Run the notebook's cells tagged ``lab2-kernel`` (:func:`mlsys.runtime.notebook.exec_cells`) in a fresh module.

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
              repeats: int, warmup: int) -> dict[str, Any]:
    """Median time and TFLOP/s of each kernel and of torch.matmul at each size, plus checks."""
    import torch

    from ...roofline import matmul_flops
    from ...units import Q_
    from ..timing import time_fn

    def tflops(size: int, seconds: float) -> float:
        """``2 m n k / seconds`` in TFLOP/s."""
        return (matmul_flops(size, size, size) / Q_(seconds, "s")).to("TFLOP/s").magnitude

    out: dict[str, Any] = {"time": {}, "throughput": {}, "ratio_to_cublas": {}, "checks": [], "autotune": {},
                           "method": None, "failures": []}
    cublas: dict[int, float] = {}
    all_sizes = sorted({s for v in sizes.values() for s in v})
    for size in all_sizes:
        g = torch.Generator().manual_seed(size)
        a = torch.randn(size, size, generator=g).to(torch.float16).to(dev)
        b = torch.randn(size, size, generator=g).to(torch.float16).to(dev)
        t_ref = time_fn(lambda a=a, b=b: torch.matmul(a, b), dev, what=f"torch.matmul {size}^3",
                        repeats=repeats, warmup=warmup)
        cublas[size] = t_ref.median
        out["method"] = {k: v for k, v in t_ref.to_json().items() if k in ("method", "flush", "repeats", "warmup")}
        out["time"].setdefault("torch.matmul", {})[str(size)] = {"value": t_ref.median, "unit": "s"}
        out["throughput"].setdefault("torch.matmul", {})[str(size)] = {"value": tflops(size, t_ref.median), "unit": "TFLOP/s"}
        expected = torch.matmul(a, b)
        for name, fn in kernels.items():
            if size not in sizes.get(name, []):
                continue
            reps = max(3, repeats // 4) if name == "naive" else repeats
            try:
                t = time_fn(lambda fn=fn, a=a, b=b: fn(a, b), dev, what=f"{name} {size}^3", repeats=reps,
                            warmup=warmup)
                err, ok = max_error(fn(a, b), expected)  # after timing
            except Exception as exc:  # e.g. a compiler that rejects the TMA kernel: record it, go on
                out["failures"].append({"kernel": name, "size": size, "error": f"{type(exc).__name__}: {exc}"[:2000]})
                continue
            out["time"].setdefault(name, {})[str(size)] = {"value": t.median, "unit": "s"}
            out["throughput"].setdefault(name, {})[str(size)] = {"value": tflops(size, t.median), "unit": "TFLOP/s"}
            out["ratio_to_cublas"].setdefault(name, {})[str(size)] = cublas[size] / t.median
            out["checks"].append({"kernel": name, "size": size, "max_abs_error_vs_torch": err, "ok": ok})
            if name in AUTOTUNERS:
                out["autotune"].setdefault(name, {})[str(size)] = config_of(getattr(mod, AUTOTUNERS[name]))
    return out



def run(ctx: Any) -> dict[str, Any]:
    small = ctx.device != "cuda"
    mod = load_kernels(ctx.device)
    kernels = kernels_of(mod)
    checks = correctness(kernels, ctx.device, TINY_CHECK_SHAPES if small else CHECK_SHAPES)
    sizes = TINY_SIZES if small else GPU_SIZES
    if ctx.quick and not small:
        sizes = {k: v[:2] for k, v in sizes.items()}
    result = benchmark(kernels, mod, sizes, ctx.device, repeats=3 if small else 20, warmup=1 if small else 3)
    head_size = max(int(s) for s in result["throughput"]["grouped+autotuned"])
    measured = [k for k in REFERENCES if str(head_size) in result["throughput"].get(k, {})]
    best = max(measured, key=lambda k: result["throughput"][k][str(head_size)]["value"])
    all_correct = (all(r["ok"] for r in checks) and all(r["ok"] for r in result["checks"])
                   and not result["failures"])
    if not all_correct:
        ctx.note("a kernel was wrong or failed: see correctness_odd_shapes, checks_after_timing and failures")
    return {
        "what": "Lab 2 reference kernels vs torch.matmul; m = n = k; fp16 inputs, fp32 accumulation, fp16 output",
        "source": "labs/source/lab2_tiled_matmul/lab2_tiled_matmul.ipynb (cells tagged lab2-kernel)",
        "flops_formula": "2 m n k (mlsys.roofline.matmul_flops); throughput = 2 m n k / median time",
        "method": result["method"],
        "headline": {"kernel": best, "size": head_size,
                     "throughput": result["throughput"][best][str(head_size)],
                     "cublas_throughput": result["throughput"]["torch.matmul"][str(head_size)],
                     "ratio": result["ratio_to_cublas"][best][str(head_size)]},
        "throughput": result["throughput"], "time": result["time"], "ratio_to_cublas": result["ratio_to_cublas"],
        "autotune": result["autotune"], "failures": result["failures"],
        "checks_after_timing": result["checks"], "correctness_odd_shapes": checks, "all_correct": all_correct,
    }
