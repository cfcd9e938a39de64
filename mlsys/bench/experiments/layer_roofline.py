"""Real layers on the roofline: time of a dense layer at several batch sizes, a decode GEMV, a
convolution, LayerNorm, softmax and attention's Q K^T, each with its FLOPs and bytes from mlsys.layers.

For each layer the record holds the median time, the FLOPs and compulsory bytes counted by
:mod:`mlsys.layers`, and the achieved FLOP/s and byte/s (count / median time). bf16 on a GPU,
fp32 on a CPU. Caches are flushed before every timed call, so no input starts in the L2.

Each layer also keeps its per-kernel profile (:func:`._part2.kernel_profile`): the kernels one call
launches, by name, with their device times from ``torch.profiler``, and the host time per call. The
median time above brackets one call with CUDA events and so includes the fixed cost of starting a
lone kernel; the profile's device time is the kernels' own, which is what the roofline bounds.
"""

from __future__ import annotations

from typing import Any

from ._part2 import figure, kernel_profile, timed, torch_dtype

SHOWN_IN = ("chapters/06_roofline",)
NEEDS = "any"


def _cases(device: str, quick: bool) -> list[tuple[str, str, dict[str, int]]]:
    if device == "cuda" and not quick:
        d, rows, cols, img, bh, seq = 4096, 16384, 4096, 32, 64, 2048
        tokens = (1, 8, 32, 128, 512, 2048, 8192)
    else:
        d, rows, cols, img, bh, seq = 512, 1024, 512, 2, 4, 256
        tokens = (1, 32, 512)
    cases: list[tuple[str, str, dict[str, int]]] = [
        (f"linear_t{t}", "linear", {"tokens": t, "d_in": d, "d_out": d}) for t in tokens]
    cases += [
        ("gpt2_decode_mlp", "linear", {"tokens": 1, "d_in": 768, "d_out": 3072}),
        ("conv3x3", "conv2d", {"batch": img, "c_in": 64, "height": 56, "width": 56, "c_out": 64, "kernel": 3}),
        ("layer_norm", "layer_norm", {"rows": rows, "cols": cols}),
        ("softmax", "softmax", {"rows": rows, "cols": cols}),
        ("attention_scores", "attention_scores", {"batch_heads": bh, "q_len": seq, "k_len": seq, "head_dim": 64}),
    ]
    return cases


def _callable(kind: str, p: dict[str, int], dt: Any, device: str) -> Any:
    import torch
    import torch.nn.functional as F

    g = torch.Generator(device=device).manual_seed(0)

    def r(*shape: int) -> Any:
        return torch.randn(*shape, device=device, generator=g).to(dt)

    if kind == "linear":
        x, w = r(p["tokens"], p["d_in"]), r(p["d_out"], p["d_in"])
        return lambda: F.linear(x, w)
    if kind == "conv2d":
        x = r(p["batch"], p["c_in"], p["height"], p["width"]).contiguous(memory_format=torch.channels_last)
        w = r(p["c_out"], p["c_in"], p["kernel"], p["kernel"]).contiguous(memory_format=torch.channels_last)
        return lambda: F.conv2d(x, w, padding=p["kernel"] // 2)
    if kind == "layer_norm":
        x, gamma, beta = r(p["rows"], p["cols"]), r(p["cols"]), r(p["cols"])
        return lambda: F.layer_norm(x, (p["cols"],), gamma, beta)
    if kind == "softmax":
        x = r(p["rows"], p["cols"])
        return lambda: torch.softmax(x, dim=-1)
    if kind == "attention_scores":
        q, k = r(p["batch_heads"], p["q_len"], p["head_dim"]), r(p["batch_heads"], p["k_len"], p["head_dim"])
        return lambda: torch.matmul(q, k.transpose(1, 2))
    raise ValueError(f"unknown layer kind {kind!r}")


def run(ctx: Any) -> dict[str, Any]:
    import torch

    from ... import layers

    if ctx.device == "cuda":
        torch.backends.cudnn.benchmark = True
    dt, dname = torch_dtype(ctx.device)
    out: dict[str, Any] = {"dtype": dname}
    for name, kind, params in _cases(ctx.device, ctx.quick):
        cost = getattr(layers, kind)(**params, dtype=dname)
        fn = _callable(kind, params, dt, ctx.device)
        t = timed(fn, ctx.device, f"{name} {params}", ctx.quick)
        flops, nbytes = cost.flops.to("FLOP").m, cost.bytes.to("byte").m
        out[name] = {
            "layer": kind,
            "params": params,
            "flops": {"value": flops, "unit": "FLOP", "method": f"mlsys.layers.{kind}"},
            "bytes": {"value": nbytes, "unit": "byte", "method": f"mlsys.layers.{kind} (compulsory traffic)"},
            "time": figure(t.median, "s", "median of the timed calls", t),
            "achieved_flops": figure(flops / t.median, "FLOP/s", "counted FLOPs / median time"),
            "achieved_bandwidth": figure(nbytes / t.median, "byte/s", "compulsory bytes / median time"),
            "profile": kernel_profile(fn, ctx.device, calls=3 if ctx.quick else 5),
        }
    return out
