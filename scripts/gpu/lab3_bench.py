"""Lab 3 reference figures: eager PyTorch, torch.compile and the lab's own Triton kernels.

The kernels are *not* copied here: the code cells of ``labs/source/lab3_fusion/lab3_fusion.ipynb``
that define them (found by their nbgrader ``grade_id``) are executed in a fresh namespace, so what
is timed is exactly the lab's reference solution.

Measured, with CUDA events and the L2 cache flushed before every timed call
(``mlsys.bench.timing.time_cuda``; ``triton.testing.do_bench`` if mlsys.bench is missing):

* copy bandwidth (``mlsys.bench.micro.copy_bandwidth``: ``dst.copy_(src)``, bytes = read + written),
  on as many bytes as every case below, and on 1 GiB;
* cost of one eager launch (``mlsys.bench.micro.launch_eager``);
* ``relu(x) * 0.5 + 1.0``: eager (three kernels), ``torch.compile`` and the lab's fused kernel, at
  several sizes, fp32 and fp16; achieved bandwidth = model bytes / median time, its share of the
  copy bandwidth at the same size, the measured and the ``mlsys.fusion`` predicted speedup;
* softmax over the last dimension: ``torch.softmax`` and the lab's ``fused_softmax``;
* then every code cell of the notebook is run in order (as nbgrader would), so the GPU-only paths
  (profiler on CUDA, ``perf_`` cells) are exercised; each cell's status and score are recorded.

Every result is checked against PyTorch after timing. Output: ``$OUT/lab3_h100.json`` (or
``--out DIR``). Run on a GPU: ``python3 scripts/gpu/lab3_bench.py`` (about a minute on an H100).
Test on a CPU: ``TRITON_INTERPRET=1 python scripts/gpu/lab3_bench.py --tiny``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

NOTEBOOK = REPO / "labs" / "source" / "lab3_fusion" / "lab3_fusion.ipynb"
#: grade_ids of the notebook cells that define the kernels and their launchers, in order
KERNEL_CELLS = ("fused_elementwise_kernel", "fused_elementwise", "fused_softmax_kernel", "fused_softmax")
RELU_CHAIN_ARITIES = [1, 1, 1]  # relu reads x; mul reads relu's result; add reads the product


def load_kernels(notebook: Path = NOTEBOOK) -> dict[str, Any]:
    """Execute the notebook's kernel cells (by grade_id) in a fresh namespace and return it."""
    from mlsys.course.nbexec import exec_cells

    try:
        return exec_cells(notebook, list(KERNEL_CELLS), {"__name__": "lab3_fusion"})
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def run_notebook(notebook: Path = NOTEBOOK) -> list[dict[str, Any]]:
    """Run every code cell of the notebook in order in one namespace, as nbgrader would
    (:func:`mlsys.course.nbexec.run_cells`: one record per cell with its status, output and value)."""
    from mlsys.course.nbexec import run_cells

    return run_cells(notebook, echo=True)


def make_timer(device: str):
    """A function ``timer(fn, what) -> seconds`` (median) for this device."""
    try:
        from mlsys.bench.timing import time_fn

        def timer(fn, what: str, repeats: int = 30) -> tuple[float, dict[str, Any]]:
            t = time_fn(fn, device, what=what, repeats=repeats, warmup=5)
            return t.median, t.to_json()

        return timer, "mlsys.bench.timing.time_fn (CUDA events, L2 flushed before each call)"
    except ImportError:
        import triton.testing

        def timer(fn, what: str, repeats: int = 30) -> tuple[float, dict[str, Any]]:
            ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            return ms * 1e-3, {"what": what, "method": "triton.testing.do_bench median", "unit": "s"}

        return timer, "triton.testing.do_bench (median, L2 cleared between runs)"


def versions(device: str) -> dict[str, Any]:
    import numpy
    import torch
    import triton

    out: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "triton": triton.__version__, "numpy": numpy.__version__,
                           "cuda": torch.version.cuda, "driver": None}
    if device == "cuda":
        try:
            out["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20, check=True).stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    return out


def quantity(value: float, unit: str) -> dict[str, Any]:
    return {"value": float(value), "unit": unit}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (CPU test under TRITON_INTERPRET=1)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--compile", action="store_true", help="run torch.compile on a CPU too (slow)")
    ap.add_argument("--no-notebook", action="store_true", help="skip running the whole notebook's cells")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="output directory (default $OUT)")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    device = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
    if device == "cpu" and not args.tiny:
        raise SystemExit("no CUDA device: run with --tiny (kernels under the Triton interpreter)")
    ns = load_kernels()
    fused_relu_affine, fused_softmax = ns["fused_relu_affine"], ns["fused_softmax"]
    timer, method = make_timer(device)
    from mlsys import Q_, fusion

    t_start = time.perf_counter()
    # on a CPU, torch.compile builds C++ (tens of seconds): only with --compile
    compile_ok = not args.no_compile and (device == "cuda" or args.compile)
    if args.tiny:
        ew_cases = [((1000,), torch.float32), ((33, 65), torch.float16)]
        sm_cases = [((7, 781), torch.float32), ((5, 1024), torch.float16)]
        big_copy = 2**20
    else:
        ew_cases = [((1024, 1024), torch.float32), ((4096, 4096), torch.float32),
                    ((8192, 8192), torch.float32), ((4096, 4096), torch.float16)]
        sm_cases = [((32768, 1024), torch.float32), ((16384, 2048), torch.float32),
                    ((8192, 4096), torch.float32), ((4096, 781), torch.float32),
                    ((32768, 1024), torch.float16), ((16384, 2048), torch.float16),
                    ((8192, 4096), torch.float16)]
        big_copy = 2**30

    from dataclasses import replace

    from mlsys.bench import micro

    quick = micro.sizes_for(device, quick=True)

    def copy_bandwidth(numel: int, dtype: torch.dtype) -> tuple[float, dict[str, Any]]:
        """mlsys.bench's copy microbenchmark on as many bytes as numel elements of dtype, byte/s."""
        nbytes = numel * torch.empty(0, dtype=dtype).element_size()
        fig = micro.copy_bandwidth(device, replace(quick, stream_numel=max(1, nbytes // 4)))
        return fig["value"], {"method": fig["method"], "size": fig["size"], "timing": fig["timing"]}

    bw_big, bw_big_t = copy_bandwidth(big_copy // 4, torch.float32)
    launch_fig = micro.launch_eager(device, quick)
    launch = launch_fig["value"]

    def eager(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 0.5 + 1.0

    compiled = torch.compile(eager, dynamic=False) if compile_ok else None

    elementwise = []
    for shape, dtype in ew_cases:
        x = torch.randn(shape, device=device, dtype=dtype)
        numel = x.numel()
        dname = {torch.float32: "fp32", torch.float16: "fp16"}[dtype]
        savings = fusion.fusion_savings(numel, dname, RELU_CHAIN_ARITIES)
        unfused_b = savings.unfused.to("byte").magnitude
        fused_b = savings.fused.to("byte").magnitude
        copy_bw, copy_t = copy_bandwidth(numel, dtype)
        ref = eager(x.float()).to(dtype)
        tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-3, atol=1e-3)
        row: dict[str, Any] = {
            "shape": list(shape), "dtype": dname, "numel": numel,
            "traffic_model": {"unfused": quantity(unfused_b, "byte"), "fused": quantity(fused_b, "byte")},
            "copy_bandwidth": {**quantity(copy_bw, "byte/s"), **copy_t},
        }
        impls = {"eager": (eager, unfused_b), "triton": (fused_relu_affine, fused_b)}
        if compiled is not None and time.perf_counter() - t_start < 60:
            impls["compile"] = (compiled, fused_b)
        for key, (fn, nbytes) in impls.items():
            out = fn(x)
            torch.testing.assert_close(out, ref, **tol)
            t, tj = timer(lambda fn=fn, x=x: fn(x), f"{key} relu chain {shape} {dname}")
            torch.testing.assert_close(fn(x), ref, **tol)  # re-checked after timing
            row[key] = {"time": quantity(t, "s"), "bytes_model": quantity(nbytes, "byte"),
                        "bandwidth": quantity(nbytes / t, "byte/s"),
                        "share_of_copy": (nbytes / t) / copy_bw, "timing": tj}
        predicted = fusion.fusion_time(numel, dname, RELU_CHAIN_ARITIES, Q_(copy_bw, "byte/s"), Q_(launch, "s"))
        row["speedup_triton_vs_eager"] = row["eager"]["time"]["value"] / row["triton"]["time"]["value"]
        if "compile" in row:
            row["speedup_compile_vs_eager"] = row["eager"]["time"]["value"] / row["compile"]["time"]["value"]
        row["predicted_speedup"] = predicted.speedup
        row["predicted_time"] = {"unfused": quantity(predicted.unfused.to("s").magnitude, "s"),
                                 "fused": quantity(predicted.fused.to("s").magnitude, "s")}
        row["traffic_ratio"] = savings.ratio
        elementwise.append(row)
        print(f"relu chain {shape} {dname}: " + ", ".join(
            f"{k} {row[k]['time']['value'] * 1e6:.1f} us ({row[k]['share_of_copy']:.0%} of copy)"
            for k in ("eager", "compile", "triton") if k in row)
            + f"; triton/eager {row['speedup_triton_vs_eager']:.2f}x, predicted {predicted.speedup:.2f}x", flush=True)

    softmax = []
    for shape, dtype in sm_cases:
        x = torch.randn(shape, device=device, dtype=dtype) * 4
        dname = {torch.float32: "fp32", torch.float16: "fp16"}[dtype]
        copy_bw, copy_t = copy_bandwidth(x.numel(), dtype)
        nbytes = 2 * x.numel() * x.element_size()
        ref = torch.softmax(x.float(), dim=-1).to(dtype)
        tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-3)
        row = {"shape": list(shape), "dtype": dname, "bytes": quantity(nbytes, "byte"),
               "copy_bandwidth": {**quantity(copy_bw, "byte/s"), **copy_t}}
        for key, fn in (("torch", lambda x: torch.softmax(x, dim=-1)), ("triton", fused_softmax)):
            torch.testing.assert_close(fn(x), ref, **tol)
            t, tj = timer(lambda fn=fn, x=x: fn(x), f"{key} softmax {shape} {dname}")
            torch.testing.assert_close(fn(x), ref, **tol)
            row[key] = {"time": quantity(t, "s"), "bandwidth": quantity(nbytes / t, "byte/s"),
                        "share_of_copy": (nbytes / t) / copy_bw, "timing": tj}
        row["speedup_triton_vs_torch"] = row["torch"]["time"]["value"] / row["triton"]["time"]["value"]
        softmax.append(row)
        print(f"softmax {shape} {dname}: torch {row['torch']['time']['value'] * 1e6:.1f} us, "
              f"triton {row['triton']['time']['value'] * 1e6:.1f} us ({row['triton']['share_of_copy']:.0%} of copy), "
              f"triton/torch {row['speedup_triton_vs_torch']:.2f}x", flush=True)

    notebook = None if args.no_notebook else run_notebook()

    main_row = next((r for r in elementwise if r["shape"] == [4096, 4096] and r["dtype"] == "fp32"), elementwise[0])
    targets = {
        "elementwise_4096x4096_fp32_share_of_copy": {
            "value": main_row["triton"]["share_of_copy"], "target": ">= 0.90",
            "met": main_row["triton"]["share_of_copy"] >= 0.90},
        "elementwise_4096x4096_fp32_speedup_vs_eager": {
            "value": main_row["speedup_triton_vs_eager"], "target": ">= 2.5",
            "met": main_row["speedup_triton_vs_eager"] >= 2.5},
        "softmax_matches_torch_min_over_shapes": {
            "value": min(r["speedup_triton_vs_torch"] for r in softmax), "target": ">= 1.0 (at least one shape)",
            "met": any(r["speedup_triton_vs_torch"] >= 1.0 for r in softmax)},
    }
    if device == "cuda":
        dev = {"kind": "cuda", "name": torch.cuda.get_device_name(0),
               "sm_count": torch.cuda.get_device_properties(0).multi_processor_count}
    else:
        dev = {"kind": "cpu", "name": platform.processor() or platform.machine(), "note": "Triton interpreter"}
    result = {
        "schema": "lab3-fusion/1",
        "what": "Lab 3 reference solution (labs/source/lab3_fusion) vs eager PyTorch and torch.compile",
        "date": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "device": dev,
        "software": versions(device),
        "tiny": bool(args.tiny),
        "method": (f"median of timed calls, {method}; bandwidth = model bytes / median time; "
                   "copy bandwidth: mlsys.bench.micro.copy_bandwidth on the same number of bytes"),
        "copy_bandwidth": {**quantity(main_row["copy_bandwidth"]["value"], "byte/s"),
                           "numel": main_row["numel"], "dtype": main_row["dtype"]},
        "copy_bandwidth_large": {**quantity(bw_big, "byte/s"), **bw_big_t},
        "launch_overhead": {**quantity(launch, "s"), "method": launch_fig["method"], "size": launch_fig["size"]},
        "elementwise": elementwise,
        "softmax": softmax,
        "targets": targets,
        "notebook_cells": notebook,
        "runtime": quantity(time.perf_counter() - t_start, "s"),
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "lab3_h100.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(targets, indent=1))
    print(f"wrote {path} in {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
