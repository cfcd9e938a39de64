"""A systolic array at one cycle: which processing elements do a multiply-accumulate."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .. import systolic as model
from .primitives import arrow, cells
from .style import SMALL, canvas


def systolic(m: int = 6, k: int = 4, n: int = 4, cycle: int | None = None, dataflow: str = "weight") -> Figure:
    """A ``k x n`` weight-stationary array (or the array :func:`mlsys.systolic.simulate` uses for
    ``dataflow``) at one ``cycle`` (default: the middle one) of an ``(m, k) @ (k, n)`` product, PEs doing a
    useful MAC shaded, rows of A entering from the left and partial sums leaving at the bottom."""
    sim = model.simulate(np.ones((m, k)), np.ones((k, n)), dataflow)
    t = sim.cycles // 2 if cycle is None else cycle
    if not 0 <= t < sim.cycles:
        raise ValueError(f"cycle must be in 0 .. {sim.cycles - 1}, got {cycle}")
    frame = sim.active[t]
    rows, cols = frame.shape
    fig, ax = canvas(5.5, 4.0, (-2.6, cols + 2.6), (-1.6, rows + 1.3),
                     f"{sim.dataflow}-stationary array, cycle {t} of {sim.cycles}:\n{int(frame.sum())} of "
                     f"{rows * cols} PEs doing a MAC")
    roles = [["c" if frame[i, j] else "plain" for j in range(cols)] for i in range(rows)]
    cells(ax, 0, 0, rows, cols, 1.0, roles, gid="pe", lw=0.8)
    arrow(ax, (-2.2, rows / 2), (-0.1, rows / 2), "A in")
    arrow(ax, (cols / 2, -0.1), (cols / 2, -1.3), "")
    ax.text(cols / 2 + 0.2, -0.9, "sums out", fontsize=SMALL, va="center")
    ax.text(cols + 0.2, rows + 0.5, f"busy over the whole run: {sim.utilisation:.0%}", fontsize=SMALL, ha="right")
    return fig
