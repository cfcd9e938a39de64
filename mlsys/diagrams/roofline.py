"""The textbook roofline with its regions named, and a roofline with several ceilings."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ..hardware import Accelerator
from .style import BLUE, GREEN, GREY, ORANGE, PURPLE, SKY, SMALL, TEXT, VERMILLION, accelerator, new_figure


def _axes(title: str):
    fig = new_figure(7.0, 4.2, dpi=110)
    ax = fig.add_axes((0.11, 0.13, 0.85, 0.78))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)", fontsize=TEXT)
    ax.set_ylabel("attainable (TFLOP/s)", fontsize=TEXT)
    ax.set_title(title, fontsize=11)
    ax.tick_params(labelsize=SMALL)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig, ax


def roofline_regions(accel: Accelerator | str | None = None, dtype: str = "bf16") -> Figure:
    """``min(P, B I)`` on log-log axes for ``accel``'s dense ``dtype`` peak ``P`` and HBM bandwidth ``B``,
    the ridge ``I* = P / B`` marked, the region left of it shaded and named memory-bound, the region right
    of it named compute-bound, and the space above the roof named unreachable."""
    a = accelerator(accel)
    peak = float(a.peak(dtype).to("TFLOP/s").m)
    bw = float(a.memory_bandwidth.to("TB/s").m)
    ridge = peak / bw
    fig, ax = _axes(f"The roofline of the {a.name} ({dtype}, datasheet)")
    x = np.logspace(np.log10(ridge / 300), np.log10(ridge * 30), 400)
    y = np.minimum(peak, bw * x)
    ax.fill_between(x[x <= ridge], 1e-9, y[x <= ridge], color=SKY, alpha=0.35, hatch="//", lw=0, gid="memory-region")
    ax.fill_between(x[x >= ridge], 1e-9, y[x >= ridge], color=ORANGE, alpha=0.35, lw=0, gid="compute-region")
    ax.plot(x, y, color="black", lw=2.2, gid="roof")
    ax.set_ylim(bw * x[0] / 2, peak * 6)
    ax.set_xlim(x[0], x[-1])
    ax.axvline(ridge, color=GREY, ls="--", lw=1)
    ax.text(ridge * 1.08, peak * 2.2, f"ridge point: {ridge:.0f} FLOP/byte", fontsize=TEXT, gid="ridge")
    ax.text(ridge / 10, bw * ridge / 10 / 8, "memory-bound:\nfewer bytes help", fontsize=TEXT, ha="center",
            gid="region")
    ax.text(ridge * 5, peak / 12, "compute-bound:\nfewer FLOPs help", fontsize=TEXT, ha="center", gid="region")
    ax.text(ridge / 30, peak * 1.6, "unreachable", fontsize=TEXT, color=VERMILLION, style="italic", gid="region")
    ax.text(ridge / 150, bw * ridge / 150 * 0.45, f"slope: HBM {bw:.3g} TB/s", fontsize=SMALL, color=BLUE)
    ax.text(ridge * 3, peak * 1.15, f"{peak:.3g} TFLOP/s", fontsize=SMALL, color="black")
    return fig


def roofline_ceilings(accel: Accelerator | str | None = None, l2_bandwidth: object = None,
                      dtype: str = "bf16") -> Figure:
    """Several roofs for ``accel``: the HBM slope (datasheet ``memory_bandwidth``), an L2 slope
    (``l2_bandwidth``, a measured figure a chapter passes in; without it the L2 line is absent and the
    legend says "not in the course's data"), the tensor-core roof (dense ``dtype`` peak) and the
    non-tensor FP32 roof (``fp32`` peak). A kernel under a lower ceiling cannot reach a higher one."""
    a = accelerator(accel)
    bw = float(a.memory_bandwidth.to("TB/s").m)
    tensor = float(a.peak(dtype).to("TFLOP/s").m)
    fp32 = float(a.peak("fp32").to("TFLOP/s").m) if "fp32" in a.dtypes else None
    l2 = float(l2_bandwidth.to("TB/s").m) if l2_bandwidth is not None else None  # type: ignore[attr-defined]
    top = max(bw, l2 or 0.0)
    x = np.logspace(np.log10(tensor / top / 1000), np.log10(tensor / bw * 20), 400)
    fig, ax = _axes(f"Ceilings of the {a.name}")
    ax.plot(x, np.minimum(tensor, bw * x), color=BLUE, lw=2.2, label=f"HBM {bw:.3g} TB/s, {dtype} tensor cores",
            gid="hbm")
    ax.axhline(tensor, color=ORANGE, lw=1.2, ls=":", gid="tensor")
    ax.text(x[0] * 1.3, tensor * 1.12, f"tensor cores, {dtype}: {tensor:.3g} TFLOP/s", fontsize=SMALL)
    if fp32 is not None:
        ax.axhline(fp32, color=PURPLE, lw=1.2, ls="--", gid="fp32")
        ax.text(x[0] * 1.3, fp32 * 1.12, f"FP32 without tensor cores: {fp32:.3g} TFLOP/s", fontsize=SMALL)
    if l2 is not None:
        ax.plot(x, np.minimum(tensor, l2 * x), color=GREEN, lw=1.6, ls="-.", label=f"L2 {l2:.3g} TB/s (measured)",
                gid="l2")
    else:
        ax.plot([], [], color=GREY, ls="-.", label="L2 bandwidth: not in the course's data", gid="l2-missing")
    ax.set_ylim(bw * x[0] / 2, tensor * 3)
    ax.set_xlim(x[0], x[-1])
    ax.legend(loc="lower right", fontsize=SMALL, frameon=False)
    return fig
