"""What a kernel touched: a map of an output with the elements written outside it, or never written."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .style import BLUE, LIGHT, ORANGE, SMALL, VERMILLION

#: categories of a cell in the map, and their colours (light, mid, dark: apart in greyscale too)
WRITTEN, UNWRITTEN, OUTSIDE, BEFORE = 0, 1, 2, 3
COLOURS = (LIGHT, ORANGE, BLUE, VERMILLION)
LABELS = ("written", "never written", "written outside (past the end)", "written outside (before the start)")


def touched_map(shape: Sequence[int], outside: Sequence[int] = (), unwritten: Sequence[int] = ()) -> np.ndarray:
    """A 2-D map of categories: the output's ``rows x cols`` elements (a 1-D output is folded into rows of
    ``min(n, 64)``), then rows below for stores past the end; ``outside`` are offsets relative to the first
    element (negative: before it, drawn in a row above), ``unwritten`` flat indices inside."""
    if len(shape) == 1:
        n = int(shape[0])
        cols = max(1, min(n, 64))
        rows = math.ceil(n / cols) if n else 0
    elif len(shape) == 2:
        rows, cols = int(shape[0]), int(shape[1])
        n = rows * cols
    else:
        raise ValueError(f"expected a 1-D or 2-D output shape, got {tuple(shape)}")
    if cols < 1:
        raise ValueError(f"cannot draw an empty output of shape {tuple(shape)}")
    after = [o for o in outside if o >= n]
    before = [o for o in outside if o < 0]
    extra_below = (max(after) // cols - rows + 1) if after else 0
    extra_above = math.ceil(-min(before) / cols) if before else 0
    grid = np.full((extra_above + rows + extra_below, cols), np.nan)
    grid[extra_above:extra_above + rows] = WRITTEN
    flat = grid[extra_above:extra_above + rows].reshape(-1)
    flat[n:] = np.nan  # a folded 1-D output's short last row
    for i in unwritten:
        flat[int(i)] = UNWRITTEN
    grid[extra_above:extra_above + rows] = flat.reshape(rows, cols)
    for o in after:
        grid[extra_above + o // cols, o % cols] = OUTSIDE
    for o in before:
        r = extra_above + math.floor(o / cols)
        grid[r, o % cols] = BEFORE
    return grid


def touched_grid(shape: Sequence[int], outside: Sequence[int] = (), unwritten: Sequence[int] = (),
                 name: str = "the output") -> Figure:
    """A small picture of :func:`touched_map`: ``name``'s elements (light: written, orange: never written),
    the stores outside it (dark) in rows past its end or before its start, a line at its edges."""
    grid = touched_map(shape, outside, unwritten)
    h, w = grid.shape
    aspect = h / w
    fig = Figure(figsize=(4.2, min(4.2, max(1.6, 3.6 * aspect + 0.9))), dpi=90)
    ax = fig.add_axes((0.08, 0.28, 0.88, 0.6))
    ax.imshow(grid, cmap=ListedColormap(COLOURS), vmin=0, vmax=3, interpolation="nearest", aspect="auto")
    n_before = int(np.sum(grid == BEFORE))
    top = math.ceil(n_before / w) if n_before else 0
    rows = int(shape[0]) if len(shape) == 2 else math.ceil(int(shape[0]) / w)
    ax.axhline(top - 0.5, color="black", lw=1.2)
    ax.axhline(top + rows - 0.5, color="black", lw=1.2)
    ax.set_xticks([])
    ax.set_yticks([])
    counts = [int(np.sum(grid == c)) for c in range(4)]
    ax.set_title(f"{name} ({' x '.join(str(int(s)) for s in shape)}): what your kernel wrote", fontsize=SMALL)
    handles = [Patch(facecolor=COLOURS[c], edgecolor="black", label=f"{LABELS[c]}: {counts[c]}")
               for c in range(4) if counts[c] or c == WRITTEN]
    fig.legend(handles=handles, loc="lower center", fontsize=7.5, ncol=2, frameon=False)
    return fig
