"""The L2 flush's bias: Part II's decode GEMV, decode MLP, LayerNorm and softmax timed after the write-flush
the course used until 2026-12-02, after the read-flush it uses now, and with no flush, interleaved call by
call in one run (:func:`mlsys.bench.timing.time_flush_modes`).

A write-flush leaves dirty lines in the L2; their write-back lands in the next timed kernel. The record
keeps each median and ``write_over_read``, the write-flush median over the read-flush one.

    python -m mlsys.bench run flush_bias --device cuda
"""

from __future__ import annotations

from typing import Any

from ..timing import time_flush_modes
from ._part2 import figure, torch_dtype
from .layer_roofline import _callable, _cases

SHOWN_IN = ("chapters/06_roofline",)
NEEDS = "cuda"
LAYERS = ("linear_t1", "gpt2_decode_mlp", "layer_norm", "softmax")


def run(ctx: Any) -> dict[str, Any]:
    dt, dname = torch_dtype(ctx.device)
    cases = {name: (kind, p) for name, kind, p in _cases(ctx.device, ctx.quick)}
    out: dict[str, Any] = {"dtype": dname}
    for name in LAYERS:
        kind, params = cases[name]
        t = time_flush_modes(_callable(kind, params, dt, ctx.device), what=name, repeats=10 if ctx.quick else 50)
        out[name] = {"params": params, **{m: figure(tm.median, "s", f"median after flush mode {m!r}", tm)
                                          for m, tm in t.items()},
                     "write_over_read": t["write"].median / t["read"].median}
    return out
