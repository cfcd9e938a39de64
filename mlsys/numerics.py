"""Number formats: names, storage sizes and (see below) bit-exact encoding.

``itemsize(dtype)`` is the storage size of one element in bytes. Sub-byte formats are
fractional: fp4 (e2m1) is half a byte, because two values pack into one byte in memory.
TF32 is a *compute* format of the tensor cores: its operands are stored as fp32, so it
occupies 4 bytes.
"""

from __future__ import annotations

from .units import Q_

__all__ = ["DTYPES", "canonical_dtype", "itemsize"]

#: canonical dtype name -> storage bits per element
_BITS: dict[str, float] = {
    "fp64": 64,
    "fp32": 32,
    "tf32": 32,  # stored as fp32; the tensor core reads 19 of the bits
    "bf16": 16,
    "fp16": 16,
    "fp8_e4m3": 8,
    "fp8_e5m2": 8,
    "fp8": 8,  # either fp8 variant; peaks are the same for both on NVIDIA parts
    "int8": 8,
    "int4": 4,
    "fp4_e2m1": 4,
    "fp4": 4,
}

#: every canonical dtype name the course knows
DTYPES: tuple[str, ...] = tuple(_BITS)

_ALIASES: dict[str, str] = {
    "float64": "fp64", "double": "fp64", "f64": "fp64",
    "float32": "fp32", "float": "fp32", "f32": "fp32", "single": "fp32",
    "tensorfloat32": "tf32",
    "bfloat16": "bf16",
    "float16": "fp16", "half": "fp16", "f16": "fp16",
    "float8_e4m3fn": "fp8_e4m3", "e4m3": "fp8_e4m3", "fp8e4m3": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2", "e5m2": "fp8_e5m2", "fp8e5m2": "fp8_e5m2",
    "e2m1": "fp4_e2m1", "float4_e2m1fn_x2": "fp4_e2m1", "nvfp4": "fp4_e2m1", "mxfp4": "fp4_e2m1",
    "uint8": "int8",
}


def canonical_dtype(dtype: object) -> str:
    """Return the course's canonical name for ``dtype``.

    Accepts canonical names (``"bf16"``), common spellings (``"bfloat16"``, ``"half"``) and
    ``torch.dtype`` / ``numpy.dtype`` objects (their ``str()`` is used). Case-insensitive.
    Raises ``ValueError`` listing the known names for anything else.
    """
    text = str(dtype).lower().strip()
    for prefix in ("torch.", "numpy.", "np."):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.replace("-", "_")
    if text in _BITS:
        return text
    if text in _ALIASES:
        return _ALIASES[text]
    raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)} (or a torch/numpy dtype name)")


def itemsize(dtype: object):
    """Storage size of one element: ``bits / 8`` bytes (fp32 -> 4 B, bf16 -> 2 B, fp4 -> 0.5 B).

    Returns a pint quantity in bytes.
    """
    return Q_(_BITS[canonical_dtype(dtype)] / 8, "byte")
