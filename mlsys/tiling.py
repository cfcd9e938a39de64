"""Tiled matrix multiplication: tile grids, global-memory traffic and shared-memory footprint.

``C[m, n] = A[m, k] @ B[k, n]`` computed by a grid of output tiles of ``block_m x block_n``.
Each program (thread block) owns one output tile: it streams its strip of A
(``block_m x k``) and its strip of B (``k x block_n``) through shared memory in chunks of
``block_k`` along k, and writes its tile of C once.

Fringe tiles. When ``block_m`` does not divide ``m`` (or ``block_n`` does not divide ``n``) the
last row (column) of tiles hangs over the edge. Traffic here counts **real elements only**:
a masked load (``tl.load(..., mask=...)`` in Triton) moves no bytes for the masked-off
elements, so a fringe tile with ``h`` real rows reads an A strip of ``h x k``, not
``block_m x k``. The wasted *compute* of the padding shows up instead in
:func:`tile_grid`'s ``utilization``. With this convention

    A traffic = tiles_n * (m k)   (every tile column re-reads all of A)
    B traffic = tiles_m * (k n)   (every tile row re-reads all of B)
    C traffic = m n               (written once)

and the total never exceeds the naive kernel's ``2 m n k + m n`` elements, and equals the
compulsory ``m k + k n + m n`` when one tile covers the whole output.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import pint

from .hardware import Accelerator, get
from .numerics import itemsize
from .occupancy import sm_limits
from .roofline import arithmetic_intensity, matmul_flops
from .units import require_count

__all__ = [
    "TileGrid",
    "TileConfig",
    "tile_grid",
    "tiled_matmul_traffic",
    "naive_matmul_traffic",
    "tiled_matmul_intensity",
    "naive_matmul_intensity",
    "shared_memory_bytes",
    "fits_shared_memory",
]




class TileGrid(NamedTuple):
    """Output tiles of a ``m x n`` matrix cut into ``block_m x block_n`` tiles."""

    tiles_m: int  #: ceil(m / block_m)
    tiles_n: int  #: ceil(n / block_n)
    total: int  #: tiles_m * tiles_n (programs launched)
    utilization: float  #: m n / (tiles_m block_m tiles_n block_n): share of tile area that is real output


def tile_grid(m: int, n: int, block_m: int, block_n: int) -> TileGrid:
    """Tiles per dimension ``ceil(m / block_m)``, ``ceil(n / block_n)``, their product, and the
    fraction of the covered area that holds real output, ``m n / (tiles_m block_m tiles_n block_n)``
    (1.0 when the blocks divide the matrix; below 1 when fringe tiles are padded).
    """
    m, n = require_count(m, "m"), require_count(n, "n")
    block_m, block_n = require_count(block_m, "block_m"), require_count(block_n, "block_n")
    tm, tn = math.ceil(m / block_m), math.ceil(n / block_n)
    return TileGrid(tm, tn, tm * tn, (m * n) / (tm * block_m * tn * block_n))


def tiled_matmul_traffic(m: int, n: int, k: int, block_m: int, block_n: int, dtype: object = "bf16") -> pint.Quantity:
    """Global-memory bytes of a tiled matmul in which each output tile reads its A and B strips once.

    ``(tiles_n * m k + tiles_m * k n + m n) * itemsize`` bytes, with ``tiles_m = ceil(m / block_m)``
    and ``tiles_n = ceil(n / block_n)``; fringe tiles count only their real elements (masked
    loads move nothing). Caches are ignored: an L2 hit is counted as global traffic.
    """
    require_count(k, "k")
    grid = tile_grid(m, n, block_m, block_n)
    elements = grid.tiles_n * m * k + grid.tiles_m * k * n + m * n
    return (elements * itemsize(dtype)).to("byte")


def naive_matmul_traffic(m: int, n: int, k: int, dtype: object = "bf16") -> pint.Quantity:
    """Global-memory bytes when every multiply-add loads both operands from global memory.

    ``(2 m n k + m n) * itemsize`` bytes: ``m n k`` loads of A, ``m n k`` of B, ``m n`` stores of C.
    """
    m, n, k = require_count(m, "m"), require_count(n, "n"), require_count(k, "k")
    return ((2 * m * n * k + m * n) * itemsize(dtype)).to("byte")


def tiled_matmul_intensity(m: int, n: int, k: int, block_m: int, block_n: int, dtype: object = "bf16") -> pint.Quantity:
    """Arithmetic intensity of the tiled kernel: ``2 m n k / tiled_matmul_traffic`` in FLOP/byte.

    When the blocks divide the matrix, the A and B traffic is ``m n k (1 / block_n + 1 / block_m)``
    elements, so once that dominates the C store the intensity approaches
    ``2 block_m block_n / ((block_m + block_n) * itemsize)``: ``block / itemsize`` for square
    tiles. It grows linearly with the tile size (64 FLOP/byte for 128 x 128 bf16 tiles).
    """
    return arithmetic_intensity(matmul_flops(m, n, k), tiled_matmul_traffic(m, n, k, block_m, block_n, dtype))


def naive_matmul_intensity(m: int, n: int, k: int, dtype: object = "bf16") -> pint.Quantity:
    """Arithmetic intensity of the naive kernel: ``2 m n k / naive_matmul_traffic`` (< 1 / itemsize) FLOP/byte."""
    return arithmetic_intensity(matmul_flops(m, n, k), naive_matmul_traffic(m, n, k, dtype))


def shared_memory_bytes(block_m: int, block_n: int, block_k: int, dtype: object = "bf16", stages: int = 1) -> pint.Quantity:
    """Shared memory one program needs for its A and B chunks: ``(block_m block_k + block_k block_n) * itemsize * stages``.

    ``stages`` is the number of pipeline buffers (Triton's ``num_stages``): each stage holds one
    chunk of A and one of B so that loads for later k-steps overlap the current one's math.
    Bytes; the C accumulator lives in registers and is not counted.
    """
    block_m, block_n, block_k = require_count(block_m, "block_m"), require_count(block_n, "block_n"), require_count(block_k, "block_k")
    stages = require_count(stages, "stages")
    return ((block_m * block_k + block_k * block_n) * stages * itemsize(dtype)).to("byte")


@dataclass(frozen=True)
class TileConfig:
    """A matmul tile configuration: block sizes, element dtype and pipeline stages."""

    block_m: int
    block_n: int
    block_k: int
    dtype: str = "bf16"
    stages: int = 1

    @property
    def shared_memory(self) -> pint.Quantity:
        """:func:`shared_memory_bytes` of this configuration."""
        return shared_memory_bytes(self.block_m, self.block_n, self.block_k, self.dtype, self.stages)


def fits_shared_memory(config: TileConfig | Mapping[str, object], accel: Accelerator | str) -> bool:
    """Whether one program of ``config`` fits in the shared memory one block may use on ``accel``.

    Compares :func:`shared_memory_bytes` with the per-block maximum of
    :func:`mlsys.occupancy.sm_limits` (227 KiB on an H100, whose SM holds 228 KiB: one block
    cannot have all of it). For an architecture without SM limits there, the SM's
    ``shared_memory_per_sm`` is used, an upper bound. ``config`` is a
    :class:`TileConfig` or a mapping with its fields (``block_m``, ``block_n``, ``block_k``,
    optional ``dtype`` and ``stages``).
    """
    if isinstance(config, Mapping):
        try:
            config = TileConfig(**config)  # type: ignore[arg-type]
        except TypeError as exc:
            raise TypeError(f"config must have block_m, block_n, block_k (and optionally dtype, stages): {exc}") from None
    if not isinstance(config, TileConfig):
        raise TypeError(f"config must be a TileConfig or a mapping of its fields, got {config!r}")
    acc = get(accel) if isinstance(accel, str) else accel
    if not isinstance(acc, Accelerator):
        raise TypeError(f"accel must be an Accelerator or its name, got {accel!r}")
    if acc.shared_memory_per_sm is None:
        raise ValueError(f"{acc.name} has no shared_memory_per_sm figure in the data file")
    try:
        limit = sm_limits(acc).max_shared_memory_per_block
    except KeyError:  # no per-block limit known for this architecture: the SM's capacity bounds it
        limit = acc.shared_memory_per_sm
    return bool(config.shared_memory <= limit.to("byte"))
