"""The course's plot style and roofline plots.

``style()`` is a context manager (and ``apply_style()`` a global switch) for the course's
look; ``roofline_plot`` draws one or more rooflines (datasheet or measured) on log-log axes,
with kernels placed on them as points at (intensity, achieved FLOP/s). ``show()`` is how a
chapter puts a figure on the page: it first runs ``label_collisions()`` and refuses a figure
whose labels overlap each other or whose legend sits on its data.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import matplotlib
import matplotlib.axis
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.transforms import Bbox

from .hardware import Accelerator
from .roofline import Roof, roof_of
from .units import as_quantity

__all__ = ["STYLE", "PALETTE", "style", "apply_style", "Point", "roofline_plot", "plain_log_ticks",
           "label_collisions", "show", "FigureLayoutError"]

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


class FigureLayoutError(ValueError):
    """A figure whose labels collide: :func:`show` refuses it and names each collision."""


def _overlap(a: Bbox, b: Bbox) -> float:
    """Area of the intersection of two display-space boxes, in square pixels (0 when apart)."""
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(w, 0.0) * max(h, 0.0)


def _line_points(line: Line2D, per_segment: int = 24) -> np.ndarray:
    """Display-space points along a drawn line: its vertices, and points between them when it has a
    line style (so a reference line that crosses a legend counts even with no vertex inside it)."""
    xy = line.get_transform().transform(np.column_stack(line.get_data()).astype(float))
    xy = xy[np.isfinite(xy).all(axis=1)]
    if len(xy) < 2 or line.get_linestyle() in ("None", "none", "", " "):
        return xy
    t = np.linspace(0.0, 1.0, per_segment, endpoint=False)[None, :, None]
    seg = xy[:-1, None, :] + t * (xy[1:, None, :] - xy[:-1, None, :])
    return np.vstack([seg.reshape(-1, 2), xy[-1:]])


def label_collisions(fig: Figure | None = None, min_overlap: float = 0.1,
                     margin_px: float = 2.0) -> list[str]:
    """What overlaps in ``fig`` (default: the current figure), one sentence per collision:

    * two texts (annotations, ``ax.text`` labels) whose boxes overlap by more than ``min_overlap``
      of the smaller box's area (``mm 4096`` printed over ``mm 8192``);
    * a legend over a text, or over drawn data: a marker, a line's vertex or any point along a drawn
      line inside the legend's box shrunk by ``margin_px`` pixels on each side.

    Titles, axis labels and tick labels are laid out by matplotlib and not checked. The figure is
    drawn once (Agg) to know where everything is. An empty list means no collision.
    """
    fig = plt.gcf() if fig is None else fig
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems: list[str] = []
    for k, ax in enumerate(fig.axes):
        where = f"axes {k + 1}" + (f" ({ax.get_title()!r})" if ax.get_title() else "")
        texts = [t for t in ax.texts if t.get_visible() and t.get_text().strip()]
        boxes = [t.get_window_extent(renderer) for t in texts]
        for i in range(len(texts)):
            for j in range(i + 1, len(texts)):
                small = min(boxes[i].width * boxes[i].height, boxes[j].width * boxes[j].height)
                if small > 0 and _overlap(boxes[i], boxes[j]) > min_overlap * small:
                    problems.append(f"{where}: label {texts[i].get_text()!r} overlaps label {texts[j].get_text()!r}")
        legend = ax.get_legend()
        if legend is None or not legend.get_visible():
            continue
        lb = legend.get_window_extent(renderer)
        inner = Bbox.from_extents(lb.x0 + margin_px, lb.y0 + margin_px,
                                                        lb.x1 - margin_px, lb.y1 - margin_px)
        for t, b in zip(texts, boxes, strict=True):
            if _overlap(inner, b) > 0:
                problems.append(f"{where}: the legend covers label {t.get_text()!r}")
        hidden = 0
        for line in ax.lines:
            if line.get_visible() and len(line.get_xdata()):
                pts = _line_points(line)
                hidden += int(np.sum((pts[:, 0] > inner.x0) & (pts[:, 0] < inner.x1)
                                     & (pts[:, 1] > inner.y0) & (pts[:, 1] < inner.y1)))
        for coll in ax.collections:
            offsets = coll.get_offsets()
            if coll.get_visible() and len(offsets):
                pts = coll.get_offset_transform().transform(np.asarray(offsets, dtype=float))
                hidden += int(np.sum((pts[:, 0] > inner.x0) & (pts[:, 0] < inner.x1)
                                     & (pts[:, 1] > inner.y0) & (pts[:, 1] < inner.y1)))
        if hidden:
            problems.append(f"{where}: the legend sits on the data ({hidden} drawn points under it); "
                            "move it (loc=..., bbox_to_anchor=...) or make room (set_ylim)")
    return problems


def plain_log_ticks(axis: matplotlib.axis.Axis, subs: Sequence[float] | None = (1, 2, 5)) -> None:
    """Label a log-scaled ``axis`` (``ax.xaxis`` or ``ax.yaxis``) with plain numbers (``2``, ``50``,
    ``0.5``) instead of powers of ten: major ticks at ``subs`` times each power of ten (``None`` keeps
    the axis's own tick positions), no minor labels."""
    if axis.get_scale() != "log":
        raise ValueError(f"plain_log_ticks: the axis is {axis.get_scale()!r}-scaled; expected a log axis "
                         "(call set_xscale('log') or set_yscale('log') first)")
    if subs is not None:
        axis.set_major_locator(matplotlib.ticker.LogLocator(subs=tuple(subs)))
    axis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def show(fig: Figure | None = None) -> None:
    """Show ``fig`` (default: the current figure) as ``plt.show()`` does, after checking that no
    labels collide (:func:`label_collisions`); a figure with collisions raises
    :class:`FigureLayoutError` naming each one, so the book's build fails instead of printing it."""
    fig = plt.gcf() if fig is None else fig
    problems = label_collisions(fig)
    if problems:
        raise FigureLayoutError("the figure's labels collide:\n  " + "\n  ".join(problems))
    plt.show()
