"""Animations where a sequence is the idea: the ring all-reduce and the FlashAttention sweep.

Each returns a :class:`matplotlib.animation.FuncAnimation`; :func:`to_html` turns one into a
self-contained HTML player (frames embedded as PNG, with play controls) that a chapter displays.
The still frame for print is the matching static diagram (:func:`~.ring.ring_allreduce`,
:func:`~.attention.flash_sweep`).
"""

from __future__ import annotations

import base64
import io
import re

from matplotlib.animation import FuncAnimation
from matplotlib.figure import Figure

from .attention import draw_sweep, sweep_blocks
from .ring import draw_state, ring_schedule
from .style import canvas, new_figure


def ring_animation(p: int = 4, interval: int = 900) -> FuncAnimation:
    """One frame per state of a ``p``-rank ring all-reduce (start and ``2 (p - 1)`` steps)."""
    states = ring_schedule(p)
    fig = new_figure(4.2, 3.6, dpi=90)
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


#: the player's button icons as plain characters (matplotlib links Font Awesome from a CDN; the book is offline)
_ICONS = {"fa-minus": "\u2212", "fa-fast-backward": "\u23ee", "fa-step-backward": "\u25c1|",
          "fa-play fa-flip-horizontal": "\u25c0", "fa-pause": "\u23f8", "fa-play": "\u25b6",
          "fa-step-forward": "|\u25b7", "fa-fast-forward": "\u23ed", "fa-plus": "+"}


def to_html(anim: FuncAnimation, alt: str, default_mode: str = "once") -> str:
    """The animation as self-contained HTML with play controls (matplotlib's ``to_jshtml``): no request
    leaves the page (the Font Awesome link is dropped, icons become characters) and the frame image
    carries ``alt``, a sentence saying what the animation shows."""
    if len(alt.split()) < 5:
        raise ValueError(f"alt text should be a sentence saying what the animation shows, got {alt!r}")
    html = anim.to_jshtml(default_mode=default_mode)
    html = re.sub(r"<link rel=\"stylesheet\"\s*href=\"https?://[^\"]*font-awesome[^\"]*\">", "", html)
    html = re.sub(r'<i class="fa ([^"]+)"></i>', lambda m: _ICONS.get(m.group(1), "?"), html)
    alt_attr = alt.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    return html.replace('<img id="_anim_img', f'<img alt="{alt_attr}" style="max-width: 100%; height: auto" id="_anim_img')


class Player:
    """An animation for a notebook page: HTML with play controls for the web, a still PNG for print
    (Jupyter picks the representation each output format can show)."""

    def __init__(self, anim: FuncAnimation, still: Figure, alt: str) -> None:
        self.html = to_html(anim, alt)
        buf = io.BytesIO()
        still.savefig(buf, format="png", dpi=150, bbox_inches="tight")
        self.png = base64.b64encode(buf.getvalue()).decode()
        self.alt = alt

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return {"text/html": self.html, "image/png": self.png, "text/plain": self.alt}
