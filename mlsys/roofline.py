"""The roofline model.

Attainable throughput of a kernel with arithmetic intensity ``I`` (FLOP per byte of
off-chip traffic) on a chip with peak ``P`` (FLOP/s) and memory bandwidth ``B`` (byte/s):

    attainable(I) = min(P, B * I)

The two roofs meet at the ridge point ``I* = P / B``. Below it a kernel is memory-bound,
above it compute-bound. A kernel's time can never beat ``max(F / P, D / B)`` for F FLOPs
and D bytes.
"""

from __future__ import annotations

from typing import Literal

import pint

from .hardware import Accelerator, get
from .numerics import itemsize
from .units import Q_, as_quantity, positive, require_count, require_positive

__all__ = [
    "arithmetic_intensity",
    "achieved_flops",
    "achieved_bandwidth",
    "attainable_flops",
    "bound",
    "matmul_flops",
    "matmul_bytes",
    "matmul_intensity",
    "time_lower_bound",
    "Roof",
    "roof_of",
]




def _flops(value: object, name: str = "flops") -> pint.Quantity:
    return positive(value, "FLOP", name, allow_zero=True)


def _bytes(value: object, name: str = "bytes_moved") -> pint.Quantity:
    return positive(value, "byte", name)


class Roof:
    """A roofline's two roofs: a peak (FLOP/s) and a bandwidth (byte/s), with a label.

    Built from a datasheet (:func:`roof_of`) or from measurements (``mlsys.bench``).
    """

    def __init__(self, peak: pint.Quantity, bandwidth: pint.Quantity, label: str = "") -> None:
        self.peak = require_positive(as_quantity(peak, "FLOP/s", "peak"), "peak")
        self.bandwidth = require_positive(as_quantity(bandwidth, "byte/s", "bandwidth"), "bandwidth")
        self.label = label

    @property
    def ridge_point(self) -> pint.Quantity:
        """``peak / bandwidth`` in FLOP/byte."""
        return (self.peak / self.bandwidth).to("FLOP/byte")

    def __repr__(self) -> str:
        return f"Roof({self.peak:~P}, {self.bandwidth:~P}, label={self.label!r})"


def roof_of(accel: Accelerator | str | Roof, dtype: object = "bf16") -> Roof:
    """The datasheet roof of an accelerator (name or object) for ``dtype``; a Roof passes through."""
    if isinstance(accel, Roof):
        return accel
    acc = get(accel) if isinstance(accel, str) else accel
    if not isinstance(acc, Accelerator):
        raise TypeError(f"expected an Accelerator, its name or a Roof, got {accel!r}")
    return Roof(acc.peak(dtype), acc.memory_bandwidth, f"{acc.name} {dtype}")


def arithmetic_intensity(flops: object, bytes_moved: object) -> pint.Quantity:
    """Arithmetic intensity ``I = flops / bytes_moved`` in FLOP/byte.

    ``flops`` in FLOP (or a plain number of FLOPs), ``bytes_moved`` in bytes (> 0, or a plain
    number of bytes), per the policy in :mod:`mlsys.units`.
    """
    return (_flops(flops) / _bytes(bytes_moved)).to("FLOP/byte")


def achieved_flops(flops: object, time: object) -> pint.Quantity:
    """The rate a measured kernel reached: ``flops / time`` in FLOP/s (counted FLOPs over measured time)."""
    return (_flops(flops) / positive(time, "s", "time")).to("FLOP/s")


def achieved_bandwidth(bytes_moved: object, time: object) -> pint.Quantity:
    """The bandwidth a measured kernel reached: ``bytes_moved / time`` in byte/s (counted bytes over measured time)."""
    return (_bytes(bytes_moved) / positive(time, "s", "time")).to("byte/s")


def _intensity(value: object) -> pint.Quantity:
    return positive(value, "FLOP/byte", "intensity", allow_zero=True)


def attainable_flops(intensity: object, accel: Accelerator | str | Roof, dtype: object = "bf16") -> pint.Quantity:
    """Roofline ceiling ``min(peak, bandwidth * intensity)`` in FLOP/s."""
    roof = roof_of(accel, dtype)
    i = _intensity(intensity)
    return min(roof.peak, (roof.bandwidth * i).to("FLOP/s")).to("TFLOP/s")


def bound(intensity: object, accel: Accelerator | str | Roof, dtype: object = "bf16") -> Literal["memory", "compute"]:
    """``"memory"`` if ``intensity`` is below the ridge point ``peak / bandwidth``, else ``"compute"``."""
    roof = roof_of(accel, dtype)
    return "memory" if _intensity(intensity) < roof.ridge_point else "compute"


def matmul_flops(m: int, n: int, k: int) -> pint.Quantity:
    """FLOPs of ``C[m,n] = A[m,k] @ B[k,n]``: ``2 m n k`` (one multiply and one add per MAC)."""
    m, n, k = require_count(m, "m"), require_count(n, "n"), require_count(k, "k")
    return Q_(2 * m * n * k, "FLOP")


def matmul_bytes(m: int, n: int, k: int, dtype: object = "bf16") -> pint.Quantity:
    """Compulsory global-memory traffic of a matmul: ``(m k + k n + m n) * itemsize`` bytes.

    A and B are read once and C written once; any re-reading a real kernel does is extra.
    """
    m, n, k = require_count(m, "m"), require_count(n, "n"), require_count(k, "k")
    return ((m * k + k * n + m * n) * itemsize(dtype)).to("byte")


def matmul_intensity(m: int, n: int, k: int, dtype: object = "bf16") -> pint.Quantity:
    """Best-case intensity of a matmul: ``2 m n k / ((m k + k n + m n) * itemsize)`` FLOP/byte."""
    return arithmetic_intensity(matmul_flops(m, n, k), matmul_bytes(m, n, k, dtype))


def time_lower_bound(
    flops: object, bytes_moved: object, accel: Accelerator | str | Roof, dtype: object = "bf16"
) -> pint.Quantity:
    """Roofline lower bound on run time: ``max(flops / peak, bytes_moved / bandwidth)`` in seconds."""
    roof = roof_of(accel, dtype)
    f, b = _flops(flops), _bytes(bytes_moved)
    return max((f / roof.peak).to("s"), (b / roof.bandwidth).to("s"))
