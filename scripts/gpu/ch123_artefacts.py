"""Record the GPU artefacts that chapters 1-3 show: run on an H100, write $OUT/ch_artefacts_h100.json.

What it records (each section is independent; a failing section records its error and the
script goes on):

- ``provenance``: device, date, torch/triton/CUDA/driver versions.
- ``linear_profile``: the CUDA kernels ``nn.Linear`` launches (forward, and forward + backward)
  for fp32, bf16 and fp16 at a few shapes, from ``torch.profiler``, with their GPU times.
- ``triton``: PTX and SASS of a small element-wise kernel and of a small ``tl.dot`` matmul,
  as compiled on this GPU: short excerpts around the key instructions, the tensor-core
  instructions found, and instruction counts by opcode.
- ``launch_overhead``: CPU cost of an eager tiny op, of an empty Triton launch, of a CUDA
  graph replay, GPU time per kernel inside a graph, launch+sync round trip, and the profiler's
  split of an eager op into ATen time and ``cudaLaunchKernel`` time.
- ``timing``: a large matmul timed wrongly (no sync) and rightly (sync, CUDA events).
- ``h2d``: host-to-device copy bandwidth from pageable and from pinned memory.
- ``streams``: a copy and a matmul run one after the other and on two streams.
- ``allocator``: ``memory_allocated`` vs ``memory_reserved`` through allocations and frees
  that fragment the cache, and the message of a real out-of-memory error.
- ``compile``: eager vs ``torch.compile`` for a small element-wise chain (kernel counts, times).
- ``xla``: the HLO of a small jitted JAX function before and after XLA's optimisation.

Usage (repo root, on the GPU machine)::

    OUT=/some/dir python3 scripts/gpu/ch123_artefacts.py

Without CUDA (a laptop) it runs at tiny sizes: the GPU sections record ``"skipped"`` and the
Triton section compiles ahead of time for sm_90 so that the parsing code is exercised.
Runtime on an H100: well under two minutes.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # jax must not grab the GPU's memory

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

HAS_CUDA = torch.cuda.is_available()
MIB = 2**20


# ----------------------------------------------------------------------------- kernels shown in chapter 2


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    """out = alpha * x + y, one BLOCK-wide slice per program."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """C[M,N] = A[M,K] @ B[K,N] (row-major, sizes multiples of the blocks), fp32 accumulate."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))


@triton.jit
def empty_kernel(x_ptr):
    """Does nothing: its launch cost is pure overhead."""
    pass


# ----------------------------------------------------------------------------- helpers


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def _sync() -> None:
    if HAS_CUDA:
        torch.cuda.synchronize()


def cuda_event_ms(fn: Callable[[], object], repeats: int, warmup: int = 3) -> list[float]:
    """GPU time of ``fn`` in ms per repeat, from CUDA events recorded around each call."""
    for _ in range(warmup):
        fn()
    _sync()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def provenance() -> dict[str, Any]:
    info: dict[str, Any] = {
        "date_utc": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "script": "scripts/gpu/ch123_artefacts.py",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda_runtime": torch.version.cuda,
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
    }
    if HAS_CUDA:
        p = torch.cuda.get_device_properties(0)
        info.update(
            device=torch.cuda.get_device_name(0),
            compute_capability=f"{p.major}.{p.minor}",
            sm_count=p.multi_processor_count,
            total_memory_bytes=p.total_memory,
            cudnn=torch.backends.cudnn.version(),
        )
        try:
            out = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=driver_version,name,pcie.link.gen.max,pcie.link.width.max",
                    "--format=csv,noheader",
                ],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
            drv, _name, gen, width = [s.strip() for s in out.splitlines()[0].split(",")]
            info.update(driver=drv, pcie_gen_max=gen, pcie_width_max=width)
        except Exception as exc:  # nvidia-smi absent or in another format
            info["driver"] = f"unknown ({exc.__class__.__name__})"
    else:
        info["device"] = "cpu (no CUDA): layout test only"
    return info


# ----------------------------------------------------------------------------- 1. nn.Linear under the profiler


def _kernel_table(prof: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(GPU kernels, CPU ops) from a profiler run: name, calls, total and mean time in us."""
    gpu, cpu = [], []
    for e in prof.key_averages():
        dev_total = getattr(e, "self_device_time_total", None)
        if dev_total is None:
            dev_total = getattr(e, "self_cuda_time_total", 0.0)
        if dev_total and dev_total > 0 and e.cpu_time_total == 0:
            gpu.append({"name": e.key, "calls": e.count, "gpu_us_total": dev_total, "gpu_us_mean": dev_total / e.count})
        elif e.cpu_time_total > 0:
            cpu.append(
                {
                    "name": e.key,
                    "calls": e.count,
                    "cpu_us_total": e.cpu_time_total,
                    "self_cpu_us_total": e.self_cpu_time_total,
                }
            )
    gpu.sort(key=lambda r: -r["gpu_us_total"])
    cpu.sort(key=lambda r: -r["cpu_us_total"])
    return gpu, cpu[:15]


def linear_profile() -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    if not HAS_CUDA:
        return {"skipped": "no CUDA"}
    shapes = [(8, 1024, 1024), (4096, 4096, 4096), (8192, 4096, 11008)]  # (batch, in, out)
    results = []
    cases = [(dt, False, shp) for dt in (torch.float32, torch.bfloat16, torch.float16) for shp in shapes]
    cases.append((torch.float32, True, shapes[1]))  # fp32 with TF32 tensor cores allowed
    for dtype, tf32, (batch, d_in, d_out) in cases:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        lin = torch.nn.Linear(d_in, d_out, device="cuda", dtype=dtype)
        x = torch.randn(batch, d_in, device="cuda", dtype=dtype, requires_grad=True)
        for _ in range(3):  # warm up cuBLAS (handle, heuristics, workspace)
            lin(x).sum().backward()
        _sync()
        row: dict[str, Any] = {
            "dtype": str(dtype).replace("torch.", ""),
            "batch": batch,
            "in_features": d_in,
            "out_features": d_out,
            "allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        }
        with torch.no_grad():
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    lin(x)
                _sync()
        row["forward_kernels"], row["forward_cpu_ops"] = _kernel_table(prof)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                y = lin(x)
                y.backward(torch.ones_like(y))
            _sync()
        row["fwd_bwd_kernels"], _ = _kernel_table(prof)
        row["fwd_bwd_iterations"] = 5
        row["forward_iterations"] = 5
        results.append(row)
        del lin, x
    torch.backends.cuda.matmul.allow_tf32 = False
    # the printed table of one case, as a reader would see it
    lin = torch.nn.Linear(4096, 4096, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        lin(x)
        _sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            lin(x)
            _sync()
    try:
        table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=12)
    except Exception:
        table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12)
    return {"cases": results, "table_bf16_4096": table}


# ----------------------------------------------------------------------------- 2. Triton PTX / SASS

_TC_PATTERNS = [r"\bwgmma\.mma_async\S*", r"\bmma\.sync\S*", r"\bHGMMA\S*", r"\bHMMA\S*", r"\btcgen05\.mma\S*"]


def ptx_opcodes(ptx: str) -> Counter[str]:
    """Count PTX instructions by opcode (first token of each instruction line, predicate dropped)."""
    counts: Counter[str] = Counter()
    for raw in ptx.splitlines():
        line = raw.split("//")[0].strip()
        if not line or line.startswith((".", "{", "}", "$", ")")) or line.endswith(":"):
            continue
        if line.startswith("@"):
            line = line.split(None, 1)[1] if " " in line or "\t" in line else ""
        tok = line.split()[0].rstrip(";") if line.split() else ""
        if tok and re.match(r"^[a-z]", tok):
            counts[tok] += 1
    return counts


def sass_opcodes(sass: str) -> Counter[str]:
    """Count SASS instructions by opcode (control-code prefix and predicate dropped)."""
    counts: Counter[str] = Counter()
    for raw in sass.splitlines():
        line = raw.strip()
        if "\t" in line and re.match(r"^[0-9a-fA-F\-]{2}:[0-9\-]:[0-9\-]:[A-Z\-]:\d+", line):
            line = line.split("\t", 1)[1].strip()
        line = re.sub(r"/\*.*?\*/", "", line).strip()
        if not line or line.endswith(":") or line.startswith((".", "Function", "//")):
            continue
        if line.startswith("@"):
            parts = line.split(None, 1)
            line = parts[1] if len(parts) > 1 else ""
        tok = line.split()[0].rstrip(";") if line.split() else ""
        if re.match(r"^[A-Z][A-Z0-9_.]*$", tok):
            counts[tok] += 1
    return counts


def base_opcodes(counts: Counter[str]) -> Counter[str]:
    """Merge opcodes that differ only in modifiers: ``LDG.E.U16`` and ``LDG.E`` count as ``LDG``."""
    merged: Counter[str] = Counter()
    for op, v in counts.items():
        merged[op.split(".")[0]] += v
    return merged


def excerpt(text: str, pattern: str, before: int = 4, after: int = 4, max_hits: int = 2) -> list[str]:
    """Lines around the first ``max_hits`` matches of ``pattern`` (regex), hits separated by '...'."""
    lines = text.splitlines()
    out: list[str] = []
    hits = [i for i, ln in enumerate(lines) if re.search(pattern, ln)]
    last = -1
    for i in hits[:max_hits]:
        lo, hi = max(i - before, last + 1), min(i + after + 1, len(lines))
        if out and lo > last + 1:
            out.append("...")
        out.extend(lines[lo:hi])
        last = hi - 1
    return out


def describe_compiled(k: Any, key_ptx: str, key_sass: str) -> dict[str, Any]:
    ptx, sass = k.asm["ptx"], k.asm["sass"]
    pc, sc = ptx_opcodes(ptx), sass_opcodes(sass)
    tc = sorted({m for pat in _TC_PATTERNS for m in re.findall(pat, ptx + "\n" + sass)})
    md = k.metadata
    return {
        "ptx_target": next((ln.split()[1] for ln in ptx.splitlines() if ln.startswith(".target")), None),
        "ptx_lines": len(ptx.splitlines()),
        "ptx_instruction_count": sum(pc.values()),
        "ptx_opcodes": dict(pc.most_common()),
        "ptx_excerpt": excerpt(ptx, key_ptx),
        "sass_instruction_count": sum(sc.values()),
        "sass_opcodes": dict(sc.most_common()),
        "sass_base_opcodes": dict(base_opcodes(sc).most_common()),
        "sass_excerpt": excerpt(sass, key_sass),
        "tensor_core_instructions": tc,
        "num_warps": md.num_warps,
        "num_stages": md.num_stages,
        "shared_bytes": md.shared,
        "arch": str(getattr(md, "arch", getattr(md, "target", ""))),
    }


def aot_compile(arch: int) -> tuple[Any, Any]:
    """Compile both kernels for ``sm_<arch>`` without a GPU (Triton ships ptxas and nvdisasm)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", arch, 32)
    k1 = triton.compile(
        ASTSource(
            fn=scale_add_kernel,
            signature={
                "x_ptr": "*fp32",
                "y_ptr": "*fp32",
                "out_ptr": "*fp32",
                "n": "i32",
                "alpha": "fp32",
                "BLOCK": "constexpr",
            },
            constexprs={"BLOCK": 1024},
        ),
        target=target,
    )
    k2 = triton.compile(
        ASTSource(
            fn=matmul_kernel,
            signature={
                "a_ptr": "*fp16",
                "b_ptr": "*fp16",
                "c_ptr": "*fp16",
                "M": "i32",
                "N": "i32",
                "K": "i32",
                "BM": "constexpr",
                "BN": "constexpr",
                "BK": "constexpr",
            },
            constexprs={"BM": 64, "BN": 64, "BK": 32},
        ),
        target=target,
    )
    return k1, k2


def triton_artefacts() -> dict[str, Any]:
    out: dict[str, Any] = {
        "scale_add_source": inspect.getsource(scale_add_kernel.fn),
        "matmul_source": inspect.getsource(matmul_kernel.fn),
    }
    k1 = k2 = None
    if HAS_CUDA:
        try:
            n = 4096
            x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            o = torch.empty_like(x)
            k1 = scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, o, n, 2.0, BLOCK=1024)
            torch.testing.assert_close(o, 2.0 * x + y)
            M = N = K = 256
            a = torch.randn(M, K, device="cuda", dtype=torch.float16)
            b = torch.randn(K, N, device="cuda", dtype=torch.float16)
            c = torch.empty(M, N, device="cuda", dtype=torch.float16)
            k2 = matmul_kernel[(M // 64, N // 64)](a, b, c, M, N, K, BM=64, BN=64, BK=32, num_warps=4)
            torch.testing.assert_close(c, a @ b, rtol=2e-2, atol=2e-1)
            out["compiled_on"] = "this GPU, by launching the kernels"
        except Exception as exc:  # e.g. no C compiler for Triton's launcher: compile without launching
            out["launch_error"] = f"{exc.__class__.__name__}: {exc}"[:500]
            k1 = k2 = None
    if k1 is None or k2 is None:
        major, minor = torch.cuda.get_device_capability(0) if HAS_CUDA else (9, 0)
        k1, k2 = aot_compile(10 * major + minor)
        out["compiled_on"] = f"{'this machine' if HAS_CUDA else 'CPU'}, ahead of time for sm_{major}{minor}" + (
            "" if HAS_CUDA else " (layout test)"
        )
    out["scale_add"] = describe_compiled(k1, r"\bfma\.rn", r"\bFFMA\b")
    out["scale_add"]["launch"] = {"n": 4096, "BLOCK": 1024, "dtype": "float32"}
    out["matmul"] = describe_compiled(k2, r"wgmma\.mma_async|mma\.sync", r"HGMMA|HMMA")
    out["matmul"]["launch"] = {"M": 256, "N": 256, "K": 256, "BM": 64, "BN": 64, "BK": 32, "dtype": "float16"}
    return out


# ----------------------------------------------------------------------------- 3. launch overhead


def launch_overhead() -> dict[str, Any]:
    if not HAS_CUDA:
        return {"skipped": "no CUDA"}
    from torch.profiler import ProfilerActivity, profile

    n_calls = 20000
    x = torch.zeros(1, device="cuda")
    res: dict[str, Any] = {"n_calls": n_calls}

    def cpu_issue(fn: Callable[[], object], n: int) -> tuple[float, float]:
        """(CPU us per call with no sync inside, wall us per call including the final sync)."""
        for _ in range(200):
            fn()
        _sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        _sync()
        t2 = time.perf_counter()
        return (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6

    eager = [cpu_issue(lambda: x.add_(1.0), n_calls) for _ in range(3)]
    res["eager_add_cpu_us_per_op"] = _median([e[0] for e in eager])
    res["eager_add_wall_us_per_op"] = _median([e[1] for e in eager])

    try:
        trit = [cpu_issue(lambda: empty_kernel[(1,)](x), n_calls) for _ in range(3)]
        res["triton_empty_cpu_us_per_launch"] = _median([t[0] for t in trit])
        res["triton_empty_wall_us_per_launch"] = _median([t[1] for t in trit])
    except Exception as exc:  # Triton's launcher could not be built here
        res["triton_empty_cpu_us_per_launch"] = None
        res["triton_error"] = f"{exc.__class__.__name__}: {exc}"[:500]

    # launch + execute + synchronize, one at a time: the round trip a synchronising loop pays
    rt = []
    for _ in range(2000):
        t0 = time.perf_counter()
        x.add_(1.0)
        torch.cuda.synchronize()
        rt.append((time.perf_counter() - t0) * 1e6)
    res["eager_add_plus_sync_roundtrip_us"] = _median(rt[200:])
    sy = []
    for _ in range(2000):
        t0 = time.perf_counter()
        torch.cuda.synchronize()
        sy.append((time.perf_counter() - t0) * 1e6)
    res["idle_sync_us"] = _median(sy[200:])

    # CUDA graph: capture many tiny kernels once, replay them with one call
    kernels_in_graph = 1000
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(5):
            x.add_(1.0)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(kernels_in_graph):
            x.add_(1.0)
    gpu_ms = cuda_event_ms(g.replay, repeats=20)
    res["graph_kernels"] = kernels_in_graph
    res["graph_gpu_us_per_kernel"] = _median(gpu_ms) * 1e3 / kernels_in_graph
    cpu_replay = []
    for _ in range(20):
        t0 = time.perf_counter()
        g.replay()
        cpu_replay.append((time.perf_counter() - t0) * 1e6)
        _sync()
    res["graph_replay_cpu_us_per_call"] = _median(cpu_replay)
    # the same kernels issued eagerly, timed on the GPU: the GPU waits on the CPU between them
    eager_gpu_ms = cuda_event_ms(lambda: [x.add_(1.0) for _ in range(kernels_in_graph)], repeats=20)
    res["eager_gpu_span_us_per_kernel"] = _median(eager_gpu_ms) * 1e3 / kernels_in_graph

    # the profiler's split of one eager op: ATen op vs the CUDA runtime's launch call
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(1000):
            x.add_(1.0)
        _sync()
    split = {}
    for e in prof.key_averages():
        if e.key in ("aten::add_", "cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"):
            split[e.key] = {
                "calls": e.count,
                "cpu_us_mean": e.cpu_time_total / max(e.count, 1),
                "self_cpu_us_mean": e.self_cpu_time_total / max(e.count, 1),
            }
        dev = getattr(e, "self_device_time_total", 0.0)
        if dev and e.cpu_time_total == 0:
            split.setdefault("gpu_kernels", []).append({"name": e.key, "calls": e.count, "gpu_us_mean": dev / e.count})
    res["profiler_split_add"] = split
    res["profiler_note"] = "profiler adds its own overhead to the CPU times"
    return res


# ----------------------------------------------------------------------------- 4. timing wrong vs right


def timing() -> dict[str, Any]:
    if not HAS_CUDA:
        return {"skipped": "no CUDA"}
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    _sync()
    t0 = time.perf_counter()
    a @ b
    torch.cuda.synchronize()
    first_ms = (time.perf_counter() - t0) * 1e3
    for _ in range(5):
        a @ b
    _sync()
    no_sync, with_sync = [], []
    for _ in range(20):
        t0 = time.perf_counter()
        a @ b
        no_sync.append((time.perf_counter() - t0) * 1e3)
        _sync()
    for _ in range(20):
        _sync()
        t0 = time.perf_counter()
        a @ b
        torch.cuda.synchronize()
        with_sync.append((time.perf_counter() - t0) * 1e3)
    events = cuda_event_ms(lambda: a @ b, repeats=20)
    # a loop of 20 without sync, timed on the CPU, then one sync: the queue drains at the end
    _sync()
    t0 = time.perf_counter()
    for _ in range(20):
        a @ b
    t_enqueue = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    t_all = (time.perf_counter() - t0) * 1e3
    return {
        "op": f"bf16 matmul {n}x{n} @ {n}x{n}",
        "m": n,
        "n": n,
        "k": n,
        "dtype": "bf16",
        "first_call_ms": first_ms,
        "perf_counter_no_sync_ms": _median(no_sync),
        "perf_counter_with_sync_ms": _median(with_sync),
        "cuda_events_ms": _median(events),
        "cuda_events_all_ms": events,
        "loop20_enqueue_ms": t_enqueue,
        "loop20_after_sync_ms": t_all,
        "repeats": 20,
    }


# ----------------------------------------------------------------------------- 5. H2D bandwidth


def h2d() -> dict[str, Any]:
    if not HAS_CUDA:
        return {"skipped": "no CUDA"}
    rows = []
    for size in (64 * 1024, 1 * MIB, 16 * MIB, 256 * MIB, 1024 * MIB):
        pageable = torch.empty(size, dtype=torch.uint8).fill_(1)
        pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True).fill_(1)
        dst = torch.empty(size, dtype=torch.uint8, device="cuda")
        reps = 10 if size >= 256 * MIB else 30
        row: dict[str, Any] = {"bytes": size}
        for kind, src in (("pageable", pageable), ("pinned", pinned)):
            ms = cuda_event_ms(lambda s=src, d=dst: d.copy_(s, non_blocking=True), repeats=reps)
            row[f"{kind}_ms"] = _median(ms)
            row[f"{kind}_GBps"] = size / (_median(ms) * 1e-3) / 1e9
        ms = cuda_event_ms(lambda s=dst, d=pinned: d.copy_(s, non_blocking=True), repeats=reps)
        row["d2h_pinned_GBps"] = size / (_median(ms) * 1e-3) / 1e9
        rows.append(row)
    return {"rows": rows, "method": "CUDA events around dst.copy_(src, non_blocking=True), median"}


# ----------------------------------------------------------------------------- 6. streams and overlap


def streams() -> dict[str, Any]:
    if not HAS_CUDA:
        return {"skipped": "no CUDA"}
    size = 512 * MIB
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True).fill_(1)
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    copy_stream, compute_stream = torch.cuda.Stream(), torch.cuda.Stream()

    def copy() -> None:
        dev.copy_(host, non_blocking=True)

    def compute() -> None:
        for _ in range(4):
            a @ b

    def wall_ms(fn: Callable[[], None], reps: int = 5) -> float:
        fn()
        _sync()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t0) * 1e3)
        return _median(ts)

    def both_one_stream() -> None:
        copy()
        compute()

    def both_two_streams() -> None:
        with torch.cuda.stream(copy_stream):
            copy()
        with torch.cuda.stream(compute_stream):
            compute()

    return {
        "copy_bytes": size,
        "compute": f"4 x bf16 matmul {n}^3",
        "copy_only_ms": wall_ms(copy),
        "compute_only_ms": wall_ms(compute),
        "one_stream_ms": wall_ms(both_one_stream),
        "two_streams_ms": wall_ms(both_two_streams),
        "method": "perf_counter around the work and a torch.cuda.synchronize(), median of 5",
    }


# ----------------------------------------------------------------------------- 7. caching allocator


def allocator() -> dict[str, Any]:
    if not HAS_CUDA:
        return {"skipped": "no CUDA"}
    torch.cuda.empty_cache()
    steps: list[dict[str, Any]] = []

    def snap(label: str) -> None:
        st = torch.cuda.memory_stats()
        steps.append(
            {
                "step": label,
                "allocated_bytes": torch.cuda.memory_allocated(),
                "reserved_bytes": torch.cuda.memory_reserved(),
                "segments": st.get("segment.all.current", None),
                "cuda_malloc_calls_so_far": st.get("segment.all.allocated", None),
                "inactive_split_bytes": st.get("inactive_split_bytes.all.current", None),
            }
        )

    base_alloc = torch.cuda.memory_allocated()
    snap("start")
    blocks = [torch.empty(256 * MIB, dtype=torch.uint8, device="cuda") for _ in range(8)]
    snap("allocate 8 x 256 MiB")
    for i in range(0, 8, 2):
        blocks[i] = None
    snap("free every other block (4 x 256 MiB)")
    again = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")
    snap("allocate 256 MiB (fits a cached block)")
    big = torch.empty(512 * MIB, dtype=torch.uint8, device="cuda")
    snap("allocate 512 MiB (no cached block is big enough)")
    del again, big
    blocks = []
    snap("free everything")
    torch.cuda.empty_cache()
    snap("torch.cuda.empty_cache()")
    small = [torch.empty(1000, dtype=torch.float32, device="cuda") for _ in range(10)]
    snap("allocate 10 x 4000 B")
    del small
    oom = None
    try:
        torch.empty(4 * 2**40, dtype=torch.uint8, device="cuda")  # 4 TiB
    except torch.OutOfMemoryError as exc:
        oom = str(exc).splitlines()[0][:400]
    torch.cuda.empty_cache()
    return {
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "baseline_allocated_bytes": base_alloc,
        "steps": steps,
        "oom_message_4TiB": oom,
    }


# ----------------------------------------------------------------------------- 8. eager vs torch.compile


def compile_section() -> dict[str, Any]:
    if not HAS_CUDA:
        return {"skipped": "no CUDA"}
    from torch.profiler import ProfilerActivity, profile

    def f(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        y = x + b
        y = torch.nn.functional.gelu(y)
        return y * 0.5 + 1.0

    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    fc = torch.compile(f)
    fc(x, bias)
    _sync()
    compile_s = time.perf_counter() - t0
    torch.testing.assert_close(fc(x, bias), f(x, bias), rtol=2e-2, atol=2e-2)

    def kernels(fn: Callable[[], object]) -> list[str]:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            _sync()
        return [
            e.key for e in prof.key_averages() if getattr(e, "self_device_time_total", 0) > 0 and e.cpu_time_total == 0
        ]

    return {
        "function": inspect.getsource(f),
        "shape": [8192, 8192],
        "dtype": "bf16",
        "first_call_with_compile_s": compile_s,
        "eager_ms": _median(cuda_event_ms(lambda: f(x, bias), repeats=20)),
        "compiled_ms": _median(cuda_event_ms(lambda: fc(x, bias), repeats=20)),
        "eager_kernels": kernels(lambda: f(x, bias)),
        "compiled_kernels": kernels(lambda: fc(x, bias)),
    }


# ----------------------------------------------------------------------------- 9. XLA HLO


def xla() -> dict[str, Any]:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as exc:
        return {"skipped": f"jax not importable: {exc}"}

    def f(x, w, b):  # noqa: ANN001, ANN202
        return jax.nn.gelu(x @ w + b) * 2.0

    x = jnp.ones((128, 256), jnp.float32)
    w = jnp.ones((256, 512), jnp.float32)
    b = jnp.ones((512,), jnp.float32)
    lowered = jax.jit(f).lower(x, w, b)
    compiled = lowered.compile()
    out: dict[str, Any] = {
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "function": inspect.getsource(f),
        "shapes": {"x": [128, 256], "w": [256, 512], "b": [512]},
        "stablehlo": lowered.as_text()[:8000],
    }
    try:
        out["hlo_before_optimisation"] = lowered.as_text(dialect="hlo")[:8000]
    except Exception as exc:
        out["hlo_before_optimisation"] = f"unavailable: {exc}"
    out["hlo_after_optimisation"] = compiled.as_text()[:12000]
    try:
        ma = compiled.memory_analysis()
        out["memory_analysis"] = {
            k: getattr(ma, k) for k in dir(ma) if k.endswith("_in_bytes") and isinstance(getattr(ma, k), int)
        }
    except Exception as exc:
        out["memory_analysis"] = f"unavailable: {exc}"
    try:
        ca = compiled.cost_analysis()
        ca = ca[0] if isinstance(ca, list) else ca
        out["cost_analysis"] = {
            k: float(v) for k, v in ca.items() if k in ("flops", "bytes accessed", "transcendentals")
        }
    except Exception as exc:
        out["cost_analysis"] = f"unavailable: {exc}"
    return out


# ----------------------------------------------------------------------------- main

SECTIONS: dict[str, Callable[[], dict[str, Any]]] = {
    "linear_profile": linear_profile,
    "triton": triton_artefacts,
    "launch_overhead": launch_overhead,
    "timing": timing,
    "h2d": h2d,
    "streams": streams,
    "allocator": allocator,
    "compile": compile_section,
    "xla": xla,  # last: importing jax on a GPU machine initialises its own CUDA context
}


def main() -> int:
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "ch_artefacts_h100.json"
    result: dict[str, Any] = {"provenance": provenance()}
    for name, fn in SECTIONS.items():
        t0 = time.perf_counter()
        try:
            result[name] = fn()
        except Exception as exc:  # record and go on: one broken section must not lose the rest
            result[name] = {"error": f"{exc.__class__.__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
        result[name + "_seconds"] = round(time.perf_counter() - t0, 2)
        print(f"{name}: {result[name + '_seconds']} s", "ERROR" if "error" in result[name] else "", flush=True)
        path.write_text(json.dumps(result, indent=1, default=str))  # partial results survive a kill
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
