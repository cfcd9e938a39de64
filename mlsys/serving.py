"""LLM serving from the roofline: KV-cache size, prefill and decode times, the compute-bound batch.

A decoder-only transformer (:mod:`mlsys.transformer`) serves a request in two phases:

* **Prefill** runs the whole prompt of ``S`` tokens through the model at once: a big matmul per
  weight matrix, so it is usually compute-bound.
* **Decode** produces one token per step for each of ``b`` requests in the batch: every step
  reads all the weights (and each request's KV cache) to do ``2`` FLOPs per weight per request,
  so at small batches it is memory-bound, and batching is what buys throughput.

**KV cache.** Each layer stores a key and a value vector of ``kv_heads * head_dim`` elements per
token, so

    kv_bytes_per_token = 2 * L * kv_heads * head_dim * itemsize

(128 KiB for Llama-3-8B in bf16: 2 * 32 * 8 * 128 * 2 B; GQA divides it by ``heads / kv_heads`` = 4
compared with full multi-head attention). A request of ``T`` tokens holds ``T`` times that.

**Times.** Each phase's time is its roofline lower bound (:func:`mlsys.roofline.time_lower_bound`)
with the FLOPs of :func:`mlsys.transformer.forward_flops` and the bytes below. Bytes count the
matmul weights once per step (``matmul_params * itemsize``; the embedding rows a step gathers
are negligible), the KV cache read by decode (``b * c * kv_bytes_per_token`` at context ``c``) and
written by prefill (``b * S * kv_bytes_per_token``). Activations are assumed to stay on chip and
launch overheads are ignored, so real times are longer: this is the ceiling the hardware allows
(the same model as R. Pope et al., "Efficiently Scaling Transformer Inference", MLSys 2023,
arXiv:2211.05102, section 2, and the "LLM inference" chapter of J. Austin et al., "How to Scale
Your Model", 2025, https://jax-ml.github.io/scaling-book/inference/).

**The batch at which decode turns compute-bound.** A step of ``b`` requests at context ``c`` does
``F = b (2 N_m + 4 L c a d_h)`` FLOPs and moves ``W + b c K`` bytes (``N_m`` matmul weights,
``W = N_m * itemsize``, ``K = kv_bytes_per_token``). It is compute-bound once ``F / P >= bytes / B``:

    b* = W / B / ((2 N_m + 4 L c a d_h) / P - c K / B)

At ``c = 0`` this is ``b* = P * itemsize / (2 B)`` = ridge point * itemsize / 2: about 296 requests
for bf16 on an H100 (989.5 TFLOP/s * 2 B / (2 * 3.35 TB/s) = 295.4). If the bracket is not positive
(long contexts: the KV cache grows as fast as the FLOPs), decode never turns compute-bound and
:func:`decode_critical_batch` returns ``None``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import pint

from . import comm
from .hardware import Accelerator, get
from .numerics import itemsize
from .roofline import Roof, roof_of, time_lower_bound
from .transformer import ModelShape, forward_flops, get_model
from .units import Q_, require_count

__all__ = [
    "tp_decode_comm_time",
    "kv_cache_bytes_per_token",
    "kv_cache_bytes",
    "weight_bytes",
    "resident_weight_bytes",
    "prefill_time",
    "decode_step_time",
    "decode_throughput",
    "decode_critical_batch",
    "max_batch_in_memory",
    "PhaseCost",
    "prefill_cost",
    "decode_cost",
    "kv_share",
    "resident_bytes_per_chip",
    "decode_cost_per_chip",
]


class PhaseCost(NamedTuple):
    """FLOPs and bytes of one serving phase (a prefill, or one decode step)."""

    flops: pint.Quantity  #: FLOP
    bytes: pint.Quantity  #: byte


def kv_cache_bytes_per_token(model: str | ModelShape, dtype: object = "bf16") -> pint.Quantity:
    """KV-cache bytes per token of context: ``2 * L * kv_heads * head_dim * itemsize(dtype)``."""
    m = get_model(model)
    return (2 * m.layers * m.kv_width * itemsize(dtype)).to("byte")


def kv_cache_bytes(model: str | ModelShape, tokens: int, batch: int = 1, dtype: object = "bf16") -> pint.Quantity:
    """KV cache of ``batch`` requests of ``tokens`` tokens each: ``batch * tokens * kv_cache_bytes_per_token``."""
    t, b = require_count(tokens, "tokens"), require_count(batch, "batch")
    return (b * t * kv_cache_bytes_per_token(model, dtype)).to("byte")


def weight_bytes(model: str | ModelShape, dtype: object = "bf16") -> pint.Quantity:
    """Bytes of matmul weights read per forward step: ``matmul_params * itemsize(dtype)``."""
    return (get_model(model).matmul_params * itemsize(dtype)).to("byte")


def resident_weight_bytes(model: str | ModelShape, dtype: object = "bf16") -> pint.Quantity:
    """Bytes of every weight a chip must hold: ``params * itemsize(dtype)``.

    Includes the token-embedding table, which :func:`weight_bytes` leaves out because a decode step
    reads only one row of it per token (and a tied output projection is counted once).
    """
    return (get_model(model).params * itemsize(dtype)).to("byte")


def prefill_cost(model: str | ModelShape, prompt_tokens: int, batch: int = 1, dtype: object = "bf16") -> PhaseCost:
    """FLOPs ``b * forward_flops(S, 0)`` and bytes ``W + b S K`` of prefilling ``b`` prompts of ``S`` tokens."""
    m = get_model(model)
    s, b = require_count(prompt_tokens, "prompt_tokens"), require_count(batch, "batch")
    flops = b * forward_flops(m, s, 0)
    nbytes = weight_bytes(m, dtype) + b * s * kv_cache_bytes_per_token(m, dtype)
    return PhaseCost(flops.to("FLOP"), nbytes.to("byte"))


def decode_cost(model: str | ModelShape, context: int, batch: int = 1, dtype: object = "bf16") -> PhaseCost:
    """FLOPs ``b * forward_flops(1, c)`` and bytes ``W + b c K`` of one decode step at context ``c``.

    ``context`` is the number of tokens already in each request's KV cache (>= 0).
    """
    m = get_model(model)
    c, b = require_count(context, "context", minimum=0), require_count(batch, "batch")
    flops = b * forward_flops(m, 1, c)
    nbytes = weight_bytes(m, dtype) + b * c * kv_cache_bytes_per_token(m, dtype)
    return PhaseCost(flops.to("FLOP"), nbytes.to("byte"))


def prefill_time(
    model: str | ModelShape, prompt_tokens: int, accel: Accelerator | str | Roof, dtype: object = "bf16", batch: int = 1
) -> pint.Quantity:
    """Roofline lower bound on prefill time, ``max(F / P, bytes / B)`` of :func:`prefill_cost`, in s."""
    cost = prefill_cost(model, prompt_tokens, batch, dtype)
    return time_lower_bound(cost.flops, cost.bytes, accel, dtype)


def decode_step_time(
    model: str | ModelShape, context: int, accel: Accelerator | str | Roof, dtype: object = "bf16", batch: int = 1
) -> pint.Quantity:
    """Roofline lower bound on one decode step, ``max(F / P, bytes / B)`` of :func:`decode_cost`, in s."""
    cost = decode_cost(model, context, batch, dtype)
    return time_lower_bound(cost.flops, cost.bytes, accel, dtype)


def decode_throughput(
    model: str | ModelShape, context: int, accel: Accelerator | str | Roof, dtype: object = "bf16", batch: int = 1
) -> pint.Quantity:
    """Upper bound on generated tokens per second: ``batch / decode_step_time``, in 1/s."""
    b = require_count(batch, "batch")
    return (b / decode_step_time(model, context, accel, dtype, b)).to("1/s")


def decode_critical_batch(
    model: str | ModelShape, accel: Accelerator | str | Roof, dtype: object = "bf16", context: int = 0
) -> int | None:
    """Smallest batch at which a decode step at context ``c`` is compute-bound (module docstring).

    ``ceil(W / B / ((2 N_m + 4 L c a d_h) / P - c K / B))``, or ``None`` when the bracket is not
    positive (then no batch makes decode compute-bound: the KV traffic grows as fast as the FLOPs).
    """
    m = get_model(model)
    c = require_count(context, "context", minimum=0)
    roof = roof_of(accel, dtype)
    per_request = decode_cost(m, c, 1, dtype)
    w = weight_bytes(m, dtype)
    kv = per_request.bytes - w  # c K
    slope = (per_request.flops / roof.peak - kv / roof.bandwidth).to("s").m
    if slope <= 0:
        return None
    return max(1, math.ceil((w / roof.bandwidth).to("s").m / slope))


def max_batch_in_memory(
    model: str | ModelShape, accel: Accelerator | str, tokens: int, dtype: object = "bf16"
) -> int:
    """Requests of ``tokens`` tokens whose KV caches fit beside the weights in the device memory.

    ``floor((memory_capacity - params * itemsize) / (tokens * kv_cache_bytes_per_token))``: all
    parameters are stored (the embedding table too), activations and the framework's workspace
    are ignored, so real servers fit fewer. 0 when the weights alone do not fit.
    """
    m = get_model(model)
    acc = get(accel) if isinstance(accel, str) else accel
    if not isinstance(acc, Accelerator):
        raise TypeError(f"accel must be an Accelerator or its name, got {accel!r}")
    free = acc.memory_capacity - m.params * itemsize(dtype)
    per_request = kv_cache_bytes(m, tokens, 1, dtype)
    if free.to("byte").m <= 0:
        return 0
    return int((free / per_request).to("").m // 1)


# ----------------------------------------------------------------------------------------------
# tensor parallelism: what one of ``t`` chips holds and reads


def kv_share(model: str | ModelShape, degree: int) -> int:
    """How many chips share one copy of the KV cache under ``degree``-way tensor parallelism:
    ``min(degree, kv_heads)``.

    Each chip takes whole query heads. Up to ``kv_heads`` chips, each holds ``kv_heads / t`` of the
    key/value heads, so the cache is split ``t`` ways. Past that, every chip needs the key/value head
    its query heads use, so each KV head is copied ``t / kv_heads`` times and each chip holds
    ``1 / kv_heads`` of the cache: Llama-3-70B (8 KV heads) on 16 chips holds two copies.
    """
    m = get_model(model)
    t = require_count(degree, "degree")
    return min(t, m.kv_heads)


def resident_bytes_per_chip(model: str | ModelShape, context: int, batch: int, degree: int,
                            dtype: object = "bf16") -> pint.Quantity:
    """Bytes one chip holds when serving ``batch`` requests of ``context`` tokens ``degree``-way:
    ``params * itemsize / t + kv_cache_bytes / min(t, kv_heads)``, in byte."""
    t = require_count(degree, "degree")
    weights = resident_weight_bytes(model, dtype) / t
    return (weights + kv_cache_bytes(model, context, batch, dtype) / kv_share(model, t)).to("byte")


def decode_cost_per_chip(model: str | ModelShape, context: int, batch: int, degree: int,
                         dtype: object = "bf16") -> PhaseCost:
    """One chip's share of a decode step under ``degree``-way tensor parallelism.

    FLOPs ``b * forward_flops(1, c) / t`` (the heads and matmul columns split evenly); bytes
    ``W / t + b c K / min(t, kv_heads)`` (each chip reads its slice of the weights and every KV head
    it holds, copies included). Communication is not counted.
    """
    m = get_model(model)
    t = require_count(degree, "degree")
    whole = decode_cost(m, context, batch, dtype)
    kv = whole.bytes - weight_bytes(m, dtype)
    nbytes = weight_bytes(m, dtype) / t + kv / kv_share(m, t)
    return PhaseCost((whole.flops / t).to("FLOP"), nbytes.to("byte"))


def tp_decode_comm_time(model: str | ModelShape, batch: int, degree: int, bandwidth: object,
                        latency: object = 0.0, dtype: object = "bf16") -> pint.Quantity:
    """The all-reduces of one tensor-parallel decode step, in seconds (what the per-chip cost leaves out).

    Megatron-style tensor parallelism all-reduces each layer's output twice (after attention, after the
    MLP): ``2 * layers`` ring all-reduces of ``batch * d_model * itemsize`` bytes over ``degree`` chips,
    each ``2 (t - 1) latency + 2 (t - 1) / t * n / bandwidth`` (:func:`mlsys.comm.allreduce_time`).
    ``bandwidth`` is per chip per direction, or an accelerator whose link figure is used; ``latency`` is
    per ring step, in seconds. One chip (``degree == 1``) communicates nothing.
    """
    m = get_model(model)
    t, b = require_count(degree, "degree"), require_count(batch, "batch")
    if t == 1:
        return Q_(0.0, "s")
    nbytes = (b * m.d_model * itemsize(dtype)).to("B")
    lat = latency if isinstance(latency, pint.Quantity) else Q_(latency, "s")
    return (2 * m.layers * comm.allreduce_time(nbytes, t, bandwidth, lat)).to("s")
