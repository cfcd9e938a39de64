"""The diagrams' house style: palette, fills, hatches, font sizes, and a blank canvas.

Colours are Okabe & Ito's colour-blind-safe set; each role also has its own lightness and hatch,
so two roles stay apart in greyscale print. Font sizes are chosen for a figure shown 390 px wide
(a phone): a 7-inch-wide figure is then scaled by 390 / (7 * 110) ~ 0.5, so 10 pt text still
renders at about 10 px.
"""

from __future__ import annotations

from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..hardware import Accelerator, get

#: the course's reference GPU (the chapters' ``hardware.get("H100")``)
REFERENCE = "H100"

#: what a diagram writes where the course's data lacks a figure
MISSING = "not in the course's data"

#: Okabe-Ito: blue, vermillion, bluish green, reddish purple, orange, sky blue, yellow, black
BLUE, VERMILLION, GREEN, PURPLE, ORANGE, SKY, YELLOW, BLACK = (
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
GREY = "#777777"
LIGHT = "#F2F2F2"

#: font sizes (points) readable at 390 px display width
TEXT, SMALL, TITLE = 10, 8.5, 11


@dataclass(frozen=True)
class Role:
    """How one kind of thing is filled: a colour, a hatch (for greyscale) and a text colour."""

    face: str
    hatch: str
    text: str = BLACK


#: one fill per role; lightness and hatch differ between roles so greyscale keeps them apart
ROLES: dict[str, Role] = {
    "compute": Role(ORANGE, ""),
    "memory": Role(SKY, "//"),
    "slow": Role(BLUE, "", "white"),
    "host": Role(LIGHT, ""),
    "a": Role(SKY, "//"),
    "b": Role(YELLOW, "\\\\"),
    "c": Role(ORANGE, ""),
    "done": Role(GREEN, "", "white"),
    "bad": Role(VERMILLION, "xx", "white"),
    "missing": Role("white", "..", GREY),
    "idle": Role("white", "xx", VERMILLION),
    "plain": Role("white", ""),
}


def accelerator(accel: Accelerator | str | None) -> Accelerator:
    """``accel`` as an :class:`Accelerator` (a name is looked up; ``None`` is :data:`REFERENCE`)."""
    if accel is None:
        return get(REFERENCE)
    if isinstance(accel, Accelerator):
        return accel
    if isinstance(accel, str):
        return get(accel)
    raise TypeError(f"expected an Accelerator or its name, got {accel!r:.80}")


def new_figure(width: float, height: float, dpi: float = 110) -> Figure:
    """A figure of ``width x height`` inches on its own Agg canvas (no pyplot: nothing is shown twice, and
    it can be drawn and measured, e.g. by :func:`mlsys.viz.label_collisions`)."""
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def canvas(width: float, height: float, xlim: tuple[float, float], ylim: tuple[float, float],
           title: str | None = None, *, equal: bool = True) -> tuple[Figure, Axes]:
    """A figure of ``width x height`` inches with one frameless axes in data units ``xlim x ylim``
    (equal aspect unless ``equal=False``), for drawing boxes and arrows."""
    fig = new_figure(width, height)
    ax = fig.add_axes((0.01, 0.01, 0.98, 0.90 if title else 0.98))
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    if equal:
        ax.set_aspect("equal", adjustable="box")
    ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=TITLE, y=0.985)
    return fig, ax


def size_text(q: object) -> str:
    """A binary size as people say it: ``256 KiB``, ``50 MiB``, ``80 GiB`` (no decimals when whole)."""
    b = float(q.to("byte").m)  # type: ignore[attr-defined]
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            v = b / scale
            return f"{v:.0f} {unit}" if abs(v - round(v)) < 1e-9 else f"{v:.1f} {unit}"
    return f"{b:.0f} B"


def rate_text(q: object, unit: str) -> str:
    """A rate in ``unit`` with three significant figures (``3.35 TB/s``, ``989 TFLOP/s``)."""
    v = float(q.to(unit).m)  # type: ignore[attr-defined]
    return f"{v:.3g} {unit}"
