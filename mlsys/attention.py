"""Scaled dot-product attention: FLOPs and compulsory memory traffic, naive and fused.

Shapes: batch ``B``, heads ``H``, sequence length ``N`` (queries = keys), head dimension ``D``;
``Q, K, V, O`` are ``B x H x N x D`` tensors of one dtype with ``s = itemsize(dtype)`` bytes per
element. Per (batch, head) the forward pass is ``S = Q K^T * scale`` (``N x N``), ``P =
softmax(S)`` row by row, ``O = P V``.

* **Visible pairs** ``p``: query/key pairs that take part, ``N^2`` without a mask and ``N (N + 1)
  / 2`` with the causal mask (query ``i`` sees keys ``0..i``).
* **FLOPs** (the two matmuls only): ``2 D`` per pair for ``Q K^T`` and ``2 D`` for ``P V``, so
  ``4 B H D p``. The softmax's ``O(B H p)`` exponentials and the scaling are not counted, as is
  customary when quoting attention throughput (FlashAttention papers, Triton's tutorial).
* **Naive traffic**: three kernels that each read their inputs from and write their output to
  global memory: ``S = Q K^T`` reads ``Q, K`` and writes ``S``; the softmax reads ``S`` and writes
  ``P``; ``O = P V`` reads ``P, V`` and writes ``O``. That is ``4 B H N D s`` for ``Q, K, V, O``
  plus ``4 B H N^2 s`` for the score matrix written, read, written and read again (the full
  ``N x N`` matrix is materialised even under a causal mask).
* **Fused traffic** (compulsory): ``Q, K, V`` read once and ``O`` written once, ``4 B H N D s``;
  the scores live in on-chip memory. Its intensity, ``N / s`` FLOP/byte (2048 at N = 4096 in
  fp16), is a floor on traffic, not what a FlashAttention kernel moves: ``K`` and ``V`` of one
  (batch, head) are ``2 N D s`` bytes (1 MiB at N = 4096, D = 64, fp16), more than an SM's
  shared memory (228 KiB on the H100), so they cannot stay on chip.
* **Tiled traffic** (FlashAttention; Dao et al. 2022, Theorem 2: ``Theta(N^2 D^2 / M)``): each
  block of ``block_m`` queries has its own program, which streams ``K`` and ``V`` through shared
  memory, so they are read once per query block: ``(2 + 2 ceil(N / block_m)) B H N D s``; with
  the causal mask, query block ``i`` reads only keys ``0 .. min((i + 1) block_m, N) - 1``. Its
  intensity tends to ``2 block_m / s`` FLOP/byte for ``N >> block_m`` (``block_m`` = 128 in
  fp16: about 128), independent of ``N``. The L2 may absorb some re-reads; then the HBM traffic
  lies between the tiled and the compulsory figures.
* **Score-matrix bytes**: ``B H N^2 s``; the longest sequence whose score matrix fits in
  ``memory`` bytes is ``floor(sqrt(memory / (B H s)))``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pint

from .hardware import Accelerator, get
from .numerics import itemsize
from .units import Q_, as_quantity, require_count

__all__ = [
    "visible_pairs",
    "attention_flops",
    "score_matrix_bytes",
    "naive_attention_bytes",
    "fused_attention_bytes",
    "AttentionTraffic",
    "attention_traffic",
    "flash_intensity",
    "decode_attention",
    "max_seq_len_for_scores",
]


def _shape(batch: int, heads: int, seq_len: int) -> tuple[int, int, int]:
    return (require_count(batch, "batch"), require_count(heads, "heads"), require_count(seq_len, "seq_len"))


def _causal(causal: object) -> bool:
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    return causal


def visible_pairs(seq_len: int, causal: bool = False) -> int:
    """Query/key pairs attended per (batch, head): ``N^2``, or ``N (N + 1) / 2`` when causal."""
    n = require_count(seq_len, "seq_len")
    return n * (n + 1) // 2 if _causal(causal) else n * n


def attention_flops(batch: int, heads: int, seq_len: int, head_dim: int, causal: bool = False) -> pint.Quantity:
    """FLOPs of the forward pass's two matmuls: ``4 B H D p`` with ``p = visible_pairs(N, causal)``.

    Returns FLOP. Example: B = H = 1, N = 2, D = 1: 4 pairs x 4 = 16 FLOP (causal: 3 pairs, 12).
    """
    b, h, _ = _shape(batch, heads, seq_len)
    d = require_count(head_dim, "head_dim")
    return Q_(4 * b * h * d * visible_pairs(seq_len, causal), "FLOP")


def score_matrix_bytes(batch: int, heads: int, seq_len: int, dtype: object = "fp16") -> pint.Quantity:
    """Bytes of the materialised score matrix ``S`` (or ``P``): ``B H N^2 s`` byte."""
    b, h, n = _shape(batch, heads, seq_len)
    return (b * h * n * n * itemsize(dtype)).to("byte")


def _qkvo_bytes(batch: int, heads: int, seq_len: int, head_dim: int, dtype: object) -> pint.Quantity:
    """Bytes of one ``B x H x N x D`` tensor: ``B H N D s``."""
    b, h, n = _shape(batch, heads, seq_len)
    d = require_count(head_dim, "head_dim")
    return (b * h * n * d * itemsize(dtype)).to("byte")


def naive_attention_bytes(batch: int, heads: int, seq_len: int, head_dim: int,
                          dtype: object = "fp16") -> pint.Quantity:
    """Compulsory traffic of three-kernel attention: ``4 B H N D s + 4 B H N^2 s`` byte.

    Q, K, V read and O written once (``4 B H N D s``); the score matrix written by ``Q K^T``,
    read and written by the softmax, read by ``P V`` (``4 B H N^2 s``).
    """
    return (4 * _qkvo_bytes(batch, heads, seq_len, head_dim, dtype)
            + 4 * score_matrix_bytes(batch, heads, seq_len, dtype)).to("byte")


def fused_attention_bytes(batch: int, heads: int, seq_len: int, head_dim: int, dtype: object = "fp16",
                          block_m: int | None = None, causal: bool = False) -> pint.Quantity:
    """Traffic of fused (FlashAttention-style) attention, in byte.

    ``block_m=None``: compulsory traffic, ``4 B H N D s`` (Q, K, V read once, O written once).
    ``block_m`` given: each of the ``ceil(N / block_m)`` query blocks streams all of K and V,
    ``(2 + 2 ceil(N / block_m)) B H N D s``; with ``causal``, query block ``i`` streams only the
    ``min((i + 1) block_m, N)`` keys (and values) it can see.
    """
    one = _qkvo_bytes(batch, heads, seq_len, head_dim, dtype)
    causal = _causal(causal)
    if block_m is None:
        return (4 * one).to("byte")
    bm = require_count(block_m, "block_m")
    blocks = math.ceil(seq_len / bm)
    if not causal:
        return ((2 + 2 * blocks) * one).to("byte")
    keys_read = sum(min((i + 1) * bm, seq_len) for i in range(blocks))  # keys streamed, over all query blocks
    return (2 * one + 2 * one * keys_read / seq_len).to("byte")


def flash_intensity(seq_len: int, head_dim: int, block_m: int = 128, dtype: object = "fp16",
                    causal: bool = False) -> pint.Quantity:
    """Arithmetic intensity of tiled (FlashAttention) attention against global memory, FLOP/byte.

    ``attention_flops / fused_attention_bytes(..., block_m)``; batch and heads cancel. For
    ``N >> block_m`` it tends to ``2 block_m / s`` (fp16, ``block_m`` = 128: 128 FLOP/byte): the
    query tile size sets it, not ``N``.
    """
    flops = attention_flops(1, 1, seq_len, head_dim, causal)
    return (flops / fused_attention_bytes(1, 1, seq_len, head_dim, dtype, block_m, causal)).to("FLOP/byte")


class DecodeAttention(NamedTuple):
    """One decode step's attention for one request and one layer."""

    flops: pint.Quantity  # FLOP
    bytes: pint.Quantity  # byte: the K and V cache read (the one query and output are negligible)
    intensity: pint.Quantity  # FLOP/byte


def decode_attention(context: int, heads: int, head_dim: int, kv_heads: int | None = None,
                     dtype: object = "bf16") -> DecodeAttention:
    """Attention of one new token over ``context`` cached tokens, one layer, one request.

    FLOPs ``4 H D c`` (``q k^T`` and ``p V`` for one query per head); bytes ``2 c H_kv D s`` (every
    cached key and value read once; ``H_kv = kv_heads``, fewer than ``H`` under grouped-query
    attention). Intensity ``2 (H / H_kv) / s``: 1 FLOP/byte for multi-head attention in bf16,
    whatever the context. Example: c = 1000, H = H_kv = 1, D = 64, bf16: 256,000 FLOP over 256,000 B.
    """
    c = require_count(context, "context")
    h = require_count(heads, "heads")
    d = require_count(head_dim, "head_dim")
    hkv = h if kv_heads is None else require_count(kv_heads, "kv_heads")
    if h % hkv:
        raise ValueError(f"heads ({h}) must be a multiple of kv_heads ({hkv})")
    flops = Q_(4 * h * d * c, "FLOP")
    nbytes = (2 * c * hkv * d * itemsize(dtype)).to("byte")
    return DecodeAttention(flops, nbytes, (flops / nbytes).to("FLOP/byte"))


class AttentionTraffic(NamedTuple):
    """Work and traffic of one attention forward pass, naive and fused (compulsory)."""

    flops: pint.Quantity
    naive: pint.Quantity
    fused: pint.Quantity
    scores: pint.Quantity
    ratio: float  # naive / fused bytes
    naive_intensity: pint.Quantity  # FLOP/byte
    fused_intensity: pint.Quantity  # FLOP/byte, against the compulsory bytes (a floor, N / s)
    tiled: pint.Quantity | None = None  # bytes when K and V are re-read once per query block
    tiled_intensity: pint.Quantity | None = None  # FLOP/byte against ``tiled`` (about block_m in fp16)


def attention_traffic(batch: int, heads: int, seq_len: int, head_dim: int, dtype: object = "fp16",
                      causal: bool = False, block_m: int = 128) -> AttentionTraffic:
    """FLOPs, naive, compulsory (fused) and tiled bytes, score-matrix bytes, the naive/fused ratio
    and the intensities.

    Intensity = ``attention_flops / bytes`` (FLOP/byte); the naive bytes do not shrink with a
    causal mask (the whole ``N x N`` matrix is written), the FLOPs a fused kernel does do.
    ``tiled`` re-reads K and V once per ``block_m`` queries (:func:`fused_attention_bytes`): that,
    not the compulsory figure, is what a FlashAttention kernel moves unless the L2 holds K and V.
    """
    flops = attention_flops(batch, heads, seq_len, head_dim, causal)
    naive = naive_attention_bytes(batch, heads, seq_len, head_dim, dtype)
    fused = fused_attention_bytes(batch, heads, seq_len, head_dim, dtype)
    tiled = fused_attention_bytes(batch, heads, seq_len, head_dim, dtype, block_m, causal)
    return AttentionTraffic(
        flops=flops, naive=naive, fused=fused, scores=score_matrix_bytes(batch, heads, seq_len, dtype),
        ratio=float((naive / fused).to("").magnitude),
        naive_intensity=(flops / naive).to("FLOP/byte"), fused_intensity=(flops / fused).to("FLOP/byte"),
        tiled=tiled, tiled_intensity=(flops / tiled).to("FLOP/byte"))


def max_seq_len_for_scores(batch: int, heads: int, dtype: object = "fp16",
                           memory: object | Accelerator | str = "H100") -> int:
    """Longest ``N`` whose score matrix fits: ``floor(sqrt(memory / (B H s)))``.

    ``memory`` is a quantity in bytes, an :class:`~mlsys.hardware.Accelerator` or an accelerator
    name (its ``memory_capacity``). Only the one ``B x H x N x N`` matrix is counted; Q, K, V and
    the framework's other tensors would need room too, so the true limit is lower.
    """
    b = require_count(batch, "batch")
    h = require_count(heads, "heads")
    if isinstance(memory, str):
        memory = get(memory)
    if isinstance(memory, Accelerator):
        memory = memory.memory_capacity
    mem = as_quantity(memory, "byte", "memory").to("byte").magnitude
    per = b * h * itemsize(dtype).to("byte").magnitude  # bytes per unit of N^2
    if mem < per:
        raise ValueError(f"memory {mem:g} B holds no score matrix for batch={b}, heads={h} ({per:g} B per N^2)")
    n = math.isqrt(int(mem // per))
    while (n + 1) ** 2 * per <= mem:  # guard the float division at the boundary
        n += 1
    while n * n * per > mem:
        n -= 1
    return n
