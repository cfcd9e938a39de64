"""FLOPs, compulsory bytes and arithmetic intensity of the layers a neural network is made of.

Each function returns a :class:`LayerCost` ``(flops, bytes, intensity)`` for one call of the layer:

* ``flops``: floating-point operations (a multiply-add counts 2, an exponential counts 1);
* ``bytes``: compulsory off-chip traffic (every input read once, every output written once, as
  a kernel with perfect on-chip reuse would do; a real kernel can only move more);
* ``intensity = flops / bytes`` in FLOP/byte, the x coordinate of the layer on a roofline.

Formulas (``s`` = bytes per element of ``dtype``):

==============================  =================================  =============================================
layer                           FLOP                               bytes
==============================  =================================  =============================================
linear (tokens t, d_in, d_out)  ``2 t d_in d_out``                 ``(t d_in + d_in d_out + t d_out) s``
conv2d (NCHW, R x S kernel)     ``2 N C_out H_out W_out C_in R S`` ``(N C_in H W + C_out C_in R S + N C_out H_out W_out) s``
layer_norm (rows x cols)        ``8 rows cols``                    ``(2 rows cols + 2 cols) s``
softmax (rows x cols)           ``5 rows cols``                    ``2 rows cols s``
attention_scores (Q K^T)        ``2 b q k d``                      ``(b q d + b k d + b q k) s``
==============================  =================================  =============================================

LayerNorm's 8 FLOP per element: mean (1 add); variance (subtract, square, add: 3); normalise
(subtract the mean, multiply by the reciprocal standard deviation: 2); affine (multiply by gamma,
add beta: 2). The per-row square root is ``rows`` operations and left out. Softmax's 5 per element:
running max (1 compare), subtract the max (1), exponential (1), sum (1), divide (1).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pint

from .hardware import Accelerator, get
from .numerics import itemsize
from .roofline import arithmetic_intensity, roof_of
from .units import Q_, require_count

__all__ = [
    "LayerCost",
    "linear",
    "linear_intensity_bound",
    "tokens_to_ridge",
    "conv2d",
    "conv2d_output_size",
    "layer_norm",
    "softmax",
    "attention_scores",
    "LAYER_NORM_FLOPS_PER_ELEMENT",
    "SOFTMAX_FLOPS_PER_ELEMENT",
]

LAYER_NORM_FLOPS_PER_ELEMENT = 8
SOFTMAX_FLOPS_PER_ELEMENT = 5


class LayerCost(NamedTuple):
    """FLOPs, compulsory bytes and their ratio for one call of a layer."""

    flops: pint.Quantity  #: FLOP
    bytes: pint.Quantity  #: byte
    intensity: pint.Quantity  #: FLOP/byte


def _cost(flops: int, elements: float, dtype: object) -> LayerCost:
    f = Q_(flops, "FLOP")
    b = (elements * itemsize(dtype)).to("byte")
    return LayerCost(f, b, arithmetic_intensity(f, b))


def linear(tokens: int, d_in: int, d_out: int, dtype: object = "bf16") -> LayerCost:
    """A dense layer ``Y[t, d_out] = X[t, d_in] @ W[d_in, d_out]`` on ``tokens`` rows.

    FLOP ``2 t d_in d_out``; bytes ``(t d_in + d_in d_out + t d_out) * itemsize``. At ``tokens = 1``
    (one token of autoregressive decoding) it is a matrix-vector product (GEMV).
    """
    t, i, o = require_count(tokens, "tokens"), require_count(d_in, "d_in"), require_count(d_out, "d_out")
    return _cost(2 * t * i * o, t * i + i * o + t * o, dtype)


def linear_intensity_bound(d_in: int, d_out: int, dtype: object = "bf16") -> pint.Quantity:
    """The intensity a dense layer approaches as tokens grow without bound, in FLOP/byte.

    ``lim_{t -> inf} 2 t d_in d_out / ((t d_in + d_in d_out + t d_out) s) = 2 d_in d_out / ((d_in + d_out) s)``:
    the weights' traffic is amortised to nothing, the activations' traffic is not. No batch size
    takes the layer past it.
    """
    i, o = require_count(d_in, "d_in"), require_count(d_out, "d_out")
    return (Q_(2 * i * o, "FLOP") / ((i + o) * itemsize(dtype))).to("FLOP/byte")


def tokens_to_ridge(d_in: int, d_out: int, accel: Accelerator | str, dtype: object = "bf16") -> int | None:
    """Smallest token count at which ``linear(t, d_in, d_out)`` reaches the ridge point ``R``.

    Solving ``2 t d_in d_out >= R s (t d_in + d_in d_out + t d_out)`` for ``t`` gives
    ``t >= R s d_in d_out / (2 d_in d_out - R s (d_in + d_out))``; ``None`` when the denominator is
    not positive, i.e. the layer's own bound (:func:`linear_intensity_bound`) lies below the ridge.
    """
    i, o = require_count(d_in, "d_in"), require_count(d_out, "d_out")
    acc = get(accel) if isinstance(accel, str) else accel
    ridge = roof_of(acc, dtype).ridge_point.to("FLOP/byte").m
    s = itemsize(dtype).to("byte").m
    denom = 2 * i * o - ridge * s * (i + o)
    if denom <= 0:
        return None
    t = math.ceil(ridge * s * i * o / denom - 1e-9)
    while linear(t, i, o, dtype).intensity.m < ridge:  # guard against rounding at the boundary
        t += 1
    return max(t, 1)


def conv2d_output_size(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Output length of a convolution along one axis: ``floor((size + 2 padding - kernel) / stride) + 1``."""
    size, kernel, stride = require_count(size, "size"), require_count(kernel, "kernel"), require_count(stride, "stride")
    if isinstance(padding, bool) or not isinstance(padding, int) or padding < 0:
        raise ValueError(f"padding must be a non-negative integer, got {padding!r}")
    out = (size + 2 * padding - kernel) // stride + 1
    if out < 1:
        raise ValueError(f"a kernel of {kernel} does not fit an input of {size} with padding {padding}")
    return out


def conv2d(batch: int, c_in: int, height: int, width: int, c_out: int, kernel: int = 3,
           stride: int = 1, padding: int | None = None, dtype: object = "bf16") -> LayerCost:
    """A 2-D convolution of ``batch`` images ``c_in x height x width`` with ``c_out`` square kernels.

    ``padding`` defaults to ``kernel // 2`` ("same" at stride 1). FLOP ``2 N C_out H_out W_out C_in R S``
    (one multiply-add per weight per output element); bytes: input, weights and output once each.
    """
    n, ci, co = require_count(batch, "batch"), require_count(c_in, "c_in"), require_count(c_out, "c_out")
    h, w, r = require_count(height, "height"), require_count(width, "width"), require_count(kernel, "kernel")
    pad = r // 2 if padding is None else padding
    ho, wo = conv2d_output_size(h, r, stride, pad), conv2d_output_size(w, r, stride, pad)
    flops = 2 * n * co * ho * wo * ci * r * r
    return _cost(flops, n * ci * h * w + co * ci * r * r + n * co * ho * wo, dtype)


def layer_norm(rows: int, cols: int, dtype: object = "bf16") -> LayerCost:
    """LayerNorm over the last axis of a ``rows x cols`` tensor, with gamma and beta of ``cols``.

    FLOP ``8 rows cols`` (see the module docstring); bytes ``(2 rows cols + 2 cols) * itemsize``.
    """
    r, c = require_count(rows, "rows"), require_count(cols, "cols")
    return _cost(LAYER_NORM_FLOPS_PER_ELEMENT * r * c, 2 * r * c + 2 * c, dtype)


def softmax(rows: int, cols: int, dtype: object = "bf16") -> LayerCost:
    """Row softmax of a ``rows x cols`` tensor: FLOP ``5 rows cols``, bytes ``2 rows cols * itemsize``."""
    r, c = require_count(rows, "rows"), require_count(cols, "cols")
    return _cost(SOFTMAX_FLOPS_PER_ELEMENT * r * c, 2 * r * c, dtype)


def attention_scores(batch_heads: int, q_len: int, k_len: int, head_dim: int, dtype: object = "bf16") -> LayerCost:
    """Attention scores ``S = Q K^T`` for ``batch_heads`` independent heads, written to memory.

    FLOP ``2 b q k d``; bytes ``(b q d + b k d + b q k) * itemsize`` (Q and K read, S written; a
    fused attention kernel such as FlashAttention never writes S, which is the point of fusing it).
    """
    b, q = require_count(batch_heads, "batch_heads"), require_count(q_len, "q_len")
    k, d = require_count(k_len, "k_len"), require_count(head_dim, "head_dim")
    return _cost(2 * b * q * k * d, b * q * d + b * k * d + b * q * k, dtype)
