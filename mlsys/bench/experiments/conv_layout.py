"""Convolution in NCHW against channels_last (NHWC): the same layers, the same weights, two memory
layouts, timed through torch.nn.functional.conv2d with cuDNN's autotuner on.

Throughput is the convolution's FLOPs from :func:`mlsys.layers.conv2d` over the median time (bf16
on a GPU, fp32 on a CPU). The record also times the layout conversion of the input
(``x.contiguous(memory_format=torch.channels_last)``), the price of switching per layer.
Each layout's convolution, and the conversion, also keep their per-kernel profile
(:func:`mlsys.bench.profile.kernel_profile`): which kernels cuDNN ran, by name, with their device
times, so a layout's cost can be traced to a transpose or to a slower kernel.
"""

from __future__ import annotations

from typing import Any

from ._part2 import figure, kernel_profile, rel_error, timed, torch_dtype

SHOWN_IN = ("chapters/10_fusion_and_compilers",)
NEEDS = "any"


def _layers(device: str, quick: bool) -> dict[str, dict[str, int]]:
    n = 32 if device == "cuda" and not quick else 2
    return {
        "stem_7x7": {"batch": n, "c_in": 3, "height": 224, "width": 224, "c_out": 64, "kernel": 7, "stride": 2},
        "res_3x3_c64": {"batch": n, "c_in": 64, "height": 56, "width": 56, "c_out": 64, "kernel": 3, "stride": 1},
        "res_3x3_c256": {"batch": n, "c_in": 256, "height": 14, "width": 14, "c_out": 256, "kernel": 3, "stride": 1},
        "pointwise_1x1": {"batch": n, "c_in": 256, "height": 56, "width": 56, "c_out": 64, "kernel": 1, "stride": 1},
    }


def run(ctx: Any) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from ... import layers

    if ctx.device == "cuda":
        torch.backends.cudnn.benchmark = True
    dt, dname = torch_dtype(ctx.device)
    g = torch.Generator(device=ctx.device).manual_seed(0)
    out: dict[str, Any] = {"dtype": dname, "cudnn_benchmark": ctx.device == "cuda"}
    for name, p in _layers(ctx.device, ctx.quick).items():
        cost = layers.conv2d(p["batch"], p["c_in"], p["height"], p["width"], p["c_out"], p["kernel"],
                             p["stride"], dtype=dname)
        x = torch.randn(p["batch"], p["c_in"], p["height"], p["width"], device=ctx.device, generator=g).to(dt)
        w = torch.randn(p["c_out"], p["c_in"], p["kernel"], p["kernel"], device=ctx.device, generator=g).to(dt)
        pad, stride = p["kernel"] // 2, p["stride"]
        ref = F.conv2d(x[:1].double(), w.double(), stride=stride, padding=pad)
        row: dict[str, Any] = {"params": p, "flops": {"value": cost.flops.m, "unit": "FLOP",
                                                      "method": "mlsys.layers.conv2d"}}
        for layout, fmt in (("nchw", torch.contiguous_format), ("channels_last", torch.channels_last)):
            xl, wl = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
            t = timed(lambda xl=xl, wl=wl, s=stride, pd=pad: F.conv2d(xl, wl, stride=s, padding=pd), ctx.device,
                      f"conv2d {name} {layout}", ctx.quick, check=lambda y, ref=ref: rel_error(y[:1], ref) < 2e-2)
            row[layout] = figure(cost.flops.m / t.median, "FLOP/s", "mlsys.layers.conv2d FLOPs / median time", t)
            row[f"{layout}_profile"] = kernel_profile(
                lambda xl=xl, wl=wl, s=stride, pd=pad: F.conv2d(xl, wl, stride=s, padding=pd), ctx.device,
                calls=3 if ctx.quick else 5, top=4)
        t_conv = timed(lambda x=x: x.contiguous(memory_format=torch.channels_last), ctx.device,
                       f"NCHW -> channels_last copy of the {name} input", ctx.quick)
        row["to_channels_last"] = figure(t_conv.median, "s", "median time of x.contiguous(channels_last)", t_conv)
        row["to_channels_last_profile"] = kernel_profile(lambda x=x: x.contiguous(memory_format=torch.channels_last),
                                                         ctx.device, calls=3 if ctx.quick else 5, top=3)
        row["speedup"] = {"value": row["channels_last"]["value"] / row["nchw"]["value"], "unit": "",
                          "method": "channels_last throughput / NCHW throughput"}
        out[name] = row
    return out
