"""Tiling a matmul: a C tile and its strips, grouped against row-major tile order, software pipelining."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from ..hardware import Accelerator
from ..tiling import tile_grid
from .primitives import arrow, bar, box
from .style import BLUE, LIGHT, ORANGE, SKY, SMALL, TEXT, YELLOW, accelerator, canvas, new_figure


def tile_strips(m: int = 512, n: int = 512, k: int = 512, block_m: int = 128, block_n: int = 128,
                block_k: int = 64) -> Figure:
    """A, B and C laid out as in ``C = A @ B`` (A left of C, B above it) cut into tiles; one C tile
    (registers: its accumulator), its ``block_m x k`` strip of A and ``k x block_n`` strip of B, cut
    into ``ceil(k / block_k)`` chunks the k loop brings through shared memory, the current one darkest."""
    for name, v in (("m", m), ("n", n), ("k", k), ("block_m", block_m), ("block_n", block_n), ("block_k", block_k)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    grid = tile_grid(m, n, block_m, block_n)
    steps = math.ceil(k / block_k)
    s = 5.0 / max(m, n, k)  # drawing units per element
    fig, ax = canvas(7.0, 6.2, (-0.3, 11.6), (-1.7, 10.4), f"One tile of C = A @ B: {block_m} x {block_n}, "
                     f"k loop of {steps} steps of {block_k}")
    ox, oy = 5.6, 4.8 - m * s  # C's lower-left corner
    box(ax, ox, oy, n * s, m * s, "", "plain", gid="C")
    box(ax, ox - k * s - 0.4, oy, k * s, m * s, "", "plain", gid="A")
    box(ax, ox, 5.2, n * s, k * s, "", "plain", gid="B")
    for i in range(1, grid.tiles_m):
        ax.plot([ox, ox + n * s], [oy + m * s - i * block_m * s] * 2, color="0.6", lw=0.6)
    for j in range(1, grid.tiles_n):
        ax.plot([ox + j * block_n * s] * 2, [oy, oy + m * s], color="0.6", lw=0.6)
    ti, tj = min(1, grid.tiles_m - 1), min(1, grid.tiles_n - 1)  # the tile shown
    hm, wn = min(block_m, m - ti * block_m), min(block_n, n - tj * block_n)
    ty = oy + m * s - ti * block_m * s - hm * s
    box(ax, ox + tj * block_n * s, ty, wn * s, hm * s, "", "c", gid="c-tile")
    ax.text(ox + n * s + 0.15, ty + hm * s / 2, "C tile:\nregisters\n(fp32\naccumulator)", fontsize=SMALL,
            va="center")
    for step in range(steps):
        kw = min(block_k, k - step * block_k) * s
        cur = step == 1 if steps > 1 else step == 0
        box(ax, ox - k * s - 0.4 + step * block_k * s, ty, kw, hm * s, "", "a" if not cur else "slow", gid="a-chunk")
        box(ax, ox + tj * block_n * s, 5.2 + k * s - step * block_k * s - kw, wn * s, kw, "", "b" if not cur else "slow",
            gid="b-chunk")
    ax.text(ox - k * s / 2 - 0.4, oy + m * s + 0.15, f"A ({m} x {k})", ha="center", fontsize=TEXT)
    ax.text(ox + n * s / 2, 5.2 + k * s + 0.15, f"B ({k} x {n})", ha="center", fontsize=TEXT)
    ax.text(ox + n * s / 2, oy - 0.45, f"C ({m} x {n}): {grid.tiles_m} x {grid.tiles_n} tiles", ha="center",
            fontsize=TEXT)
    ax.text(ox - k * s / 2 - 0.4, ty - 0.35, f"strip of A: {hm} x {k}", ha="center", fontsize=SMALL)
    arrow(ax, (ox - k * s - 0.4, ty - 0.8), (ox - 0.4, ty - 0.8), "k loop")
    box(ax, -0.2, -1.6, 0.5, 0.4, "", "slow")
    ax.text(0.45, -1.4, f"this step's {block_k}-wide chunks of A and B: in shared memory", fontsize=SMALL, va="center")
    return fig


def tile_order(tiles_m: int, tiles_n: int, group_m: int = 1) -> list[tuple[int, int]]:
    """(row, column) of the tile that program ``pid`` computes, for pid = 0, 1, ...: Triton's grouped
    ordering (the matmul tutorial's ``GROUP_SIZE_M``); ``group_m = 1`` is row-major order.

    ``in_group = group_m * tiles_n``; ``first = (pid // in_group) * group_m``;
    ``size = min(tiles_m - first, group_m)``; ``row = first + (pid % in_group) % size``;
    ``col = (pid % in_group) // size``.
    """
    if min(tiles_m, tiles_n, group_m) < 1:
        raise ValueError(f"tiles_m, tiles_n and group_m must be positive, got {tiles_m}, {tiles_n}, {group_m}")
    if group_m == 1:
        return [(p // tiles_n, p % tiles_n) for p in range(tiles_m * tiles_n)]
    in_group = group_m * tiles_n
    out = []
    for pid in range(tiles_m * tiles_n):
        first = (pid // in_group) * group_m
        size = min(tiles_m - first, group_m)
        out.append((first + (pid % in_group) % size, (pid % in_group) // size))
    return out


def distinct_strips(order: list[tuple[int, int]], wave: int) -> tuple[int, int]:
    """(A strips, B strips) the first ``wave`` programs of ``order`` read: distinct rows and columns."""
    first = order[:wave]
    return len({r for r, _ in first}), len({c for _, c in first})


def grouped_order(m: int = 8192, n: int = 8192, block_m: int = 128, block_n: int = 256, group_m: int = 8,
                  accel: Accelerator | str | None = None) -> Figure:
    """Two maps of C's tiles, row-major order and grouped order (``group_m`` rows of tiles per group),
    the first wave (one tile per SM of ``accel``) shaded, with the distinct strips of A and B it reads."""
    a = accelerator(accel)
    if a.sm_count is None:
        raise ValueError(f"{a.name} has no SM count in the course's data: a wave cannot be drawn")
    g = tile_grid(m, n, block_m, block_n)
    wave = a.sm_count
    fig = new_figure(7.0, 4.1, dpi=110)
    fig.suptitle(f"First wave of {wave} tiles on the {a.name} ({m} x {n}, tiles {block_m} x {block_n})", fontsize=11)
    cmap = ListedColormap([LIGHT, ORANGE, SKY, YELLOW])
    for idx, (gm, name) in enumerate(((1, "row-major"), (group_m, f"grouped, GROUP_M = {group_m}"))):
        ax = fig.add_axes((0.04 + idx * 0.5, 0.04, 0.42, 0.72))
        order = tile_order(g.tiles_m, g.tiles_n, gm)
        img = np.zeros((g.tiles_m + 1, g.tiles_n + 1))
        shown = min(g.tiles_m, max(2 * group_m, math.ceil(wave / g.tiles_n) + 2))
        for r, c in order[:wave]:
            img[r + 1, c + 1] = 1
            img[r + 1, 0] = 2  # the A strip (row of tiles) it reads
            img[0, c + 1] = 3  # the B strip (column of tiles) it reads
        ax.imshow(img[:shown + 1], cmap=cmap, vmin=0, vmax=3, interpolation="nearest", gid="tiles")
        ax.set_xticks([])
        ax.set_yticks([])
        ra, cb = distinct_strips(order, wave)
        ax.set_title(f"{name}\n{ra} A strips + {cb} B strips = {ra + cb}", fontsize=TEXT, gid="strips")
    fig.text(0.5, 0.005, f"left column: strips of A read; top row: strips of B read (first {shown} of "
             f"{g.tiles_m} rows of tiles shown)", ha="center", fontsize=SMALL)
    return fig


def pipeline_schedule(k_steps: int, stages: int, load: float = 1.0, mma: float = 1.0) -> list[tuple[float, float]]:
    """(load start, MMA start) of each k step when ``stages`` shared-memory buffers hold chunks in flight.

    The load of step i needs buffer ``i mod stages`` free (MMA ``i - stages`` finished) and the copy
    engine free (load i-1 issued: loads are queued, one after another); MMA i needs load i finished
    and MMA i-1 finished."""
    if min(k_steps, stages) < 1:
        raise ValueError(f"k_steps and stages must be positive integers, got {k_steps} and {stages}")
    loads: list[float] = []
    mmas: list[float] = []
    for i in range(k_steps):
        free = mmas[i - stages] + mma if i >= stages else 0.0
        start = max(free, loads[-1] + load if loads else 0.0)
        loads.append(start)
        mmas.append(max(start + load, mmas[-1] + mma if mmas else 0.0))
    return list(zip(loads, mmas, strict=True))


def pipeline_stages(stages: int = 3, k_steps: int = 6, load: float = 1.0, mma: float = 1.0) -> Figure:
    """Two timelines of a tile's k loop, each with a load lane and an MMA lane: one buffer (load, then
    compute, then load ...) against ``stages`` buffers (loads of later chunks in flight during the MMA)."""
    if stages < 2:
        raise ValueError(f"compare against at least 2 stages, got {stages}")
    one = pipeline_schedule(k_steps, 1, load, mma)
    many = pipeline_schedule(k_steps, stages, load, mma)
    end = one[-1][1] + mma
    fig, ax = canvas(7.0, 3.4, (-3.2, end + 0.3), (-0.6, 5.8), f"Software pipelining: {k_steps} k steps, "
                     f"1 stage against {stages}", equal=False)
    for y0, sched, name, gid in ((4.4, one, "1 stage", "s1"), (1.6, many, f"{stages} stages", "sn")):
        for i, (ls, ms) in enumerate(sched):
            bar(ax, y0, ls, load * 0.95, f"load {i}", "memory", gid=f"load-{gid}")
            bar(ax, y0 - 0.9, ms, mma * 0.95, f"MMA {i}", "compute", gid=f"mma-{gid}")
        ax.text(-0.2, y0, f"{name}: loads", ha="right", va="center", fontsize=SMALL)
        ax.text(-0.2, y0 - 0.9, "MMA (tensor cores)", ha="right", va="center", fontsize=SMALL)
        finish = sched[-1][1] + mma
        ax.plot([finish, finish], [y0 - 1.4, y0 + 0.5], color=BLUE, lw=1.2)
        ax.text(finish + 0.05, y0 + 0.45, f"{finish:g}", fontsize=SMALL, color=BLUE, gid=f"finish-{gid}")
    ax.text(0, -0.4, f"shared memory holds {stages} chunks of A and B at once: {stages} times one stage's bytes",
            fontsize=SMALL)
    return fig
