"""How a warp's loads become memory traffic, and how much traffic must be in flight.

Two small models used by the execution-model and memory-hierarchy chapters:

* **Coalescing.** The 32 lanes of a warp issue their loads together; the memory system moves
  whole 32-byte *sectors*. Lane ``i`` reading ``itemsize`` bytes at element ``i * stride``
  touches ``sectors_per_warp(stride, itemsize)`` distinct sectors, so the fraction of moved
  bytes that the program asked for is ``32 * itemsize / (32 B * sectors)``.
* **Little's law.** To sustain a bandwidth ``B`` through a memory with latency ``L``, the bytes
  requested but not yet delivered must average ``B * L``.
"""

from __future__ import annotations

from typing import Any

import pint

from .units import Q_, positive, require_count

__all__ = ["SECTOR_BYTES", "WARP_SIZE", "sectors_per_warp", "coalescing_efficiency",
           "bytes_in_flight"]

SECTOR_BYTES = 32  # smallest unit the L1/L2 move to and from DRAM on NVIDIA GPUs since Volta
WARP_SIZE = 32


def _positive_int(value: Any, name: str) -> int:
    return require_count(value, name)


def sectors_per_warp(stride: int, itemsize: int = 4, lanes: int = WARP_SIZE,
                     sector: int = SECTOR_BYTES) -> int:
    """Distinct ``sector``-byte sectors touched when lane ``i`` of ``lanes`` reads ``itemsize``
    bytes at byte offset ``i * stride * itemsize`` (first lane sector-aligned).

    Count of the set ``{floor(b / sector) : b in bytes read}``.
    """
    for name, v in (("stride", stride), ("itemsize", itemsize), ("lanes", lanes),
                    ("sector", sector)):
        _positive_int(v, name)
    touched: set[int] = set()
    for lane in range(lanes):
        start = lane * stride * itemsize
        touched.update(range(start // sector, (start + itemsize - 1) // sector + 1))
    return len(touched)


def coalescing_efficiency(stride: int, itemsize: int = 4, lanes: int = WARP_SIZE,
                          sector: int = SECTOR_BYTES) -> float:
    """Useful fraction of moved bytes: ``lanes * itemsize / (sector * sectors_per_warp)``."""
    return lanes * itemsize / (sector * sectors_per_warp(stride, itemsize, lanes, sector))


def bytes_in_flight(bandwidth: Any, latency: Any) -> pint.Quantity:
    """Little's law: data that must be outstanding to sustain ``bandwidth`` (byte/s) through a
    memory of ``latency`` (s): ``bandwidth * latency``, in bytes."""
    bw = positive(bandwidth, "byte/s", "bandwidth")
    lat = positive(latency, "s", "latency")
    return (bw * lat).to("byte") + Q_(0, "byte")
