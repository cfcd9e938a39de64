"""Attention forward throughput vs sequence length: Lab 5's reference kernel, SDPA's flash backend, naive PyTorch.

All three run side by side in one process on the same inputs (fp16, head dim 64 and 128, causal
and not; batch x sequence = 16384 tokens and heads x head dim = 2048, as in a 2048-wide model).
The reference kernel is not copied here: it is executed from the cells of the lab's instructor
notebook (``labs/source/lab5_attention``), so the record times the code learners are shown.
Throughput is ``mlsys.attention.attention_flops`` (the two matmuls' FLOPs; causal counts the
``N (N + 1) / 2`` visible pairs) over the median time; each kernel's output is checked against
SDPA's after timing. On a CPU (a smoke test) the kernel runs under the Triton interpreter at tiny
sizes and SDPA uses its default (math) backend, since the flash backend needs CUDA.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

SHOWN_IN = ("labs/release/lab5_attention/lab5_attention",)
NEEDS = "any"

#: the grade ids of the notebook cells that define ``attention(q, k, v, causal)``
KERNEL_CELLS = ("attend_blocks", "attention_kernel", "attention_launcher")
NOTEBOOK = Path(__file__).resolve().parents[3] / "labs" / "source" / "lab5_attention" / "lab5_attention.ipynb"
TOKENS = 16384  # batch * seq_len
MODEL_WIDTH = 2048  # heads * head_dim

GPU_SEQ_LENS = (512, 1024, 2048, 4096, 8192)
GPU_QUICK_SEQ_LENS = (1024, 4096)
CPU_SEQ_LENS = (32, 64)


def load_reference(notebook: str | Path = NOTEBOOK) -> dict[str, Any]:
    """The namespace of the notebook's kernel cells: ``attention(q, k, v, causal=False, scale=None)``,
    ``attention_kernel`` (the autotuned Triton kernel) and their helpers."""
    from ...runtime.notebook import exec_cells

    path = Path(notebook)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the lab's instructor notebook is needed (run from a course checkout)")
    return exec_cells(path, list(KERNEL_CELLS), {"__name__": "lab5_attention"})


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


def sdpa(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
    """``F.scaled_dot_product_attention``, restricted to the flash backend on CUDA."""
    import torch.nn.functional as F

    if q.is_cuda:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def shape_for(seq_len: int, head_dim: int, tokens: int = TOKENS, width: int = MODEL_WIDTH) -> tuple[int, int]:
    """(batch, heads) with batch * seq_len = tokens (at least 1) and heads * head_dim = width."""
    return max(1, tokens // seq_len), max(1, width // head_dim)


def measure(impls: dict[str, Callable[..., Any]], device: str, seq_lens: Sequence[int], head_dim: int,
            causal: bool, dtype: str = "fp16", repeats: int = 20, tokens: int = TOKENS,
            width: int = MODEL_WIDTH, check_against: str | None = "sdpa") -> list[dict[str, Any]]:
    """Time each ``impls[name](q, k, v, causal)`` at each sequence length; one row per length.

    Each row holds the shape, the FLOPs, and per implementation its median time, throughput
    (FLOP/s) and timing record; with ``check_against``, every other implementation's output is
    compared with that one's after timing (max abs difference kept; > 0.05 raises).
    """
    import torch

    from ...attention import attention_flops
    from ..timing import time_fn

    torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
    rows = []
    for n in seq_lens:
        b, h = shape_for(n, head_dim, tokens, width)
        gen = torch.Generator(device=device).manual_seed(n * 1000 + head_dim + int(causal))
        q, k, v = (torch.randn(b, h, n, head_dim, device=device, dtype=torch_dtype, generator=gen) for _ in range(3))
        flops = attention_flops(b, h, n, head_dim, causal)
        row: dict[str, Any] = {"seq_len": n, "batch": b, "heads": h, "head_dim": head_dim, "causal": causal,
                               "dtype": dtype, "flops": {"value": flops.magnitude, "unit": "FLOP"}}
        outputs = {}
        for name, fn in impls.items():
            t = time_fn(lambda fn=fn, q=q, k=k, v=v: fn(q, k, v, causal), device, what=f"{name} attention B={b} H={h} N={n} "
                        f"D={head_dim} causal={causal} {dtype}", repeats=repeats, warmup=3)
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
    impls = {"naive": naive_attention, "reference": attention, "sdpa": sdpa}
    sweeps = []
    for head_dim in head_dims:
        for causal in (False, True):
            rows = measure(impls, ctx.device, seq_lens, head_dim, causal, dtype,
                           repeats=5 if ctx.device == "cpu" else 20, tokens=tokens, width=width)
            for row in rows:
                row["reference_share_of_sdpa"] = row["sdpa"]["time"]["value"] / row["reference"]["time"]["value"]
                row["naive_share_of_sdpa"] = row["sdpa"]["time"]["value"] / row["naive"]["time"]["value"]
            sweeps.append({"head_dim": head_dim, "causal": causal, "rows": rows})
    for key, config in getattr(ns["attention_kernel"], "cache", {}).items():
        ctx.note(f"autotuned config for (N_CTX, HEAD_DIM, CAUSAL, ...) = {key}: {config}")
    return {"dtype": dtype, "tokens": tokens, "model_width": width, "sweeps": sweeps,
            "method": "naive PyTorch, the notebook's reference Triton kernel and SDPA (flash backend on CUDA) "
                      "timed one after another on the same inputs with mlsys.bench.timing.time_fn"}
