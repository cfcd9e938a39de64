"""Communication against compute, per layer: when data, tensor and pipeline parallelism stop paying.

The scaling-book's method (J. Austin et al., *How to Scale Your Model*, 2025, part 5 "How to
parallelize a transformer for training"): set the time a block's matmuls take against the time its
communication takes; the parallelism is *communication-bound* when the second is longer, and then no
amount of overlap hides it. A block holds ``P`` weights (a transformer layer: ``4 D^2`` for attention
with as many key/value heads as query heads, ``3 D F`` for a SwiGLU MLP, ``2 D F`` for a plain one),
takes ``b`` tokens of width ``D`` and works in values of ``s`` bytes (2 for bf16), on chips of peak
``C`` FLOP/s joined by links of ``W`` byte/s per direction. A forward pass costs ``2 b P`` FLOP, a
backward pass ``4 b P``.

* **data parallel**, ``p`` replicas, ``b`` tokens per chip: the gradients (``P s`` bytes) are
  all-reduced under the backward pass: ``4 b P / C`` against ``2 (p - 1) / p * P s / W``. Compute
  covers communication when ``b >= (p - 1) / p * s / 2 * C / W`` tokens per chip
  (:func:`dp_critical_tokens`; ``C / W`` for bf16 and large ``p``, the scaling-book's bound).
* **tensor parallel** (Megatron), degree ``t``: each chip holds ``P / t`` of the weights and, in the
  forward pass, all-reduces the ``[b, D]`` output ``a`` times per block (``a = 1`` per attention or
  MLP block, 2 per transformer layer) before the next block can start: ``2 b P / (t C)`` against
  ``a * 2 (t - 1) / t * b D s / W``. Compute covers communication when
  ``t - 1 <= P W / (a D s C)``, whatever the batch (:func:`tp_max_degree`; for one MLP block of
  ``2 D F`` weights in bf16, ``t - 1 <= F W / C``). The backward pass does twice the compute for the
  same number of all-reduces, so the forward pass binds first.
* **pipeline parallel**: a stage of ``P`` weights sends the ``[b, D]`` activations to the next
  stage once per forward pass: ``2 b P / C`` against ``b D s / W``, bound only when
  ``2 P / D < s C / W``, which no real layer reaches; a pipeline's cost is its bubble, not its bytes.

Large messages (latency ignored); times in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import pint

from .comm import allreduce_time, link_bandwidth
from .units import Q_, positive, require_count

__all__ = ["LayerBalance", "pipeline_bubble", "data_parallel", "tensor_parallel", "pipeline_parallel", "dp_critical_tokens",
           "tp_max_degree"]


@dataclass(frozen=True)
class LayerBalance:
    """One block's compute and communication time on one chip."""

    compute: pint.Quantity  #: seconds of matmul at peak
    comm: pint.Quantity     #: seconds of communication at the link bandwidth

    @property
    def ratio(self) -> float:
        """``comm / compute``: above 1 the block is communication-bound."""
        return float((self.comm / self.compute).to(""))

    @property
    def comm_bound(self) -> bool:
        """Whether communication takes longer than compute."""
        return self.ratio > 1


def _count(value: object, name: str) -> int:
    return require_count(value, name)


def _peak(value: object) -> pint.Quantity:
    return positive(value, "FLOP/s", "peak")


def data_parallel(block_params: int, tokens_per_chip: int, replicas: int, peak: object, bandwidth: object,
                  bytes_per_value: int = 2) -> LayerBalance:
    """Data parallelism: backward ``4 b P / C`` against a ring all-reduce of ``P s`` gradient bytes over ``p``."""
    p_w, b = _count(block_params, "block_params"), _count(tokens_per_chip, "tokens_per_chip")
    compute = (Q_(4 * b * p_w, "FLOP") / _peak(peak)).to("s")
    grads = Q_(p_w * _count(bytes_per_value, "bytes_per_value"), "B")
    return LayerBalance(compute, allreduce_time(grads, replicas, bandwidth))


def tensor_parallel(block_params: int, d_model: int, tokens: int, degree: int, peak: object, bandwidth: object,
                    allreduces: int = 1, bytes_per_value: int = 2) -> LayerBalance:
    """Tensor parallelism of degree ``t``, forward pass: ``2 b P / (t C)`` against ``a`` ring all-reduces of ``b D s`` bytes."""
    p_w, d, b = _count(block_params, "block_params"), _count(d_model, "d_model"), _count(tokens, "tokens")
    t = _count(degree, "degree")
    compute = (Q_(2 * b * p_w, "FLOP") / t / _peak(peak)).to("s")
    act = Q_(b * d * _count(bytes_per_value, "bytes_per_value"), "B")
    return LayerBalance(compute, _count(allreduces, "allreduces") * allreduce_time(act, t, bandwidth))


def pipeline_parallel(stage_params: int, d_model: int, tokens: int, peak: object, bandwidth: object,
                      bytes_per_value: int = 2) -> LayerBalance:
    """A pipeline stage of ``P`` weights, forward pass: ``2 b P / C`` against ``b D s / W`` to the next stage."""
    p_w, d, b = _count(stage_params, "stage_params"), _count(d_model, "d_model"), _count(tokens, "tokens")
    compute = (Q_(2 * b * p_w, "FLOP") / _peak(peak)).to("s")
    sent = Q_(b * d * _count(bytes_per_value, "bytes_per_value"), "B")
    return LayerBalance(compute, (sent / link_bandwidth(bandwidth)).to("s"))


def dp_critical_tokens(replicas: int, peak: object, bandwidth: object, bytes_per_value: int = 2) -> float:
    """Tokens per chip at which data parallelism's backward compute equals its all-reduce: ``(p-1)/p * s/2 * C/W``."""
    p = _count(replicas, "replicas")
    s = _count(bytes_per_value, "bytes_per_value")
    return float(((p - 1) / p * s / 2 * _peak(peak) / link_bandwidth(bandwidth)).to("FLOP/B").m)


def tp_max_degree(block_params: int, d_model: int, peak: object, bandwidth: object, allreduces: int = 1,
                  bytes_per_value: int = 2) -> float:
    """Largest tensor-parallel degree whose forward compute covers its all-reduces: ``1 + P W / (a D s C)``."""
    p_w, d = _count(block_params, "block_params"), _count(d_model, "d_model")
    a, s = _count(allreduces, "allreduces"), _count(bytes_per_value, "bytes_per_value")
    return float(1 + p_w / (a * d * s) * (link_bandwidth(bandwidth) / _peak(peak)).to("B/FLOP").m)


def pipeline_bubble(stages: int, microbatches: int, interleave: int = 1) -> float:
    """Share of a pipeline-parallel step that each stage spends idle (the "bubble"), GPipe and 1F1B:
    ``(p - 1) / (m + p - 1)`` for ``p`` stages and ``m`` micro-batches; with ``v`` interleaved model
    chunks per stage (Narayanan et al. 2021) the fill shrinks ``v``-fold: ``(p - 1) / (v m + p - 1)``.
    0 for one stage."""
    p, m, v = _count(stages, "stages"), _count(microbatches, "microbatches"), _count(interleave, "interleave")
    return (p - 1) / (v * m + p - 1)
