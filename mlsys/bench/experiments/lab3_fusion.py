"""Lab 3's reference kernels against eager PyTorch and torch.compile: a fused relu(x) * 0.5 + 1 and a fused softmax.

The kernels are not copied here: the notebook cells of ``labs/source/lab3_fusion/lab3_fusion.ipynb``
that define them (by nbgrader ``grade_id``) run in a fresh namespace, so what is timed is the
lab's reference solution. Timing: :func:`mlsys.bench.timing.time_fn` (CUDA events, L2 flushed
before each timed call). For each size: the copy bandwidth on as many bytes
(:func:`mlsys.bench.micro.copy_bandwidth`), eager (three kernels), ``torch.compile`` and the
lab's kernel; achieved bandwidth = model bytes (:mod:`mlsys.fusion`) / median time, its share of
the copy, and the measured and predicted speed-ups. Softmax: ``torch.softmax`` and the lab's
``fused_softmax``. Every result is checked against PyTorch after timing. Each timing starts after a
quarter of a second of back-to-back calls (:func:`mlsys.bench.timing.spin_up`). ``softmax_spread``
re-times the graded softmax shape and fp32 rows twice as long (``SPREAD_CASES``) in rounds, alternately
right after the GPU idled for a few seconds and after a spin-up, with the clocks read before and after,
so a record shows how far one measurement of it can be trusted; ``lowest_share_of_copy`` is the lowest share over the rows, not the best.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ...runtime.paths import lab_notebook

SHOWN_IN = ("labs/source/lab3_fusion",)
NEEDS = "any"

NOTEBOOK = lab_notebook("lab3_fusion", must_exist=False)  # the instructor's notebook
#: grade_ids of the notebook cells that define the kernels and their launchers, in order
KERNEL_CELLS = ("fused_elementwise_kernel", "fused_elementwise", "fused_softmax_kernel", "fused_softmax")
RELU_CHAIN_ARITIES = [1, 1, 1]  # relu reads x; mul reads relu's result; add reads the product


def load_kernels(notebook: Path = NOTEBOOK) -> dict[str, Any]:
    """Execute the notebook's kernel cells (by grade_id) in a fresh namespace and return it."""
    from ...runtime.notebook import exec_cells

    return exec_cells(notebook, list(KERNEL_CELLS), {"__name__": "lab3_fusion"})


#: the graded softmax shape (perf.toml's perf_softmax) and a longer row, re-measured in rounds for the spread
SPREAD_CASES = [((16384, 2048), "fp32"), ((8192, 4096), "fp32")]
SPREAD_ROUNDS = 6
#: seconds of idle GPU before the spread's "after idle" rounds (the SM clock drops when the GPU idles)
IDLE_S = 3.0
#: seconds of back-to-back calls before each timing, so the clocks have left their idle state
#: (mlsys.bench.timing.spin_up)
SPIN_UP_S = 0.25


def gpu_clocks() -> dict[str, Any] | None:
    """SM and memory clocks (MHz), power (W), temperature and throttle reasons now, from ``nvidia-smi``; None without it."""
    import subprocess

    fields = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    try:
        text = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return None
    parts = [p.strip() for p in text.split(",")]
    return dict(zip(("sm_clock_mhz", "memory_clock_mhz", "power_w", "temperature_c", "throttle_reasons"), parts, strict=False))


def quantity(value: float, unit: str) -> dict[str, Any]:
    return {"value": float(value), "unit": unit}


def run(ctx: Any) -> dict[str, Any]:
    import torch

    from ...fusion import fusion_savings, fusion_time
    from ...units import Q_
    from ..timing import spin_up, time_fn

    device = ctx.device
    tiny = device != "cuda"

    def timer(fn: Any, what: str, repeats: int = 30, warm: bool = True) -> tuple[float, dict[str, Any]]:
        if warm and not tiny:
            spin_up(fn, SPIN_UP_S)
        t = time_fn(fn, device, what=what, repeats=3 if tiny else repeats, warmup=1 if tiny else 5)
        return t.median, t.to_json()

    ns = load_kernels()
    fused_relu_affine, fused_softmax = ns["fused_relu_affine"], ns["fused_softmax"]
    t_start = time.perf_counter()
    compile_ok = device == "cuda"  # on a CPU, torch.compile builds C++ (tens of seconds)
    if tiny:
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

    from .. import micro

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
        savings = fusion_savings(numel, dname, RELU_CHAIN_ARITIES)
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
        predicted = fusion_time(numel, dname, RELU_CHAIN_ARITIES, Q_(copy_bw, "byte/s"), Q_(launch, "s"))
        row["speedup_triton_vs_eager"] = row["eager"]["time"]["value"] / row["triton"]["time"]["value"]
        if "compile" in row:
            row["speedup_compile_vs_eager"] = row["eager"]["time"]["value"] / row["compile"]["time"]["value"]
        row["predicted_speedup"] = predicted.speedup
        row["predicted_time"] = {"unfused": quantity(predicted.unfused.to("s").magnitude, "s"),
                                 "fused": quantity(predicted.fused.to("s").magnitude, "s")}
        row["traffic_ratio"] = savings.ratio
        elementwise.append(row)

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

    # the softmax's spread: the same kernel, its copy baseline and torch.softmax, re-measured in rounds
    spread = []
    for shape, dname in ([] if tiny else SPREAD_CASES):
        dtype = {"fp32": torch.float32, "fp16": torch.float16}[dname]
        x = torch.randn(shape, device=device, dtype=dtype) * 4
        nbytes = 2 * x.numel() * x.element_size()
        rounds = []
        for i in range(SPREAD_ROUNDS):
            after_idle = i % 2 == 0  # alternate: timed right after the GPU idled, and after a spin-up
            if after_idle:
                torch.cuda.synchronize()
                time.sleep(IDLE_S)
            clocks = gpu_clocks()
            t_tri, tj = timer(lambda x=x: fused_softmax(x), f"triton softmax {shape} {dname} (spread)",
                              warm=not after_idle)
            clocks_after = gpu_clocks()
            copy_bw, _ = copy_bandwidth(x.numel(), dtype)
            t_torch, _ = timer(lambda x=x: torch.softmax(x, dim=-1), f"torch softmax {shape} {dname} (spread)")
            rounds.append({"mode": f"after {IDLE_S:g} s idle, 5 warm-up calls" if after_idle
                           else f"after a {SPIN_UP_S:g} s spin-up and 5 warm-up calls",
                           "copy_bandwidth": quantity(copy_bw, "byte/s"),
                           "triton_share_of_copy": (nbytes / t_tri) / copy_bw,
                           "triton_share_of_copy_slowest_repeat": (nbytes / tj["max"]) / copy_bw,
                           "torch_share_of_copy": (nbytes / t_torch) / copy_bw, "clocks_before": clocks,
                           "clocks_after": clocks_after})
        shares = sorted(r["triton_share_of_copy"] for r in rounds)
        spread.append({"shape": list(shape), "dtype": dname, "rounds": rounds,
                       "triton_share_of_copy": {"min": shares[0], "median": shares[len(shares) // 2],
                                                "max": shares[-1]}})

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
    return {
        "what": "Lab 3 reference solution (labs/source/lab3_fusion) vs eager PyTorch and torch.compile",
        "method": "median of timed calls, mlsys.bench.timing.time_fn (CUDA events, L2 flushed before each call); "
                  "bandwidth = model bytes / median time; copy bandwidth: mlsys.bench.micro.copy_bandwidth on the "
                  "same number of bytes",
        "copy_bandwidth": {**quantity(main_row["copy_bandwidth"]["value"], "byte/s"),
                           "numel": main_row["numel"], "dtype": main_row["dtype"]},
        "copy_bandwidth_large": {**quantity(bw_big, "byte/s"), **bw_big_t},
        "launch_overhead": {**quantity(launch, "s"), "method": launch_fig["method"], "size": launch_fig["size"],
                            "use": "input to mlsys.fusion.fusion_time's prediction"},
        "elementwise": elementwise,
        "softmax": softmax,
        "softmax_spread": spread,
        "lowest_share_of_copy": {
            "elementwise": min(r["triton"]["share_of_copy"] for r in elementwise),
            "softmax": min(r["triton"]["share_of_copy"] for r in softmax),
            "softmax_spread_min": min((s["triton_share_of_copy"]["min"] for s in spread), default=None),
            "softmax_spread_min_after_spin_up": min((r["triton_share_of_copy"] for s in spread for r in s["rounds"]
                                                     if r["mode"].startswith("after a")), default=None)},
        "targets": targets,
    }
