"""A GPU and one SM; the grid -> block -> warp -> thread hierarchy mapped onto SMs."""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from ..hardware import Accelerator
from ..memory_access import WARP_SIZE
from .primitives import arrow, box, missing
from .style import SMALL, accelerator, canvas, rate_text, size_text

#: schedulers (sub-partitions) per SM: four on NVIDIA since Volta, four SIMDs per CU on AMD CDNA.
#: The accelerator data file has no such field, so the diagram states it as an architectural constant.
SUBPARTITIONS = 4


def sm_grid_shape(sm_count: int) -> tuple[int, int]:
    """Rows and columns of the SM grid drawn for ``sm_count`` SMs: ``cols = ceil(sqrt(1.3 sm_count))``,
    ``rows = ceil(sm_count / cols)`` (exactly ``sm_count`` boxes are drawn, the last row may be short)."""
    if sm_count < 1:
        raise ValueError(f"sm_count must be a positive integer, got {sm_count!r}")
    cols = math.ceil(math.sqrt(1.3 * sm_count))
    return math.ceil(sm_count / cols), cols


def _chip(ax, a: Accelerator) -> None:
    """Left half: the SM grid, the L2 and the HBM of ``a``."""
    if a.sm_count is None:
        missing(ax, 0.2, 6.0, "SM count")
    else:
        rows, cols = sm_grid_shape(a.sm_count)
        cell = min(5.4 / cols, 4.4 / rows)
        for i in range(a.sm_count):
            r, c = divmod(i, cols)
            box(ax, 0.3 + c * cell, 8.6 - (r + 1) * cell, cell * 0.86, cell * 0.86, "", "compute", gid="sm", lw=0.4)
        ax.text(3.0, 8.75, f"{a.sm_count} SMs", ha="center", va="bottom", fontsize=10, weight="bold", gid="sm-count")
    l2 = f"L2 cache {size_text(a.l2_cache)}" if a.l2_cache is not None else "L2 cache"
    box(ax, 0.3, 2.9, 5.4, 0.9, l2, "memory", gid="l2")
    if a.l2_cache is None:
        missing(ax, 0.4, 2.6, "L2 size")
    box(ax, 0.3, 0.3, 5.4, 1.2, f"HBM {size_text(a.memory_capacity)}", "slow", gid="hbm")
    arrow(ax, (3.0, 1.5), (3.0, 2.9), f"{rate_text(a.memory_bandwidth, 'TB/s')}", both=True)
    arrow(ax, (3.0, 3.8), (3.0, 4.15), "", both=True)


def _sm(ax, a: Accelerator) -> None:
    """Right half: one SM with its sub-partitions, register file, tensor cores and shared memory/L1."""
    box(ax, 6.6, 0.3, 5.1, 8.4, "", "host", gid="sm-zoom")
    ax.text(9.15, 8.45, "one SM", ha="center", va="center", fontsize=10, weight="bold")
    rf = a.register_file_per_sm
    per = size_text(rf / SUBPARTITIONS) if rf is not None else None
    w = 2.35
    for q in range(SUBPARTITIONS):
        x, y = 6.8 + (q % 2) * (w + 0.2), 5.3 - (q // 2) * 2.6
        box(ax, x, y, w, 2.4, "", "plain", gid="subpartition")
        box(ax, x + 0.1, y + 1.75, w - 0.2, 0.5, "warp scheduler", "host", size=7.5)
        box(ax, x + 0.1, y + 1.05, w - 0.2, 0.55, f"registers {per}" if per else "registers", "memory", size=7.5)
        box(ax, x + 0.1, y + 0.15, (w - 0.3) / 2, 0.75, "tensor\ncore", "compute", size=7, gid="tensor-core")
        box(ax, x + 0.2 + (w - 0.3) / 2, y + 0.15, (w - 0.3) / 2, 0.75, "FP32\nunits", "plain", size=7)
    smem = a.shared_memory_per_sm
    label = f"shared memory / L1: {size_text(smem)}" if smem is not None else "shared memory / L1"
    box(ax, 6.8, 0.5, 4.9 - 0.2, 2.0, label, "memory", size=SMALL, gid="smem")
    if smem is None:
        missing(ax, 6.9, 0.8, "size")
    if rf is None:
        missing(ax, 6.75, 8.0, "register file size")
    ax.plot([5.8, 6.6], [8.6 - 0.1, 8.6], color="0.4", lw=0.8, ls="--")
    ax.plot([5.8, 6.6], [7.9, 0.3], color="0.4", lw=0.8, ls="--")


def gpu_and_sm(accel: Accelerator | str | None = None) -> Figure:
    """Left: the chip, ``sm_count`` SM boxes above its L2 and HBM (sizes and bandwidth from ``accel``).
    Right: one SM, four sub-partitions (warp scheduler, a quarter of the register file, a tensor core,
    FP32 units) above the shared memory / L1 (``shared_memory_per_sm``)."""
    a = accelerator(accel)
    fig, ax = canvas(7.0, 5.6, (0, 12), (0, 9.4), f"{a.name}: the chip and one SM")
    _chip(ax, a)
    _sm(ax, a)
    return fig


def _grid_panel(ax, blocks: int, warps: int) -> None:
    """The grid of ``blocks`` blocks; block 0 opened into ``warps`` warps; warp 0 into 32 lanes."""
    cols = min(blocks, 4)
    rows = math.ceil(blocks / cols)
    ax.text(0.2, 9.2, f"grid of {blocks} blocks = {blocks} Triton programs", fontsize=SMALL,
            va="center", weight="bold")
    for b in range(blocks):
        r, c = divmod(b, cols)
        box(ax, 0.2 + c * 1.3, 8.5 - (r + 1) * 0.8, 1.15, 0.65, f"block {b}", "compute" if b == 0 else "plain",
            size=7.5, gid="block")
    top = 8.5 - rows * 0.8 - 0.3
    ax.text(0.2, top, f"block 0 = {warps} warps of {WARP_SIZE} threads", fontsize=SMALL, va="center", weight="bold")
    for wi in range(warps):
        box(ax, 0.2 + wi * (5.0 / warps), top - 0.95, 5.0 / warps - 0.1, 0.7, f"warp {wi}",
            "memory" if wi == 0 else "plain", size=7.5, gid="warp")
    ytop = top - 1.4
    ax.text(0.2, ytop, f"warp 0 = {WARP_SIZE} threads (lanes) in lockstep", fontsize=SMALL, va="center", weight="bold")
    lane = 5.0 / 16
    for t in range(WARP_SIZE):
        r, c = divmod(t, 16)
        box(ax, 0.2 + c * lane, ytop - 0.45 - (r + 1) * lane, lane * 0.9, lane * 0.9, "", "done", gid="lane", lw=0.3)


def thread_hierarchy(accel: Accelerator | str | None = None, blocks: int = 8, threads_per_block: int = 128) -> Figure:
    """Left: a grid of ``blocks`` blocks (a CUDA thread block is a Triton *program*), block 0 opened into
    ``threads_per_block / 32`` warps and warp 0 into its 32 lanes. Right: blocks dealt to the SMs of
    ``accel`` (block ``b`` on SM ``b mod sm_count``; the hardware scheduler's real order is not in the
    course's data, only that a block stays on one SM)."""
    a = accelerator(accel)
    if blocks < 1 or threads_per_block < WARP_SIZE or threads_per_block % WARP_SIZE:
        raise ValueError(f"need blocks >= 1 and threads_per_block a multiple of {WARP_SIZE}, "
                         f"got {blocks} and {threads_per_block}")
    warps = threads_per_block // WARP_SIZE
    fig, ax = canvas(7.0, 4.9, (0, 12), (0, 9.6), f"Grid, block, warp, thread on the {a.name}")
    _grid_panel(ax, blocks, warps)
    shown = min(blocks, 4) if a.sm_count is None else min(blocks, a.sm_count, 4)
    ax.text(6.4, 9.2, f"SMs (of {a.sm_count})" if a.sm_count else "SMs (count not in the course's data)",
            fontsize=SMALL, weight="bold", va="center")
    for s in range(shown):
        y = 8.4 - s * 2.0
        box(ax, 6.4, y - 1.5, 5.2, 1.7, "", "host", gid="sm")
        ax.text(6.5, y + 0.0, f"SM {s}", fontsize=SMALL, va="top")
        mine = [b for b in range(blocks) if b % (a.sm_count or shown) == s]
        for j, b in enumerate(mine[:3]):
            box(ax, 7.4 + j * 1.4, y - 1.3, 1.25, 0.9, f"block {b}", "compute" if b == 0 else "plain", size=7.5)
    if blocks > shown:
        ax.text(9.0, 0.25, "a block never moves between SMs", fontsize=SMALL, ha="center", style="italic")
    return fig
