"""Wave quantization: how many rounds ("waves") of tiles a grid needs on a chip, and what share of
the SMs' time the last, partial wave wastes.

A grid of ``T`` independent tiles (thread blocks) on a chip with ``S`` SMs, each running ``r`` tiles
at once, runs in

    waves = ceil(T / (S r))

rounds when every tile takes the same time. The chip's tile slots are busy for a fraction

    efficiency = T / (waves S r)

of that time: 1 when ``T`` is a multiple of ``S r``, just above 1/2 when one tile spills into a
second wave. A matmul cut into ``block_m x block_n`` tiles has ``T = ceil(m / block_m) ceil(n / block_n)``
(:func:`mlsys.tiling.tile_grid`), so its throughput, plotted against the matrix size, drops each
time ``T`` crosses a multiple of ``S r``: the sawtooth of wave quantization.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .tiling import tile_grid
from .units import require_count

__all__ = ["Waves", "waves", "matmul_waves"]


class Waves(NamedTuple):
    """Tiles, waves and the busy fraction of a grid on a chip."""

    tiles: int  #: T
    slots: int  #: S r, tiles the chip runs at once
    waves: int  #: ceil(T / (S r))
    efficiency: float  #: T / (waves S r)


def waves(tiles: int, sm_count: int, tiles_per_sm: int = 1) -> Waves:
    """Waves of ``tiles`` equal tiles on ``sm_count`` SMs running ``tiles_per_sm`` each at once.

    ``waves = ceil(tiles / (sm_count tiles_per_sm))``, ``efficiency = tiles / (waves sm_count tiles_per_sm)``.
    """
    t, s, r = require_count(tiles, "tiles"), require_count(sm_count, "sm_count"), require_count(tiles_per_sm, "tiles_per_sm")
    w = math.ceil(t / (s * r))
    return Waves(t, s * r, w, t / (w * s * r))


def matmul_waves(m: int, n: int, block_m: int, block_n: int, sm_count: int, tiles_per_sm: int = 1) -> Waves:
    """:func:`waves` of a matmul's output tiles: ``T = ceil(m / block_m) ceil(n / block_n)``."""
    return waves(tile_grid(m, n, block_m, block_n).total, sm_count, tiles_per_sm)
