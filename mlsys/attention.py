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
  the scores live in on-chip memory. A kernel that gives each block of ``block_m`` queries its
  own program re-reads ``K`` and ``V`` once per query block: ``(2 + 2 ceil(N / block_m)) B H N D s``.
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
                          block_m: int | None = None) -> pint.Quantity:
    """Traffic of fused (FlashAttention-style) attention, in byte.

    ``block_m=None``: compulsory traffic, ``4 B H N D s`` (Q, K, V read once, O written once).
    ``block_m`` given: each of the ``ceil(N / block_m)`` query blocks streams all of K and V,
    ``(2 + 2 ceil(N / block_m)) B H N D s``.
    """
    one = _qkvo_bytes(batch, heads, seq_len, head_dim, dtype)
    if block_m is None:
        return (4 * one).to("byte")
    blocks = math.ceil(seq_len / require_count(block_m, "block_m"))
    return ((2 + 2 * blocks) * one).to("byte")


class AttentionTraffic(NamedTuple):
    """Work and traffic of one attention forward pass, naive and fused (compulsory)."""

    flops: pint.Quantity
    naive: pint.Quantity
    fused: pint.Quantity
    scores: pint.Quantity
    ratio: float  # naive / fused bytes
    naive_intensity: pint.Quantity  # FLOP/byte
    fused_intensity: pint.Quantity  # FLOP/byte


def attention_traffic(batch: int, heads: int, seq_len: int, head_dim: int, dtype: object = "fp16",
                      causal: bool = False) -> AttentionTraffic:
    """FLOPs, naive and fused bytes, score-matrix bytes, their ratio and both arithmetic intensities.

    Intensity = ``attention_flops / bytes`` (FLOP/byte); the naive bytes do not shrink with a
    causal mask (the whole ``N x N`` matrix is written), the FLOPs a fused kernel does do.
    """
    flops = attention_flops(batch, heads, seq_len, head_dim, causal)
    naive = naive_attention_bytes(batch, heads, seq_len, head_dim, dtype)
    fused = fused_attention_bytes(batch, heads, seq_len, head_dim, dtype)
    return AttentionTraffic(
        flops=flops, naive=naive, fused=fused, scores=score_matrix_bytes(batch, heads, seq_len, dtype),
        ratio=float((naive / fused).to("").magnitude),
        naive_intensity=(flops / naive).to("FLOP/byte"), fused_intensity=(flops / fused).to("FLOP/byte"))


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
