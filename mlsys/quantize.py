"""Quantization with scales: INT8 (symmetric, per tensor or per row) and block-scaled low-precision
floats (the OCP MX formats and NVIDIA's NVFP4), simulated in float64 with :mod:`mlsys.numerics`.

**INT8, symmetric.** For a group of values with largest magnitude ``a``, the scale is
``s = a / 127``; each value is stored as ``q = clamp(round(x / s), -127, 127)`` and read back as
``q s``. Groups are the whole tensor (``axis=None``) or each row (``axis=1``), one scale per group.

**Block-scaled floats.** Values are cut into blocks of ``block`` consecutive elements (along the last
axis); each block shares one scale ``S`` and each element is stored in a narrow float format:
``x ~ S * round_to_format(x / S, element)``.

* ``scale="e8m0"`` (OCP MX: MXFP8, MXFP6, MXFP4, blocks of 32): ``S`` is a power of two,
  ``S = 2^(floor(log2 a) - e_max)`` with ``a`` the block's largest magnitude and ``e_max`` the
  exponent of the element format's largest normal value (2 for fp4 e2m1, whose max is 1.5 * 2^2;
  8 for fp8 e4m3). Values above the element's max after scaling saturate (MX spec, section 6.3).
* ``scale="fp8_e4m3"`` (NVFP4: fp4 e2m1 elements, blocks of 16): ``S`` is ``a / max_element``
  rounded to fp8 e4m3, times one fp32 scale per tensor, ``g = A / (max_element * 448)`` with ``A`` the
  tensor's largest magnitude, which keeps every block scale inside e4m3's range.

Storage per element is ``element_bits + scale_bits / block`` (the per-tensor fp32 scale is ignored):
4.25 bits for MXFP4, 4.5 for NVFP4, 8.25 for MXFP8.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .numerics import BLOCK_SCALED, float_format, itemsize, max_value, round_to_format
from .units import require_count

__all__ = ["Quantized", "int8_symmetric", "block_scaled", "block_scaled_as", "storage_bits", "relative_error"]


class Quantized(NamedTuple):
    """Values after a quantize-dequantize round trip, with the scales used."""

    values: np.ndarray  #: dequantized values (float64), same shape as the input
    scales: np.ndarray  #: one scale per group or block
    bits_per_element: float  #: storage, scales included


def _array(x: object) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        raise ValueError("quantization needs a non-empty array of finite numbers")
    return arr


def relative_error(approx: object, exact: object) -> float:
    """``||approx - exact|| / ||exact||`` (2-norms, float64)."""
    a, e = np.asarray(approx, dtype=np.float64), np.asarray(exact, dtype=np.float64)
    return float(np.linalg.norm(a - e) / np.linalg.norm(e))


def int8_symmetric(x: object, axis: int | None = None) -> Quantized:
    """Symmetric INT8: ``s = max|x| / 127`` per tensor (``axis=None``) or per row (``axis=1`` of a 2-D array)."""
    arr = _array(x)
    if axis is None:
        amax = np.max(np.abs(arr), keepdims=True)
    elif axis == 1 and arr.ndim == 2:
        amax = np.max(np.abs(arr), axis=1, keepdims=True)
    else:
        raise ValueError(f"axis must be None (per tensor) or 1 (per row of a 2-D array), got {axis!r}")
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    q = np.clip(np.rint(arr / scale), -127, 127)
    return Quantized(q * scale, scale.ravel(), 8.0)


def storage_bits(element: str, block: int, scale: str) -> float:
    """Bits per element of a block-scaled format: ``element_bits + scale_bits / block``."""
    block = require_count(block, "block")
    scale_bits = 8.0 if scale == "e8m0" else float(itemsize(scale).to("bit").m)
    return float(itemsize(element).to("bit").m) + scale_bits / block


def block_scaled(x: object, element: str = "fp4_e2m1", block: int = 32, scale: str = "e8m0") -> Quantized:
    """Quantize-dequantize ``x`` along its last axis in blocks of ``block`` sharing one scale.

    ``scale`` is ``"e8m0"`` (power-of-two scales, OCP MX) or ``"fp8_e4m3"`` (NVFP4-style, with a
    per-tensor fp32 scale); see the module docstring for the formulas. The last axis must be a
    multiple of ``block``.
    """
    arr = _array(x)
    block = require_count(block, "block")
    if arr.shape[-1] % block:
        raise ValueError(f"the last axis ({arr.shape[-1]}) must be a multiple of the block size {block}")
    if scale not in ("e8m0", "fp8_e4m3"):
        raise ValueError(f"scale must be 'e8m0' (OCP MX) or 'fp8_e4m3' (NVFP4), got {scale!r}")
    fmt = float_format(element)
    emax_val = max_value(fmt)
    blocks = arr.reshape(-1, block)
    amax = np.max(np.abs(blocks), axis=1, keepdims=True)
    if scale == "e8m0":
        e_max = math.frexp(emax_val)[1] - 1  # exponent of the largest normal element
        safe = np.where(amax > 0, amax, 1.0)
        s = np.exp2(np.floor(np.log2(safe)) - e_max)
    else:
        tensor_amax = float(np.max(np.abs(arr)))
        g = tensor_amax / (emax_val * 448.0) if tensor_amax > 0 else 1.0
        s = np.asarray(round_to_format(amax / emax_val / g, "fp8_e4m3"), dtype=np.float64) * g
        s = np.where(s > 0, s, g)
    q = np.asarray(round_to_format(np.clip(blocks / s, -emax_val, emax_val), element), dtype=np.float64)
    return Quantized((q * s).reshape(arr.shape), s.ravel(), storage_bits(element, block, scale))


def block_scaled_as(x: object, name: str) -> Quantized:
    """:func:`block_scaled` with the element format, block and scale of a named format in
    :data:`mlsys.numerics.BLOCK_SCALED` (``"mxfp8"``, ``"mxfp4"``, ``"nvfp4"``)."""
    key = str(name).lower()
    if key not in BLOCK_SCALED:
        raise ValueError(f"unknown block-scaled format {name!r}; known: {', '.join(BLOCK_SCALED)}")
    element, block, scale = BLOCK_SCALED[key]
    return block_scaled(x, element, block, scale)
