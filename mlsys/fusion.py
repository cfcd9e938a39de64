"""Kernel fusion of element-wise chains: memory traffic, launches and predicted time.

A chain of ``len(arities)`` element-wise ops on tensors of ``numel`` elements, where
``arities[i]`` is how many tensors op ``i`` reads. Op 0 reads only outside tensors (inputs of
the chain); op ``i > 0`` reads the previous op's result plus ``arities[i] - 1`` outside tensors.
Every op writes one tensor. Example: ``y = relu(x * w + b)`` is ``arities = [2, 2, 1]``
(mul reads x, w; add reads the product and b; relu reads the sum).

* **Unfused** (one kernel per op), every op reads its inputs from global memory and writes its
  output there: ``sum(arities[i] + 1) * numel * itemsize`` bytes, ``len(arities)`` launches.
* **Fused** (one kernel), each outside tensor is read once and only the final result written:
  ``(arities[0] + sum(arities[i] - 1 for i > 0) + 1) * numel * itemsize`` bytes, one launch.

Intermediates then live in registers. For the example: unfused (3 + 3 + 2) = 8 tensor
transfers, fused (2 + 1 + 0 + 1) = 4.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pint

from .hardware import Accelerator
from .numerics import itemsize
from .overhead import launch_time
from .roofline import Roof, roof_of
from .units import DimensionError, positive, require_count

__all__ = ["chain_traffic", "FusionSavings", "fusion_savings", "FusionTime", "fusion_time"]


def _numel(value: object) -> int:
    return require_count(value, "numel (elements per tensor)")


def _arities(arities: object) -> list[int]:
    if isinstance(arities, (str, bytes)) or not isinstance(arities, Sequence) or len(arities) == 0:
        raise TypeError(f"arities must be a non-empty list of inputs per op, e.g. [2, 2, 1], got {arities!r}")
    out = []
    for i, a in enumerate(arities):
        if isinstance(a, bool) or not isinstance(a, int) or a < 1:
            raise ValueError(f"arities[{i}] must be an integer >= 1 (tensors op {i} reads), got {a!r}")
        out.append(a)
    return out


def _transfers(arities: list[int], fused: bool) -> int:
    if fused:
        return arities[0] + sum(a - 1 for a in arities[1:]) + 1
    return sum(a + 1 for a in arities)


def chain_traffic(numel: int, dtype: object, arities: Sequence[int], fused: bool) -> pint.Quantity:
    """Global-memory bytes of an element-wise chain, unfused or fused.

    unfused: ``sum_i (arities[i] + 1) * numel * itemsize``;
    fused:   ``(arities[0] + sum_{i>0} (arities[i] - 1) + 1) * numel * itemsize``. Bytes.
    """
    n, ar = _numel(numel), _arities(arities)
    return (_transfers(ar, bool(fused)) * n * itemsize(dtype)).to("byte")


class FusionSavings(NamedTuple):
    """What fusing a chain saves: bytes before and after, the difference, their ratio, launches."""

    unfused: pint.Quantity  #: bytes, one kernel per op
    fused: pint.Quantity  #: bytes, one kernel
    saved: pint.Quantity  #: unfused - fused, bytes
    ratio: float  #: unfused / fused (>= 1): the speedup of a purely bandwidth-bound chain
    launches_saved: int  #: len(arities) - 1


def fusion_savings(numel: int, dtype: object, arities: Sequence[int]) -> FusionSavings:
    """Unfused and fused :func:`chain_traffic`, bytes saved, ``unfused / fused``, and ``len(arities) - 1`` launches saved."""
    unfused = chain_traffic(numel, dtype, arities, fused=False)
    fused = chain_traffic(numel, dtype, arities, fused=True)
    return FusionSavings(unfused, fused, unfused - fused, float(unfused / fused), len(arities) - 1)


class FusionTime(NamedTuple):
    """Predicted run times of a chain, unfused and fused, and their ratio."""

    unfused: pint.Quantity  #: seconds
    fused: pint.Quantity  #: seconds
    speedup: float  #: unfused / fused


def _memory_bandwidth(where: object) -> pint.Quantity:
    if isinstance(where, (Accelerator, Roof)):
        return roof_of(where).bandwidth
    if isinstance(where, str):
        try:
            return roof_of(where).bandwidth
        except KeyError:
            try:
                return positive(where, "byte/s", "bandwidth")
            except DimensionError:
                raise ValueError(
                    f"{where!r} is neither a known accelerator nor a bandwidth such as '3.35 TB/s'"
                ) from None
    return positive(where, "byte/s", "bandwidth")


def fusion_time(
    numel: int, dtype: object, arities: Sequence[int], where: Accelerator | Roof | str | pint.Quantity, launch: object
) -> FusionTime:
    """Predicted times of the chain unfused and fused, from bandwidth and per-launch overhead.

    Each kernel is memory-bound: its time is its bytes / bandwidth. The unfused chain is
    ``len(arities)`` kernels launched eagerly; with ``b = chain_traffic(..., fused=False)`` it
    takes ``overhead.launch_time(len(arities), launch, b / len(arities) / bandwidth)`` (the ops
    are treated as kernels of equal, average size). The fused chain is one kernel:
    ``launch + chain_traffic(..., fused=True) / bandwidth``. Seconds.

    ``where`` is an Accelerator or its name (its datasheet memory bandwidth), a measured
    ``Roof``, or a bandwidth quantity / string (``"3.35 TB/s"``). ``launch`` is the per-launch
    cost in seconds (measure it: ``mlsys.bench``).
    """
    bw = _memory_bandwidth(where)
    n_ops = len(_arities(arities))
    unfused_bytes = chain_traffic(numel, dtype, arities, fused=False)
    fused_bytes = chain_traffic(numel, dtype, arities, fused=True)
    t_unfused = launch_time(n_ops, launch, (unfused_bytes / n_ops / bw).to("s"))
    t_fused = launch_time(1, launch, (fused_bytes / bw).to("s"))
    return FusionTime(t_unfused, t_fused, float(t_unfused / t_fused))
