"""A ring all-reduce: reduce-scatter then all-gather, chunk by chunk."""

from __future__ import annotations

import math

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..comm import allreduce_bytes_per_gpu
from ..units import Q_
from .style import BLACK, SMALL, TEXT, new_figure


def ring_schedule(p: int) -> list[list[frozenset[int]]]:
    """States of the ring: ``states[t][r][c]`` is the set of ranks whose chunk ``c`` has been added into
    rank ``r``'s copy after step ``t`` (``t = 0`` before any step; ``2 (p - 1)`` steps follow).

    Reduce-scatter step ``s`` (0-based, ``s < p - 1``): rank ``r`` sends chunk ``(r - s) mod p`` to rank
    ``r + 1``, which adds it to its own. All-gather step ``s``: rank ``r`` sends chunk
    ``(r + 1 - s) mod p``, complete, and rank ``r + 1`` overwrites its copy with it.
    """
    if not isinstance(p, int) or p < 2:
        raise ValueError(f"a ring needs p >= 2 ranks, got {p!r}")
    state = [[frozenset({r}) for _ in range(p)] for r in range(p)]
    states = [[list(row) for row in state]]
    for s in range(2 * (p - 1)):
        new = [list(row) for row in state]
        for r in range(p):
            dst = (r + 1) % p
            if s < p - 1:
                c = (r - s) % p
                new[dst][c] = state[dst][c] | state[r][c]
            else:
                c = (r + 1 - (s - (p - 1))) % p
                new[dst][c] = state[r][c]
        state = new
        states.append([list(row) for row in state])
    return [[list(row) for row in st] for st in states]  # type: ignore[misc]


def draw_state(ax: Axes, p: int, states: list, t: int, *, small: bool = False) -> None:
    """Ranks as rows, chunks as columns; a cell's shade is how many ranks' values it holds (1 .. p)."""
    import numpy as np

    img = np.array([[len(states[t][r][c]) for c in range(p)] for r in range(p)], dtype=float)
    ax.imshow(img, cmap="Blues", vmin=0, vmax=p, gid="ring-state")
    for r in range(p):
        for c in range(p):
            n = int(img[r, c])
            ax.text(c, r, f"{n}", ha="center", va="center", fontsize=7 if small else SMALL,
                    color="white" if n > p / 2 else BLACK)
    ax.set_xticks(range(p))
    ax.set_yticks(range(p))
    ax.set_xticklabels([f"c{c}" for c in range(p)] if not small else [""] * p, fontsize=7)
    ax.set_yticklabels([f"rank {r}" for r in range(p)] if not small else [""] * p, fontsize=7)
    phase = "start" if t == 0 else ("reduce-scatter" if t <= p - 1 else "all-gather")
    ax.set_title(f"{phase}\nstep {t}" if t else "start", fontsize=7.5 if small else TEXT, gid="ring-step")


def ring_allreduce(p: int = 4, nbytes: object = None) -> Figure:
    """Small multiples, one per state of a ``p``-rank ring (start, then ``p - 1`` reduce-scatter and
    ``p - 1`` all-gather steps): ranks as rows, chunks as columns, each cell shaded by how many ranks'
    contributions it holds. The footer gives the bytes each rank sends, ``2 (p - 1) / p`` of the
    buffer (:func:`mlsys.comm.allreduce_bytes_per_gpu`)."""
    states = ring_schedule(p)
    n = len(states)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig = new_figure(7.0, 1.9 * rows + 0.6, dpi=110)
    fig.suptitle(f"Ring all-reduce on {p} ranks: {p - 1} reduce-scatter steps, then {p - 1} all-gather steps",
                 fontsize=10)
    for t in range(n):
        ax = fig.add_subplot(rows, cols, t + 1)
        draw_state(ax, p, states, t, small=t > 0)
    size = Q_(1, "GiB") if nbytes is None else nbytes
    sent = allreduce_bytes_per_gpu(size, p)
    fig.text(0.5, 0.01, f"numbers: ranks whose values a chunk holds. Each rank sends 2(p-1)/p = "
             f"{sent.to('byte').m / Q_(size).to('byte').m:.2f} of the buffer", ha="center", fontsize=SMALL)
    fig.subplots_adjust(hspace=0.6, top=0.82, bottom=0.1)
    return fig
