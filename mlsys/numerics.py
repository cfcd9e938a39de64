"""Number formats: names, storage sizes and (see below) bit-exact encoding.

``itemsize(dtype)`` is the storage size of one element in bytes. Sub-byte formats are
fractional: fp4 (e2m1) is half a byte, because two values pack into one byte in memory.
TF32 is a *compute* format of the tensor cores: its operands are stored as fp32, so it
occupies 4 bytes.

The second half models the floating-point formats bit for bit: ``decode(bits, fmt)``,
``encode(x, fmt)`` (round to nearest, ties to even, with each format's overflow rule),
``values(fmt)``, ``max_value``, ``min_normal``, ``min_subnormal``, ``epsilon`` and
``bit_table(fmt)``. The notes above ``FloatFormat`` give the rules and their sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from .units import Q_

__all__ = ["DTYPES", "BLOCK_SCALED", "canonical_dtype", "itemsize"]

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
    # block-scaled formats: element bits + scale bits / block size (effective storage per element)
    "mxfp8": 8 + 8 / 32,  # OCP MX: fp8 (e4m3 or e5m2) elements, one e8m0 scale per 32
    "mxfp4": 4 + 8 / 32,  # OCP MX: fp4 (e2m1) elements, one e8m0 scale per 32 -> 4.25 bits
    "nvfp4": 4 + 8 / 16,  # NVIDIA NVFP4: fp4 (e2m1) elements, one e4m3 scale per 16 -> 4.5 bits
}

#: block-scaled format -> (element format, block size, scale format). The effective size in
#: ``itemsize`` counts the shared scale: ``element_bits + scale_bits / block`` per element.
#: Sources: "OCP Microscaling Formats (MX) Specification" v1.0 (2023-09), section 5 (block of 32,
#: E8M0 scale), https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf ;
#: NVIDIA, "Introducing NVFP4 for efficient and accurate low-precision inference", NVIDIA Technical
#: Blog (2025-06), https://developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-low-precision-inference/
#: (blocks of 16 FP4 values share one FP8 E4M3 scale, plus one fp32 scale per tensor, ignored here).
BLOCK_SCALED: dict[str, tuple[str, int, str]] = {
    "mxfp8": ("fp8_e4m3", 32, "e8m0"),
    "mxfp4": ("fp4_e2m1", 32, "e8m0"),
    "nvfp4": ("fp4_e2m1", 16, "fp8_e4m3"),
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
    "e2m1": "fp4_e2m1", "float4_e2m1fn_x2": "fp4_e2m1",
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

    Block-scaled formats count their shared scale (:data:`BLOCK_SCALED`): nvfp4 is
    ``(4 + 8/16) / 8 = 0.5625`` B, mxfp4 ``(4 + 8/32) / 8 = 0.53125`` B, mxfp8 ``1.03125`` B.
    Returns a pint quantity in bytes.
    """
    return Q_(_BITS[canonical_dtype(dtype)] / 8, "byte")


# ---------------------------------------------------------------------------------------------
# Bit-exact floating-point formats
# ---------------------------------------------------------------------------------------------
#
# A binary floating-point format with E exponent bits, M mantissa (fraction) bits and bias b
# stores a sign s, a biased exponent e and a fraction f. Its value is
#
#     normal    (0 < e < e_max or, without inf/NaN codes, e = e_max):  (-1)^s * 2^(e - b) * (1 + f / 2^M)
#     subnormal (e = 0):                                                (-1)^s * 2^(1 - b) * (f / 2^M)
#
# The formats differ in what the all-ones exponent means:
#
# * IEEE-like (fp32, tf32, bf16, fp16, fp8_e5m2): e = all ones, f = 0 is +-inf, f != 0 is NaN.
# * fp8_e4m3 (OCP "E4M3FN", ``torch.float8_e4m3fn``): no infinities; only S.1111.111 is NaN,
#   so the all-ones exponent holds normal values up to 1.75 * 2^8 = 448.
# * fp4_e2m1 (OCP Microscaling FP4): no infinities and no NaN; all 16 codes are finite, max 6.
#
# Rounding is round-to-nearest, ties-to-even, of the exact input value. What happens to values
# beyond the largest finite one (after rounding) follows torch 2.13's casts, which the tests
# compare against bit for bit:
#
# * IEEE-like formats overflow to +-inf (so does fp8_e5m2: ``torch.float8_e5m2`` gives inf for
#   anything that rounds past 57344, e.g. 61440 -> inf, 61439 -> 57344).
# * fp8_e4m3 saturates: every finite value beyond 448, and +-inf, becomes +-448, as
#   ``torch.float8_e4m3fn`` casts do (the OCP FP8 spec's "saturating" conversion, and CUDA's
#   ``__NV_SATFINITE``). NaN stays NaN (S.1111.111).
# * fp4_e2m1 saturates too (+-inf and anything beyond 6 -> +-6): the OCP MX spec gives FP4 no
#   codes for inf or NaN. torch has the storage dtype ``float4_e2m1fn_x2`` but no cast to it,
#   so this choice is checked against the spec's value table, not against torch. Encoding NaN
#   into fp4 raises ``ValueError``: there is nothing it could honestly become.
#
# Sources: IEEE 754-2019 (binary32, binary16); "OCP 8-bit Floating Point Specification (OFP8)",
# revision 1.0, 2023-06-20, https://github.com/opencomputeproject/FP8 ; "OCP Microscaling
# Formats (MX) Specification", v1.0, 2023-09,
# https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf ;
# NVIDIA A100 Tensor Core GPU Architecture whitepaper, 2020-05 (TF32: fp32's 8-bit exponent,
# fp16's 10-bit mantissa). The fp4 rounding also agrees with Google's ml_dtypes
# (``float4_e2m1fn``), checked in the tests when it is installed.

__all__ += [
    "FloatFormat", "FORMATS", "float_format", "decode", "encode", "round_to_format", "values", "normal_binades",
    "max_value", "min_normal", "min_subnormal", "epsilon", "bit_table",
]


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: field widths, bias and special-value rules.

    ``specials`` is ``"ieee"`` (all-ones exponent = inf/NaN), ``"fn"`` (finite + NaN only: the
    single code with all-ones exponent and all-ones mantissa is NaN) or ``"none"`` (every code
    finite). ``overflow`` is what encoding a too-large value gives: ``"inf"`` or ``"saturate"``.
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    specials: Literal["ieee", "fn", "none"]
    overflow: Literal["inf", "saturate"]

    @property
    def bits(self) -> int:
        """Total width: 1 sign bit + exponent bits + mantissa bits."""
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def max_exponent_code(self) -> int:
        """Largest biased exponent that encodes finite normal values."""
        top = (1 << self.exponent_bits) - 1
        return top - 1 if self.specials == "ieee" else top

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal number: ``1 - bias``."""
        return 1 - self.bias

    @property
    def max_mantissa_at_top(self) -> int:
        """Largest mantissa code allowed with the top finite exponent (E4M3FN reserves all ones for NaN)."""
        full = (1 << self.mantissa_bits) - 1
        return full - 1 if self.specials == "fn" else full


#: the bit-level formats, by canonical name
FORMATS: dict[str, FloatFormat] = {
    "fp32": FloatFormat("fp32", 8, 23, 127, "ieee", "inf"),
    "tf32": FloatFormat("tf32", 8, 10, 127, "ieee", "inf"),
    "bf16": FloatFormat("bf16", 8, 7, 127, "ieee", "inf"),
    "fp16": FloatFormat("fp16", 5, 10, 15, "ieee", "inf"),
    "fp8_e4m3": FloatFormat("fp8_e4m3", 4, 3, 7, "fn", "saturate"),
    "fp8_e5m2": FloatFormat("fp8_e5m2", 5, 2, 15, "ieee", "inf"),
    "fp4_e2m1": FloatFormat("fp4_e2m1", 2, 1, 1, "none", "saturate"),
}


def float_format(fmt: object) -> FloatFormat:
    """The :class:`FloatFormat` for a name (``"bf16"``, ``"e4m3"``, ``torch.float16``, ...).

    Raises ``ValueError`` for unknown names, for the ambiguous ``"fp8"``, and for dtypes
    without a bit model here (fp64, integers).
    """
    if isinstance(fmt, FloatFormat):
        return fmt
    name = canonical_dtype(fmt)
    if name in BLOCK_SCALED:  # the elements' own format (the scale is a separate number)
        name = BLOCK_SCALED[name][0]
    if name == "fp4":
        name = "fp4_e2m1"
    if name == "fp8":
        raise ValueError("'fp8' is ambiguous here: use 'fp8_e4m3' or 'fp8_e5m2'")
    if name not in FORMATS:
        raise ValueError(f"{fmt!r} has no bit-level model; expected one of {', '.join(FORMATS)}")
    return FORMATS[name]


def _fields(f: FloatFormat) -> tuple[int, int]:
    return (1 << f.exponent_bits) - 1, (1 << f.mantissa_bits) - 1


def _decode_one(bits: int, f: FloatFormat) -> float:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)):
        raise TypeError(f"bits must be an integer bit pattern, got {bits!r}")
    bits = int(bits)
    if not 0 <= bits < (1 << f.bits):
        raise ValueError(f"bits must be in [0, 2**{f.bits}) for {f.name}, got {bits}")
    e_all, m_all = _fields(f)
    sign = -1.0 if bits >> (f.bits - 1) else 1.0
    e = (bits >> f.mantissa_bits) & e_all
    m = bits & m_all
    if f.specials == "ieee" and e == e_all:
        return sign * math.inf if m == 0 else math.nan
    if f.specials == "fn" and e == e_all and m == m_all:
        return math.nan
    if e == 0:
        return sign * math.ldexp(m, f.emin - f.mantissa_bits)
    return sign * math.ldexp((1 << f.mantissa_bits) + m, e - f.bias - f.mantissa_bits)


def decode(bits: object, fmt: object) -> float | np.ndarray:
    """The value of bit pattern ``bits`` (an unsigned int, sign bit highest) in format ``fmt``.

    value = (-1)^s 2^(e - bias) (1 + m / 2^M) for normal codes, (-1)^s 2^(1 - bias) m / 2^M
    for subnormal codes (e = 0); special codes give inf or NaN as the format defines.
    tf32 patterns are 19 bits wide (1 + 8 + 10). Arrays of patterns decode element-wise to a
    float64 array. Values are exact (every format here fits in a float64).
    """
    f = float_format(fmt)
    if np.ndim(bits) > 0:
        arr = np.asarray(bits)
        return np.array([_decode_one(int(b), f) for b in arr.ravel()], dtype=np.float64).reshape(arr.shape)
    return _decode_one(bits, f)


def _nan_code(f: FloatFormat, sign: int) -> int:
    e_all, m_all = _fields(f)
    if f.specials == "fn":
        mant = m_all
    else:  # quiet NaN: top mantissa bit set
        mant = 1 << (f.mantissa_bits - 1)
    return (sign << (f.bits - 1)) | (e_all << f.mantissa_bits) | mant


def _encode_one(x: float, f: FloatFormat) -> int:
    x = float(x)
    sign = 1 if math.copysign(1.0, x) < 0 else 0
    sbit = sign << (f.bits - 1)
    e_all, m_all = _fields(f)
    if math.isnan(x):
        if f.specials == "none":
            raise ValueError(f"{f.name} has no NaN: cannot encode {x!r}")
        return _nan_code(f, sign)
    top_code = sbit | (f.max_exponent_code << f.mantissa_bits) | f.max_mantissa_at_top
    inf_code = sbit | (e_all << f.mantissa_bits)
    a = abs(x)
    if math.isinf(a):
        return inf_code if f.overflow == "inf" else top_code
    if a == 0.0:
        return sbit
    # exponent of a's leading bit, clamped at emin so that small values land on the subnormal grid
    exp = max(math.frexp(a)[1] - 1, f.emin)
    quantum_exp = exp - f.mantissa_bits
    n = round(math.ldexp(a, -quantum_exp))  # exact scaling; Python's round() is ties-to-even
    if n >= 1 << (f.mantissa_bits + 1):  # rounding carried into the next binade
        n >>= 1
        quantum_exp += 1
    if n == 0:
        return sbit
    if n < 1 << f.mantissa_bits:  # subnormal (only possible at exp == emin)
        return sbit | n
    e_code = quantum_exp + f.mantissa_bits + f.bias
    m_code = n - (1 << f.mantissa_bits)
    if e_code > f.max_exponent_code or (e_code == f.max_exponent_code and m_code > f.max_mantissa_at_top):
        return inf_code if f.overflow == "inf" else top_code
    return sbit | (e_code << f.mantissa_bits) | m_code


def encode(x: object, fmt: object) -> int | np.ndarray:
    """The bit pattern of ``x`` in ``fmt``, rounded to nearest, ties to even.

    ``x`` is a real number (or an array of them, giving an int64 array of patterns); the
    exact value of ``x`` is rounded once. Too-large values become +-inf for IEEE-like formats
    (fp32, tf32, bf16, fp16, fp8_e5m2) and saturate to +-max for fp8_e4m3 and fp4_e2m1, as
    torch 2.13's casts do (see the module notes). NaN encodes to a NaN code (sign kept);
    NaN into fp4_e2m1 raises ``ValueError``.
    """
    f = float_format(fmt)
    if np.ndim(x) > 0:
        arr = np.asarray(x, dtype=np.float64)
        return np.array([_encode_one(v, f) for v in arr.ravel()], dtype=np.int64).reshape(arr.shape)
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"x must be a real number, got {type(x).__name__} {x!r}")
    return _encode_one(x, f)


def round_to_format(x: object, fmt: object) -> float | np.ndarray:
    """``decode(encode(x, fmt), fmt)``: the value ``x`` becomes when stored in ``fmt``."""
    return decode(encode(x, fmt), fmt)


def values(fmt: object) -> np.ndarray:
    """All distinct finite values of ``fmt``, sorted ascending, as a float64 array (0 appears once).

    fp4_e2m1 has 15 (16 codes, +0 and -0), fp8_e4m3 253, fp8_e5m2 247. fp32 (about 4.3e9
    values) is refused with ``ValueError``; tf32 (2^19 codes) takes a second or two.
    """
    f = float_format(fmt)
    if f.bits > 19:
        raise ValueError(f"{f.name} has 2**{f.bits} codes; values() lists formats of at most 19 bits")
    out = {_decode_one(b, f) for b in range(1 << f.bits)}
    return np.array(sorted(v for v in out if math.isfinite(v)), dtype=np.float64)


def max_value(fmt: object) -> float:
    """Largest finite value: 2^(e_top - bias) (2 - k / 2^M) with k = 1, or k = 2 for E4M3FN.

    fp32 3.4028e38, bf16 3.3895e38, fp16 65504, fp8_e4m3 448, fp8_e5m2 57344, fp4_e2m1 6.
    """
    f = float_format(fmt)
    return _decode_one((f.max_exponent_code << f.mantissa_bits) | f.max_mantissa_at_top, f)


def min_normal(fmt: object) -> float:
    """Smallest positive normal value: 2^(1 - bias) (fp16 2^-14, fp8_e4m3 2^-6, fp4_e2m1 1)."""
    f = float_format(fmt)
    return math.ldexp(1.0, f.emin)


def normal_binades(fmt: object) -> int:
    """Binades ``[2^e, 2^(e+1))`` that hold normal values: one per biased exponent code ``1 .. e_top``.

    ``e_top`` is the largest code of finite normals (``2^E - 2`` where the top code is kept for inf and
    NaN, as in IEEE formats; ``2^E - 1`` otherwise), so fp16 30, bf16 254, fp8_e4m3 15, fp8_e5m2 30,
    fp4_e2m1 3.
    """
    return float_format(fmt).max_exponent_code


def min_subnormal(fmt: object) -> float:
    """Smallest positive value: 2^(1 - bias - M) (fp16 2^-24, fp8_e4m3 2^-9, fp4_e2m1 0.5)."""
    f = float_format(fmt)
    return math.ldexp(1.0, f.emin - f.mantissa_bits)


def epsilon(fmt: object) -> float:
    """Machine epsilon: the gap between 1 and the next value, 2^-M (bf16 2^-7, fp16 2^-10)."""
    f = float_format(fmt)
    return math.ldexp(1.0, -f.mantissa_bits)


def bit_table(fmt: object, markdown: bool = True) -> str:
    """A table of ``fmt``'s layout and key values, as Markdown (default) or aligned plain text.

    Rows: total bits, sign/exponent/mantissa field widths and positions, bias, inf/NaN
    encodings, max, min normal, min subnormal, epsilon, and overflow behaviour.
    """
    f = float_format(fmt)
    m, e = f.mantissa_bits, f.exponent_bits
    specials = {
        "ieee": "exponent all ones: mantissa 0 = ±inf, else NaN",
        "fn": "no inf; NaN = S.1111.111 (exponent and mantissa all ones)",
        "none": "no inf, no NaN (every code is a finite number)",
    }[f.specials]
    overflow = "rounds to ±inf" if f.overflow == "inf" else f"saturates to ±{max_value(f):g}"

    def p2(x: float) -> str:
        return f"{x:.6g} (2^{math.frexp(x)[1] - 1})" if x == 2.0 ** (math.frexp(x)[1] - 1) else f"{x:.6g}"

    rows = [
        ("bits", f"{f.bits} = 1 sign + {e} exponent + {m} mantissa"),
        ("sign field", f"bit {f.bits - 1}"),
        ("exponent field", f"bits {f.bits - 2}..{m}" if e > 1 else f"bit {m}"),
        ("mantissa field", f"bits {m - 1}..0" if m > 1 else "bit 0"),
        ("bias", str(f.bias)),
        ("special codes", specials),
        ("max", f"{max_value(f):.6g}"),
        ("min normal", p2(min_normal(f))),
        ("min subnormal", p2(min_subnormal(f))),
        ("epsilon", p2(epsilon(f))),
        ("overflow", overflow),
    ]
    if markdown:
        lines = [f"| {f.name} | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]
    else:
        width = max(len(k) for k, _ in rows)
        lines = [f.name, *(f"{k:<{width}}  {v}" for k, v in rows)]
    return "\n".join(lines)
