"""The CUDA kernels nn.Linear launches (forward, and forward + backward) per dtype and shape, from torch.profiler.

GPU times are the profiler's per-kernel device times (``self_device_time_total``), averaged over
five iterations after three warm-up steps; the bf16 4096 case's profiler table is kept as printed.
"""

from __future__ import annotations

import math
from typing import Any

SHOWN_IN = ("chapters/02_journey_of_a_matmul", "chapters/08_writing_kernels")
NEEDS = "cuda"

SHAPES = ((8, 1024, 1024), (4096, 4096, 4096), (8192, 4096, 11008))  # (batch, in, out)
ITERATIONS = 5


def kernel_table(prof: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(GPU kernels, CPU ops) of a profiler run: name, calls, total and mean time."""
    gpu, cpu = [], []
    for e in prof.key_averages():
        dev_total = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0.0)
        if dev_total and dev_total > 0 and e.cpu_time_total == 0:
            gpu.append({"name": e.key, "calls": e.count, "gpu_total": {"value": dev_total, "unit": "us"},
                        "gpu_mean": {"value": dev_total / e.count, "unit": "us"}})
        elif e.cpu_time_total > 0:
            cpu.append({"name": e.key, "calls": e.count, "cpu_total": {"value": e.cpu_time_total, "unit": "us"},
                        "self_cpu_total": {"value": e.self_cpu_time_total, "unit": "us"}})
    gpu.sort(key=lambda r: -r["gpu_total"]["value"])
    cpu.sort(key=lambda r: -r["cpu_total"]["value"])
    return gpu, cpu[:15]


def run(ctx: Any) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    shapes = SHAPES[:2] if ctx.quick else SHAPES
    cases = [(dt, False, s) for dt in (torch.float32, torch.bfloat16, torch.float16) for s in shapes]
    cases.append((torch.float32, True, SHAPES[1]))  # fp32 with TF32 tensor cores allowed
    rows = []
    prev = torch.backends.cuda.matmul.allow_tf32
    try:
        for dtype, tf32, (batch, d_in, d_out) in cases:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            lin = torch.nn.Linear(d_in, d_out, device="cuda", dtype=dtype)
            x = torch.randn(batch, d_in, device="cuda", dtype=dtype, requires_grad=True)
            for _ in range(3):  # warm up cuBLAS (handle, heuristics, workspace)
                lin(x).sum().backward()
            torch.cuda.synchronize()
            row: dict[str, Any] = {"dtype": str(dtype).replace("torch.", ""), "batch": batch, "in_features": d_in,
                                   "out_features": d_out, "allow_tf32": tf32, "iterations": ITERATIONS}
            with torch.no_grad(), profile(activities=acts) as prof:
                for _ in range(ITERATIONS):
                    lin(x)
                torch.cuda.synchronize()
            row["forward_kernels"], row["forward_cpu_ops"] = kernel_table(prof)
            with profile(activities=acts) as prof:
                for _ in range(ITERATIONS):
                    y = lin(x)
                    y.backward(torch.ones_like(y))
                torch.cuda.synchronize()
            row["fwd_bwd_kernels"], _ = kernel_table(prof)
            rows.append(row)
            del lin, x
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    lin = torch.nn.Linear(4096, 4096, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        lin(x)
        torch.cuda.synchronize()
        with profile(activities=acts) as prof:
            lin(x)
            torch.cuda.synchronize()
    try:
        table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=12)
    except (KeyError, AttributeError, ValueError):  # an older torch names it after CUDA
        table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12)
    return {"method": f"torch.profiler over {ITERATIONS} iterations after 3 warm-up steps; GPU time per kernel is "
                      "the profiler's self device time", "cases": rows, "table_bf16_4096": table}


# --- reading a record (the chapters' figures) ---------------------------------------------------------


def find_case(record: Any, dtype: str, batch: int, allow_tf32: bool = False) -> dict[str, Any]:
    """The recorded case of ``dtype`` (``"bfloat16"``, ``"float32"``, ...) and ``batch`` rows."""
    for case in record["cases"]:
        if case["dtype"] == dtype and case["batch"] == batch and bool(case["allow_tf32"]) == allow_tf32:
            return case
    have = sorted({(c["dtype"], c["batch"], bool(c["allow_tf32"])) for c in record["cases"]})
    raise KeyError(f"linear_kernels: no case dtype={dtype!r}, batch={batch}, allow_tf32={allow_tf32}; "
                   f"the record has {have}")


def forward_time(case: dict[str, Any]) -> Any:
    """GPU time of one forward call: the forward kernels' total device time over the iterations (us)."""
    from ...units import Q_

    return Q_(sum(k["gpu_total"]["value"] for k in case["forward_kernels"]) / case["iterations"], "us")


def achieved_rate(case: dict[str, Any]) -> Any:
    """The layer's matmul rate: 2 * batch * in * out FLOPs over :func:`forward_time` (TFLOP/s)."""
    from ...roofline import matmul_flops

    flops = matmul_flops(case["batch"], case["out_features"], case["in_features"])
    return (flops / forward_time(case)).to("TFLOP/s")


def _two_figures(x: float) -> str:
    """``x`` to two significant figures, never fewer than its integer digits: 597.3 -> "597",
    1.234 -> "1.2", 1234.5 -> "1,234" (the page's rounding; bench keeps its own, it imports no course code)."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    decimals = max(1 - math.floor(math.log10(abs(x))), 0)
    text = f"{x:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def describe(case: dict[str, Any], width: int = 52) -> str:
    """One line for the page: the shape, the first kernel's name (cut to ``width``) and the rate (TFLOP/s)."""
    shape = f"{case['batch']}x{case['in_features']} -> {case['out_features']}"
    rate = _two_figures(float(achieved_rate(case).to("TFLOP/s").magnitude))
    return f"{shape:18s} {case['forward_kernels'][0]['name'][:width]}  {rate} TFLOP/s"
