"""Online softmax and FlashAttention's sweep of a Q block over the K/V blocks."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .primitives import box, cells
from .style import BLUE, GREY, ORANGE, SMALL, TEXT, VERMILLION, canvas, new_figure

#: a small row of scores for the online-softmax picture (any row works; this one's max is in block 2)
EXAMPLE_SCORES = (1.0, 2.5, 0.5, 1.5, 3.0, 0.0, 4.0, 2.0, 1.0, 3.5, 0.5, 2.5)


def running_max_sum(scores: Sequence[float], block: int) -> list[tuple[float, float]]:
    """(m, l) after each block of ``scores``: ``m`` the running max, ``l`` the running sum of
    ``exp(s - m)``, rescaled by ``exp(m_old - m_new)`` whenever the max grows."""
    if block < 1 or not len(scores):
        raise ValueError(f"need a positive block size and at least one score, got {block} and {len(scores)}")
    m, total = -math.inf, 0.0
    out = []
    for start in range(0, len(scores), block):
        blk = scores[start:start + block]
        new = max(m, max(blk))
        total = total * math.exp(m - new) + sum(math.exp(s - new) for s in blk)
        m = new
        out.append((m, total))
    return out


def online_softmax(scores: Sequence[float] = EXAMPLE_SCORES, block: int = 4) -> Figure:
    """The scores of one row as bars, cut into blocks read one at a time; after each block the running
    max ``m`` (a step line) and the running sum ``l`` (written under the block), so the last block's
    ``l`` is the softmax's denominator ``sum(exp(s - max))`` without a second pass."""
    state = running_max_sum(scores, block)
    fig = new_figure(7.0, 3.4, dpi=110)
    ax = fig.add_axes((0.08, 0.2, 0.9, 0.66))
    x = np.arange(len(scores))
    ax.bar(x, scores, color=ORANGE, edgecolor="black", lw=0.5, gid="score")
    for b, (m, total) in enumerate(state):
        lo, hi = b * block - 0.5, min((b + 1) * block, len(scores)) - 0.5
        ax.plot([lo, hi], [m, m], color=BLUE, lw=2.2, gid="running-max")
        ax.text((lo + hi) / 2, -0.9, f"m = {m:g}\nl = {total:.3f}", ha="center", va="top", fontsize=SMALL, gid="state")
        if b:
            ax.axvline(lo, color=GREY, lw=0.8, ls="--")
    ax.set_ylim(-0.2, max(scores) * 1.25)
    ax.set_xlim(-0.6, len(scores) - 0.4)
    ax.set_xticks([])
    ax.set_ylabel("score s", fontsize=TEXT)
    ax.set_title(f"Online softmax: blocks of {block}, running max m (blue) and sum l = sum exp(s - m)",
                 fontsize=10)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return fig


def sweep_blocks(seq_len: int, block_m: int, block_n: int, row: int, causal: bool = False) -> int:
    """K/V blocks Q block ``row`` visits: ``ceil(seq_len / block_n)``, or with a causal mask only those
    holding keys up to the block's last query: ``ceil(min(seq_len, (row + 1) block_m) / block_n)``."""
    if min(seq_len, block_m, block_n) < 1 or row < 0:
        raise ValueError("seq_len, block_m and block_n must be positive and row non-negative")
    last = min(seq_len, (row + 1) * block_m) if causal else seq_len
    return math.ceil(last / block_n)


def draw_sweep(ax: Axes, seq_len: int, block_m: int, block_n: int, row: int, step: int | None, causal: bool) -> None:
    """Draw the sweep on ``ax`` (used by :func:`flash_sweep` and by the animation's frames)."""
    rows, cols = math.ceil(seq_len / block_m), math.ceil(seq_len / block_n)
    visits = sweep_blocks(seq_len, block_m, block_n, row, causal)
    step = visits - 1 if step is None else step
    cell = 6.0 / max(rows, cols)
    roles = []
    for i in range(rows):
        line = []
        for j in range(cols):
            if causal and j * block_n > min(seq_len, (i + 1) * block_m) - 1:
                line.append("missing")
            elif i == row and j < step:
                line.append("done")
            elif i == row and j == step:
                line.append("c")
            else:
                line.append("plain")
        roles.append(line)
    cells(ax, 2.0, 0.5, rows, cols, cell, roles, gid="score-block", lw=0.6)
    box(ax, 0.4, 0.5 + (rows - 1 - row) * cell, 1.2, cell, "Q", "a", size=TEXT, gid="q-block")
    box(ax, 2.0 + step * cell, 6.9, cell, 0.8, "K", "b", size=TEXT, gid="k-block")
    ax.text(0.3, 7.95, f"S = Q K^T in {rows} x {cols} blocks; K/V block {step + 1} of {visits}", fontsize=SMALL,
            ha="left")
    box(ax, 8.6, 4.3, 3.2, 2.6, "", "host")
    ax.text(10.2, 6.55, "on chip (registers)", ha="center", fontsize=SMALL, weight="bold")
    for k, t in enumerate(("m: running max", "l: running sum", f"acc: {block_m} x d output")):
        ax.text(8.8, 5.9 - 0.5 * k, t, fontsize=SMALL, va="center")
    ax.text(8.6, 3.4, "each S block lives\non chip only: the\nN x N matrix is\nnever written to HBM",
            fontsize=SMALL, va="top", color=VERMILLION)


def flash_sweep(seq_len: int = 1024, block_m: int = 128, block_n: int = 128, row: int = 3, step: int | None = None,
                causal: bool = False) -> Figure:
    """The score matrix ``S = Q K^T`` cut into ``block_m x block_n`` blocks; Q block ``row`` sweeps the K/V
    blocks left to right (done: green, current: orange), keeping its running max, sum and output on chip.
    ``step`` picks the current K/V block (default: the last); ``causal`` greys the blocks a mask skips."""
    fig, ax = canvas(7.0, 4.4, (0, 12), (0, 8.3), "FlashAttention: one Q block sweeps the K/V blocks")
    draw_sweep(ax, seq_len, block_m, block_n, row, step, causal)
    return fig
