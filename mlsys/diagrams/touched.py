"""What a kernel touched: a map of an output with the elements written outside it, or never written."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .style import BLUE, LIGHT, ORANGE, SMALL, VERMILLION, new_figure

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
    fig = new_figure(4.2, min(4.2, max(1.6, 3.6 * aspect + 0.9)), dpi=90, scale=1.0)
    ax = fig.add_axes((0.08, 0.28, 0.88, 0.6))
    ax.imshow(grid, cmap=ListedColormap(COLOURS), vmin=0, vmax=3, interpolation="nearest", aspect="auto")
    n_before = int(np.sum(grid == BEFORE))
    top = math.ceil(n_before / w) if n_before else 0
    rows = int(shape[0]) if len(shape) == 2 else math.ceil(int(shape[0]) / w)
    ax.axhline(top - 0.5, color="black", lw=1.2)
    ax.axhline(top + rows - 0.5, color="black", lw=1.2)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    counts = [int(np.sum(grid == c)) for c in range(4)]
    ax.set_title(f"{name} ({' x '.join(str(int(s)) for s in shape)}): what your kernel wrote", fontsize=SMALL)
    handles = [Patch(facecolor=COLOURS[c], edgecolor="black", label=f"{LABELS[c]}: {counts[c]}")
               for c in range(4) if counts[c] or c == WRITTEN]
    fig.legend(handles=handles, loc="lower center", fontsize=7.5, ncol=2, frameon=False)
    return fig


#: largest output drawn (elements); a bigger one is not drawn (the message alone stands)
MAX_ELEMENTS = 1 << 22
#: rows of guard drawn beyond each end of the output; stores further away are counted in the title only
MAX_EXTRA_ROWS = 16


def _as_2d(shape: Sequence[int]) -> tuple[int, ...]:
    """A shape the map can draw: 1-D and 2-D as they are, more dimensions folded into rows of the last one."""
    dims = tuple(int(s) for s in shape)
    if len(dims) <= 2:
        return dims
    return (math.prod(dims[:-1]), dims[-1])


def report_figures(report: object) -> list[Figure]:
    """One :func:`touched_grid` per tensor that a guard report (``mlsys.labkit.checks.GuardReport``: its
    ``shapes``, ``bad_stores`` and ``unwritten_at``) says was written outside or left unwritten.

    The report may come from a learner's process, so it is read defensively: tensors with more than
    :data:`MAX_ELEMENTS` elements or an odd shape are skipped, and stores more than
    :data:`MAX_EXTRA_ROWS` rows away from the tensor are left out of the picture.
    """
    shapes = getattr(report, "shapes", {}) or {}
    stores = getattr(report, "bad_stores", {}) or {}
    missing = getattr(report, "unwritten_at", {}) or {}
    figs = []
    for name in [n for n in shapes if n in stores or n in missing][:3]:
        shape = _as_2d(shapes[name])
        n = math.prod(shape)
        if not shape or len(shape) > 2 or not 0 < n <= MAX_ELEMENTS or min(shape) < 1:
            continue
        cols = shape[-1] if len(shape) == 2 else max(1, min(n, 64))
        reach = MAX_EXTRA_ROWS * cols
        outside = [int(o) for o in stores.get(name, []) if -reach <= int(o) < n + reach]
        inside = [int(i) for i in missing.get(name, []) if 0 <= int(i) < n]
        figs.append(touched_grid(shape, outside, inside, name=str(name)[:40]))
    return figs


def _display(fig: Figure) -> None:
    """Show ``fig`` in a running notebook as a PNG (whatever matplotlib backend is active; nothing outside one)."""
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:
        return
    if get_ipython() is not None:
        import io

        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=fig.dpi)
        display(Image(data=buf.getvalue(), format="png"))


def show_report(report: object) -> list[Figure]:
    """Draw and display :func:`report_figures` for a failed guarded call; return the figures. Drawing never
    raises: the check's message is the verdict, the picture only helps read it."""
    try:
        figs = report_figures(report)
    except Exception:  # noqa: BLE001 - a picture that cannot be drawn must not hide the message beside it
        return []
    for fig in figs:
        _display(fig)
    return figs
