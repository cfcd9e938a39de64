"""Nsight Compute on Lab 2's reference Triton matmul: achieved occupancy, memory throughput, tensor pipe use.

The kernel is Lab 2's grouped, tiled Triton matmul, read from the instructor notebook's cells the way
``lab2_matmul`` reads them (:func:`mlsys.bench.experiments.lab2_matmul.load_kernels`), never a copy;
its autotuner and heuristics are peeled off and one fixed tile configuration is launched, so that
exactly one kernel is profiled. The
experiment times it with :func:`mlsys.bench.timing.time_fn` and checks it against a float64
product, then runs this module as a separate program under ``ncu --clock-control none`` (the
card's clocks are left as they are, so the counters describe the same conditions as the timing)
and keeps a set of metrics from the report's raw page: duration, achieved and theoretical
occupancy, registers, DRAM bytes, memory and SM throughput as a share of peak, and the tensor
pipes' active cycles. Needs a CUDA GPU and ``ncu`` on the path (or in /opt/nvidia or /usr/local/cuda).
"""

from __future__ import annotations

import csv
import glob
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from typing import Any

SHOWN_IN = ("chapters/14_profiling",)
NEEDS = "cuda"

SIZE = 4096
CONFIG = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3, "num_warps": 8}

# raw metric name -> (key in the record, what it is)
METRICS = {
    "gpu__time_duration.sum": ("duration", "kernel duration under the profiler"),
    "sm__warps_active.avg.pct_of_peak_sustained_active": ("achieved_occupancy", "active warps / max warps per SM"),
    "sm__maximum_warps_per_active_cycle_pct": ("theoretical_occupancy", "warps the launch allows / max per SM"),
    "launch__registers_per_thread": ("registers_per_thread", "registers the compiler gave each thread"),
    "launch__shared_mem_per_block_dynamic": ("shared_memory_per_block", "dynamic shared memory per block"),
    "launch__grid_size": ("grid_size", "blocks launched"),
    "launch__block_size": ("block_size", "threads per block"),
    "launch__occupancy_limit_registers": ("blocks_limit_registers", "blocks per SM the registers allow"),
    "launch__occupancy_limit_shared_mem": ("blocks_limit_shared_memory", "blocks per SM shared memory allows"),
    "dram__bytes_read.sum": ("dram_read", "bytes read from DRAM"),
    "dram__bytes_write.sum": ("dram_written", "bytes written to DRAM"),
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("dram_throughput", "DRAM throughput, share of peak"),
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed":
        ("memory_throughput", "busiest memory unit's throughput, share of peak"),
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": ("sm_throughput", "busiest SM unit's throughput, share of peak"),
    "lts__t_sector_hit_rate.pct": ("l2_hit_rate", "L2 sector hit rate"),
}
SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis")
_TENSOR = re.compile(r"^sm__(inst_executed_)?pipe_tensor\w*?(cycles_active)?$")


@cache
def _kernel(device: str = "cuda") -> Any:
    """Lab 2's ``matmul_kernel`` from the instructor notebook, without its ``@triton.autotune`` and
    ``@triton.heuristics`` wrappers (the bare ``@triton.jit`` function, launched with one config)."""
    from triton.runtime.autotuner import Autotuner, Heuristics

    from .lab2_matmul import load_kernels

    kernel = load_kernels(device).matmul_kernel
    while isinstance(kernel, (Autotuner, Heuristics)):
        kernel = kernel.fn
    if not hasattr(kernel, "__getitem__") or not callable(getattr(kernel, "fn", None)):
        raise TypeError(f"Lab 2's matmul_kernel should be a Triton kernel (jit, maybe autotuned), got {kernel!r}")
    return kernel


def matmul(a: Any, b: Any, config: dict[str, int] | None = None) -> Any:
    """C = A @ B with Lab 2's grouped tiled kernel (the notebook's) and one fixed tile configuration."""
    import torch
    import triton

    cfg = dict(CONFIG if config is None else config)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs (M, K) and (K, N) matrices, got {tuple(a.shape)} and {tuple(b.shape)}")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    _kernel(a.device.type)[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                    BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg["GROUP_M"],
                    EVEN_K=K % cfg["BLOCK_K"] == 0, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return c


def _operands(n: int, device: str) -> tuple[Any, Any]:
    import torch

    g = torch.Generator(device=device).manual_seed(0)
    return (torch.randn(n, n, device=device, dtype=torch.float16, generator=g),
            torch.randn(n, n, device=device, dtype=torch.float16, generator=g))


def _target(n: int) -> None:
    """The program ncu profiles: one warm-up launch (compiles), one profiled launch."""
    import torch

    a, b = _operands(n, "cuda")
    matmul(a, b)
    torch.cuda.synchronize()
    matmul(a, b)
    torch.cuda.synchronize()


def find_ncu() -> str | None:
    """The ncu executable: on the PATH, else the newest under /opt/nvidia/nsight-compute or CUDA's bin."""
    exe = shutil.which("ncu")
    if exe:
        return exe
    found = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu")) + glob.glob("/usr/local/cuda*/bin/ncu")
    return found[-1] if found else None


def parse_raw_csv(text: str) -> dict[str, tuple[str, str]]:
    """ncu's ``--page raw --csv`` output (a header row of metric names, a row of units, one row per
    kernel) -> ``{metric: (unit, value)}`` for the last kernel row."""
    rows = [r for r in csv.reader(io.StringIO(text)) if r]
    rows = [r for r in rows if not r[0].startswith("==")]
    if len(rows) < 3:
        raise ValueError(f"expected a header, a unit row and a kernel row in ncu's raw CSV, got {len(rows)} rows")
    header, units, values = rows[0], rows[1], rows[-1]
    return {name: (unit, value) for name, unit, value in zip(header, units, values, strict=False)}


_UNITS = {"%": "", "byte": "B", "Kbyte": "kB", "Mbyte": "MB", "Gbyte": "GB", "nsecond": "ns",
          "usecond": "us", "msecond": "ms", "register/thread": "", "block": "", "thread": "", "": "",
          "warp": "", "Kbyte/block": "kB", "byte/block": "B", "Tbyte": "TB", "second": "s",
          "byte/second": "B/s", "Gbyte/second": "GB/s", "Tbyte/second": "TB/s", "cycle": ""}


def _quantity(unit: str, value: str) -> dict[str, Any] | None:
    try:
        number = float(value.replace(",", ""))
    except ValueError:
        return None
    if unit not in _UNITS:
        return None
    if unit == "%":  # a share of peak, kept as a fraction
        number /= 100.0
    return {"value": number, "unit": _UNITS[unit]}


def _ncu(exe: str, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)


def _tensor_metrics(exe: str) -> list[str]:
    """Tensor-pipe base metrics this chip offers (from ``ncu --query-metrics``), as share-of-peak names."""
    for extra in ([], ["--chip", "gh100"]):
        try:
            out = _ncu(exe, ["--query-metrics", *extra], 60)
        except (OSError, subprocess.SubprocessError):
            continue
        names = {line.split()[0] for line in out.stdout.splitlines() if line.strip()}
        hits = sorted(n for n in names if _TENSOR.match(n))
        if hits:
            return [f"{n}.avg.pct_of_peak_sustained_active" for n in hits]
    return []


def run(ctx: Any) -> dict[str, Any]:
    import torch

    from ...roofline import matmul_flops
    from ..timing import time_fn

    n = 2048 if ctx.quick else SIZE
    a, b = _operands(n, "cuda")
    ref = a.double() @ b.double()

    def correct(c: Any) -> bool:
        return ((c.double() - ref).norm() / ref.norm()).item() < 1e-2

    timing = time_fn(lambda: matmul(a, b), "cuda", what=f"Lab 2 Triton matmul {n}^3 fp16", repeats=30, warmup=3,
                     check=correct)
    flops = matmul_flops(n, n, n).to("FLOP").m
    result: dict[str, Any] = {
        "size": f"{n}x{n}x{n} fp16 in, fp32 accumulate, fp16 out; random normal inputs",
        "config": dict(CONFIG),
        "time": {"value": timing.median, "unit": "s", "method": "CUDA events, L2 flushed, median"},
        "throughput": {"value": flops / timing.median / 1e12, "unit": "TFLOP/s"},
        "timing": timing.to_json(),
    }
    torch.cuda.synchronize()
    exe = find_ncu()
    if exe is None:
        ctx.note("ncu was not found: no counters recorded")
        return result
    tensor = _tensor_metrics(exe)
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "lab2")
        base = ["--clock-control", "none", "--target-processes", "all", "-k", "regex:matmul_kernel", "-s", "1",
                "-c", "1", "-f", "-o", report]
        for s in SECTIONS:
            base += ["--section", s]
        prog = [sys.executable, "-m", "mlsys.bench.experiments.ncu_lab2", str(n)]
        metric_sets = [list(METRICS) + tensor, list(METRICS)] if tensor else [list(METRICS)]
        done = None
        for metrics in metric_sets:
            proc = _ncu(exe, [*base, "--metrics", ",".join(metrics), *prog], 240)
            if proc.returncode == 0 and os.path.exists(report + ".ncu-rep"):
                done = metrics
                break
            ctx.note(f"ncu with {len(metrics)} metrics failed (rc {proc.returncode}): {proc.stderr[-300:]}"
                     f"{proc.stdout[-300:]}")
        if done is None:
            return result
        raw = _ncu(exe, ["--import", report + ".ncu-rep", "--csv", "--page", "raw"], 120)
    parsed = parse_raw_csv(raw.stdout)
    counters: dict[str, Any] = {}
    for metric, (key, what) in METRICS.items():
        if metric in parsed:
            unit, value = parsed[metric]
            q = _quantity(unit, value)
            counters[key] = {**(q or {}), "metric": metric, "raw": value, "raw_unit": unit, "method": what}
    tensor_found = {}
    for metric in tensor:
        if metric in parsed and (q := _quantity(*parsed[metric])) is not None:
            tensor_found[metric.split(".")[0]] = q
    counters["tensor_pipes"] = tensor_found
    counters["method"] = ("ncu --clock-control none, sections " + ", ".join(SECTIONS) +
                          "; the second launch of the kernel (the first compiles it); values from the raw page")
    result["ncu"] = counters
    return result


if __name__ == "__main__":
    _target(int(sys.argv[1]) if len(sys.argv) > 1 else SIZE)
