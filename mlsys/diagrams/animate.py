"""Animations where a sequence is the idea: the ring all-reduce and the FlashAttention sweep.

Each returns a :class:`matplotlib.animation.FuncAnimation`; :func:`to_html` turns one into a
self-contained HTML player (frames embedded as PNG, with play controls) that a chapter displays.
The still frame for print is the matching static diagram (:func:`~.ring.ring_allreduce`,
:func:`~.attention.flash_sweep`).
"""

from __future__ import annotations

from matplotlib.animation import FuncAnimation
from matplotlib.figure import Figure

from .attention import draw_sweep, sweep_blocks
from .ring import draw_state, ring_schedule
from .style import canvas


def ring_animation(p: int = 4, interval: int = 900) -> FuncAnimation:
    """One frame per state of a ``p``-rank ring all-reduce (start and ``2 (p - 1)`` steps)."""
    states = ring_schedule(p)
    fig = Figure(figsize=(4.2, 3.6), dpi=90)
    ax = fig.add_axes((0.2, 0.08, 0.75, 0.75))

    def frame(t: int) -> list:
        ax.clear()
        draw_state(ax, p, states, t)
        return []

    frame(0)
    return FuncAnimation(fig, frame, frames=len(states), interval=interval, blit=False)


def flash_animation(seq_len: int = 1024, block_m: int = 128, block_n: int = 128, row: int = 3,
                    causal: bool = False, interval: int = 700) -> FuncAnimation:
    """One frame per K/V block visited by Q block ``row`` (see :func:`~.attention.flash_sweep`)."""
    visits = sweep_blocks(seq_len, block_m, block_n, row, causal)
    fig, ax = canvas(6.0, 3.8, (0, 12), (0, 8.3), "FlashAttention: one Q block sweeps the K/V blocks")

    def frame(step: int) -> list:
        for patch in list(ax.patches):
            patch.remove()
        for text in list(ax.texts):
            text.remove()
        draw_sweep(ax, seq_len, block_m, block_n, row, step, causal)
        return []

    frame(0)
    return FuncAnimation(fig, frame, frames=visits, interval=interval, blit=False)


def to_html(anim: FuncAnimation, default_mode: str = "once") -> str:
    """The animation as self-contained HTML with play controls (matplotlib's ``to_jshtml``)."""
    return anim.to_jshtml(default_mode=default_mode)
