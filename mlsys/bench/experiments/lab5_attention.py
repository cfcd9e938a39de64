"""Attention forward throughput vs sequence length: Lab 5's kernels, each SDPA backend, naive PyTorch.

All run side by side in one process on the same inputs (fp16, head dim 64 and 128, causal
and not; batch x sequence = 16384 tokens and heads x head dim = 2048, as in a 2048-wide model).
The kernels are not copied here: they are executed from the cells of the lab's instructor
notebook (``labs/source/lab5_attention``), so the record times the code learners are shown:
``reference`` is the exercise's ``attention`` (the kernel learners write) and ``fast`` the optional
``fast_attention`` (persistent and warp-specialized on Hopper where it was measured faster, else
``attention``).
Throughput is ``mlsys.attention.attention_flops`` (the two matmuls' FLOPs; causal counts the
``N (N + 1) / 2`` visible pairs) over the median time; each kernel's output is checked against
SDPA's (flash) after timing. SDPA runs once per backend, named in the record: ``sdpa`` (flash,
FlashAttention-2), ``sdpa_cudnn`` (cuDNN's fused attention, PyTorch's default on Hopper) and
``sdpa_efficient`` (memory-efficient); the bar is the fastest of them at each point. The lowest share of
the bar over N >= 4096, causal and not, is recorded per head dim for each kernel (not the best). On a CPU (a smoke test) the kernel runs under the Triton interpreter at tiny
sizes and SDPA uses its default (math) backend, since the flash backend needs CUDA.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...runtime.paths import lab_notebook

SHOWN_IN = ("labs/release/lab5_attention/lab5_attention",)
NEEDS = "any"

#: the grade ids of the notebook cells that define ``attention(q, k, v, causal)``
KERNEL_CELLS = ("attend_blocks", "attention_kernel", "attention_launcher")
NOTEBOOK = lab_notebook("lab5_attention", must_exist=False)  # the instructor's notebook
#: the optional notebook beside the lab whose cell tagged ``lab5-kernel`` defines ``fast_attention``
GOING_FURTHER = NOTEBOOK.parents[2] / "going_further" / "lab5_going_further.ipynb"
TOKENS = 16384  # batch * seq_len
MODEL_WIDTH = 2048  # heads * head_dim

GPU_SEQ_LENS = (512, 1024, 2048, 4096, 8192)
KERNELS = ("reference", "fast")  # the impls whose shares of the fastest backend are recorded
GPU_QUICK_SEQ_LENS = (1024, 4096)
CPU_SEQ_LENS = (32, 64)


def load_reference(notebook: str | Path = NOTEBOOK, going_further: Path = GOING_FURTHER) -> dict[str, Any]:
    """The namespace of the notebook's kernel cells: ``attention(q, k, v, causal=False, scale=None)``,
    ``attention_kernel`` (the autotuned Triton kernel) and their helpers, then ``fast_attention`` (same signature)
    from the optional notebook's cell tagged ``lab5-kernel``, with ``fallback`` set to ``attention``."""
    from ...runtime.notebook import code_cells, exec_cells

    path = Path(notebook)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the lab's instructor notebook is needed (run from a course checkout)")
    ns = exec_cells(path, list(KERNEL_CELLS), {"__name__": "lab5_attention"})
    ns["fallback"] = ns["attention"]  # fast_attention hands what it does not take to the exercise's kernel
    tagged = [c.grade_id for c in code_cells(going_further) if "lab5-kernel" in c.tags]
    if not tagged:
        raise ValueError(f"{going_further}: expected a code cell tagged 'lab5-kernel' (fast_attention)")
    return exec_cells(going_further, tagged, ns)


def naive_attention(q: Any, k: Any, v: Any, causal: bool = False, scale: float | None = None) -> Any:
    """Attention the eager way: ``S = (q * scale) k^T``, (causal mask), ``P = softmax(S)``, ``O = P v``.

    The ``N x N`` score matrix goes through global memory between the kernels.
    """
    import torch

    n, d = q.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = torch.matmul(q * scale, k.transpose(-2, -1))
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v)


#: SDPA's backends on CUDA, by the names the record uses; ``sdpa`` is the flash backend (FlashAttention-2)
SDPA_BACKENDS = {"sdpa": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_efficient": "EFFICIENT_ATTENTION"}


def sdpa_backend(backend: str) -> Callable[..., Any]:
    """``F.scaled_dot_product_attention`` restricted to one backend (a ``torch.nn.attention.SDPBackend`` name)."""
    import torch.nn.functional as F

    def run(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
        if q.is_cuda:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(getattr(SDPBackend, backend)):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    run.__name__ = f"sdpa_{backend.lower()}"
    return run


def sdpa(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
    """``F.scaled_dot_product_attention``, restricted to the flash backend on CUDA."""
    return sdpa_backend("FLASH_ATTENTION")(q, k, v, causal)


def available_backends(device: str) -> tuple[dict[str, Callable[..., Any]], dict[str, str]]:
    """SDPA's backends that run here on a small fp16 problem, and why the others do not (name -> error)."""
    import torch

    if device != "cuda":
        return {"sdpa": sdpa}, {}
    q = torch.randn(1, 2, 256, 64, device=device, dtype=torch.float16)
    ok, missing = {}, {}
    for name, backend in SDPA_BACKENDS.items():
        fn = sdpa_backend(backend)
        try:
            fn(q, q, q, False)
            ok[name] = fn
        except Exception as exc:  # e.g. cuDNN attention before Hopper or without cuDNN 9
            missing[name] = f"{type(exc).__name__}: {exc}"[:500]
    return ok, missing


def shape_for(seq_len: int, head_dim: int, tokens: int = TOKENS, width: int = MODEL_WIDTH) -> tuple[int, int]:
    """(batch, heads) with batch * seq_len = tokens (at least 1) and heads * head_dim = width."""
    return max(1, tokens // seq_len), max(1, width // head_dim)


def measure(impls: dict[str, Callable[..., Any]], device: str, seq_lens: Sequence[int], head_dim: int,
            causal: bool, dtype: str = "fp16", repeats: int = 20, tokens: int = TOKENS,
            width: int = MODEL_WIDTH, check_against: str | None = "sdpa") -> list[dict[str, Any]]:
    """Time each ``impls[name](q, k, v, causal)`` at each sequence length; one row per length.

    The implementations are timed call by call in turn (:func:`mlsys.bench.timing.time_interleaved`),
    so each sees the same clocks. Each row holds the shape, the FLOPs, and per implementation its
    median time, throughput (FLOP/s) and timing record; with ``check_against``, every other implementation's output is
    compared with that one's after timing (max abs difference kept; > 0.05 raises).
    """
    import torch

    from ...attention import attention_flops
    from ..timing import time_interleaved

    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    rows = []
    for n in seq_lens:
        b, h = shape_for(n, head_dim, tokens, width)
        gen = torch.Generator(device=device).manual_seed(n * 1000 + head_dim + int(causal))
        q, k, v = (torch.randn(b, h, n, head_dim, device=device, dtype=torch_dtype, generator=gen) for _ in range(3))
        flops = attention_flops(b, h, n, head_dim, causal)
        row: dict[str, Any] = {"seq_len": n, "batch": b, "heads": h, "head_dim": head_dim, "causal": causal,
                               "dtype": dtype, "flops": {"value": flops.magnitude, "unit": "FLOP"}}
        fns = {name: (lambda fn=fn, q=q, k=k, v=v: fn(q, k, v, causal)) for name, fn in impls.items()}
        timings = time_interleaved(fns, device, what=f"attention B={b} H={h} N={n} D={head_dim} causal={causal} "
                                   f"{dtype}", repeats=repeats, warmup=3)
        outputs = {}
        for name, fn in impls.items():
            t = timings[name]
            outputs[name] = fn(q, k, v, causal)
            row[name] = {"time": {"value": t.median, "unit": "s"},
                         "throughput": {"value": flops.magnitude / t.median, "unit": "FLOP/s"},
                         "method": "attention_flops (2 matmuls) / median time", "timing": t.to_json()}
        if check_against and check_against in outputs:
            ref = outputs[check_against].float()
            for name, out in outputs.items():
                if name == check_against:
                    continue
                err = float((out.float() - ref).abs().max())
                if not math.isfinite(err) or err > 0.05:
                    raise AssertionError(f"{name} differs from {check_against} by {err:g} at N={n}, D={head_dim}, "
                                         f"causal={causal}")
                row[name]["max_abs_difference"] = err
        outputs.clear()  # free the outputs before the next, larger size
        rows.append(row)
    return rows


def run(ctx: Any) -> dict[str, Any]:
    ns = load_reference()
    attention = ns["attention"]
    if ctx.device == "cuda":
        seq_lens = GPU_QUICK_SEQ_LENS if ctx.quick else GPU_SEQ_LENS
        head_dims, dtype, tokens, width = (64, 128), "fp16", TOKENS, MODEL_WIDTH
    else:
        seq_lens, head_dims, dtype, tokens, width = CPU_SEQ_LENS, (16, 32), "fp32", 64, 32
        ctx.note("CPU: the reference kernel under the Triton interpreter, tiny sizes; SDPA's math backend")
    backends, missing = available_backends(ctx.device)
    for name, why in missing.items():
        ctx.note(f"SDPA backend {name} does not run here: {why}")
    impls = {"naive": naive_attention, "reference": attention, "fast": ns["fast_attention"], **backends}
    sweeps = []
    for head_dim in head_dims:
        for causal in (False, True):
            rows = measure(impls, ctx.device, seq_lens, head_dim, causal, dtype,
                           repeats=5 if ctx.device == "cpu" else 20, tokens=tokens, width=width)
            for row in rows:
                row["reference_share_of_sdpa"] = row["sdpa"]["time"]["value"] / row["reference"]["time"]["value"]
                row["naive_share_of_sdpa"] = row["sdpa"]["time"]["value"] / row["naive"]["time"]["value"]
                fastest = min(backends, key=lambda b: row[b]["time"]["value"])
                row["fastest_sdpa"] = fastest
                for kernel in KERNELS:
                    row[f"{kernel}_share_of_fastest_sdpa"] = (row[fastest]["time"]["value"]
                                                              / row[kernel]["time"]["value"])
            sweeps.append({"head_dim": head_dim, "causal": causal, "rows": rows})
    for key, config in getattr(ns["attention_kernel"], "cache", {}).items():
        ctx.note(f"autotuned config for (N_CTX, HEAD_DIM, CAUSAL, ...) = {key}: {config}")
    lowest: dict[str, dict[str, tuple]] = {kernel: {} for kernel in KERNELS}
    for sweep in sweeps:
        for row in sweep["rows"]:
            if row["seq_len"] >= 4096 or ctx.device != "cuda":
                key = f"D={sweep['head_dim']}"
                for kernel in KERNELS:
                    cand = (row[f"{kernel}_share_of_fastest_sdpa"], row["seq_len"], sweep["causal"],
                            row["fastest_sdpa"])
                    lowest[kernel][key] = min(lowest[kernel].get(key, cand), cand)

    def table(low: dict[str, tuple]) -> dict[str, dict[str, Any]]:
        return {k: {"share": v[0], "seq_len": v[1], "causal": v[2], "fastest_sdpa": v[3]} for k, v in low.items()}

    return {"dtype": dtype, "tokens": tokens, "model_width": width, "sweeps": sweeps,
            "sdpa_backends": {name: SDPA_BACKENDS[name] for name in backends},
            "sdpa_backends_missing": missing,
            "lowest_share_of_fastest_sdpa": table(lowest["reference"]),
            "fast_lowest_share_of_fastest_sdpa": table(lowest["fast"]),
            "method": "naive PyTorch, the notebook's two Triton kernels (reference: the exercise's attention; fast: "
                      "fast_attention) and SDPA restricted to each of its "
                      "backends (sdpa = flash, sdpa_cudnn, sdpa_efficient) timed call by call in turn on the same "
                      "inputs with mlsys.bench.timing.time_interleaved; lowest_share_of_fastest_sdpa (and fast_...): "
                      "the smallest kernel / fastest-backend ratio over N >= 4096 (all N on a CPU), causal and not"}
