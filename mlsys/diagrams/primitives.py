"""Drawing primitives shared by the diagrams: boxes, arrows, grids of cells, memory levels, timeline bars.

All take an axes and data coordinates; colours come from :data:`mlsys.diagrams.style.ROLES` so that
every diagram speaks the same visual language (orange = compute, sky/hatched = memory, ...).
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.patches import FancyArrowPatch, Rectangle

from .style import BLACK, GREY, MISSING, ROLES, SMALL, TEXT


def box(ax: Axes, x: float, y: float, w: float, h: float, label: str = "", role: str = "plain", *,
        size: float = TEXT, gid: str | None = None, lw: float = 1.0, va: str = "center") -> Rectangle:
    """A rectangle with lower-left ``(x, y)``, filled for ``role``, with ``label`` centred in it.

    ``gid`` tags the patch (tests count patches by gid); the label text gets the same gid.
    """
    r = ROLES[role]
    patch = Rectangle((x, y), w, h, facecolor=r.face, edgecolor=BLACK, hatch=r.hatch or None, lw=lw)
    patch.set_gid(gid)
    ax.add_patch(patch)
    if label:
        ty = y + h / 2 if va == "center" else y + h - 0.08 * h
        t = ax.text(x + w / 2, ty, label, ha="center", va=va, fontsize=size, color=r.text,
                    bbox={"facecolor": r.face, "edgecolor": "none", "pad": 1.0} if r.hatch else None)
        t.set_gid(gid)
    return patch


def arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], label: str = "", *,
          color: str = BLACK, size: float = SMALL, both: bool = False, lw: float = 1.4) -> FancyArrowPatch:
    """An arrow from ``start`` to ``end`` with an optional label at its middle."""
    a = FancyArrowPatch(start, end, arrowstyle="<|-|>" if both else "-|>", mutation_scale=12, color=color, lw=lw)
    ax.add_patch(a)
    if label:
        ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2, label, fontsize=size, ha="center", va="center",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.0})
    return a


def cells(ax: Axes, x: float, y: float, rows: int, cols: int, cell: float, roles: Sequence[Sequence[str]] | None = None,
          *, gid: str | None = None, lw: float = 0.5) -> list[Rectangle]:
    """A ``rows x cols`` grid of square cells of side ``cell``, top row at the top, lower-left ``(x, y)``.

    ``roles[i][j]`` fills cell (row i from the top, column j); default "plain".
    """
    out = []
    for i in range(rows):
        for j in range(cols):
            role = roles[i][j] if roles is not None else "plain"
            r = ROLES[role]
            p = Rectangle((x + j * cell, y + (rows - 1 - i) * cell), cell, cell, facecolor=r.face,
                          edgecolor=GREY, hatch=r.hatch or None, lw=lw)
            p.set_gid(gid)
            ax.add_patch(p)
            out.append(p)
    return out


def missing(ax: Axes, x: float, y: float, what: str = "", *, size: float = SMALL) -> None:
    """Write "<what>: not in the course's data" in grey at ``(x, y)``: a figure the data lacks."""
    ax.text(x, y, f"{what}: {MISSING}" if what else MISSING, fontsize=size, color=GREY, style="italic",
            ha="left", va="center", gid="missing")


def bar(ax: Axes, lane: float, start: float, length: float, label: str = "", role: str = "compute", *,
        height: float = 0.7, size: float = SMALL, gid: str | None = None) -> Rectangle:
    """A timeline bar on row ``lane`` from ``start`` for ``length`` (axes units), labelled inside."""
    return box(ax, start, lane - height / 2, length, height, label, role, size=size, gid=gid)
