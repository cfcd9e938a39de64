"""The course's plot style and roofline plots.

``style()`` is a context manager (and ``apply_style()`` a global switch) for the course's
look; ``roofline_plot`` draws one or more rooflines (datasheet or measured) on log-log axes,
with kernels placed on them as points at (intensity, achieved FLOP/s).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from .hardware import Accelerator
from .roofline import Roof, roof_of
from .units import as_quantity

__all__ = ["STYLE", "PALETTE", "style", "apply_style", "Point", "roofline_plot"]

#: colour-blind-safe palette (Okabe & Ito, 2008)
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]

STYLE: dict[str, object] = {
    "figure.figsize": (7.0, 4.2),
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linestyle": "-",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 8.5,
    "legend.frameon": False,
    "lines.linewidth": 1.8,
}


@contextlib.contextmanager
def style() -> Iterator[None]:
    """Context manager: draw with the course's style inside the ``with`` block."""
    with plt.rc_context(STYLE):
        yield


def apply_style() -> None:
    """Switch the course's style on for the rest of the session (chapters call this once).

    In a notebook it also asks for figures at twice the pixel density (``retina``), shown at
    their usual size, so they stay sharp on high-resolution screens and phones.
    """
    plt.rcParams.update(STYLE)
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # plain Python: nothing to display inline
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")


@dataclass(frozen=True)
class Point:
    """A kernel placed on a roofline: its intensity (FLOP/byte) and achieved rate (FLOP/s)."""

    label: str
    intensity: object
    performance: object
    marker: str = "o"


def roofline_plot(
    roofs: Sequence[Accelerator | str | Roof] | Accelerator | str | Roof,
    dtype: str = "bf16",
    points: Iterable[Point] = (),
    ax: plt.Axes | None = None,
    intensity_range: tuple[float, float] | None = None,
    title: str | None = None,
) -> plt.Axes:
    """Draw rooflines ``min(peak, bandwidth * I)`` for each roof, and ``points`` on top.

    ``roofs`` are accelerators (objects or names: their datasheet roof for ``dtype``) or
    :class:`~mlsys.roofline.Roof` objects (e.g. measured roofs). Axes are FLOP/byte (x) and
    TFLOP/s (y), both logarithmic. Each ridge point is marked. Returns the axes.
    """
    if isinstance(roofs, (Accelerator, str, Roof)):
        roofs = [roofs]
    roof_list = [roof_of(r, dtype) for r in roofs]
    if not roof_list:
        raise ValueError("roofline_plot needs at least one accelerator or Roof")
    pts = list(points)
    if ax is None:
        with style():
            _, ax = plt.subplots()
    ridges = [r.ridge_point.m for r in roof_list]
    pt_i = [as_quantity(p.intensity, "FLOP/byte", f"{p.label}.intensity").m for p in pts]
    lo_default = min([min(ridges) / 100, *[i / 2 for i in pt_i]])
    hi_default = max([max(ridges) * 30, *[i * 2 for i in pt_i]])
    lo, hi = intensity_range or (lo_default, hi_default)
    x = np.logspace(np.log10(lo), np.log10(hi), 400)
    for i, roof in enumerate(roof_list):
        color = PALETTE[i % len(PALETTE)]
        peak = roof.peak.to("TFLOP/s").m
        bw = roof.bandwidth.to("TB/s").m
        y = np.minimum(peak, bw * x)
        ax.plot(x, y, color=color, label=roof.label or f"roof {i}")
        ax.plot([roof.ridge_point.m], [peak], marker="|", markersize=12, color=color)
    for p, i_val in zip(pts, pt_i, strict=True):
        perf = as_quantity(p.performance, "FLOP/s", f"{p.label}.performance").to("TFLOP/s").m
        ax.scatter([i_val], [perf], marker=p.marker, s=36, zorder=3, color="#333333")
        ax.annotate(p.label, (i_val, perf), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable throughput (TFLOP/s)")
    if title:
        ax.set_title(title)
    ax.legend(loc="lower right")
    return ax
