"""Memory of training a transformer on one GPU: model states plus activations.

**Model states** (per parameter, mixed-precision Adam, as in S. Rajbhandari et al., "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models", SC 2020, arXiv:1910.02054, section 3.1):

    weights    itemsize(weight_dtype)        2 B in bf16/fp16
    gradients  itemsize(grad_dtype)          2 B
    optimizer  fp32 master copy 4 B (if master_weights) + Adam's two moments 2 * 4 B

giving the well-known ``2 + 2 + 12 = 16`` bytes per parameter. Plain SGD keeps no optimizer state
(``optimizer="sgd"``); SGD with momentum keeps one fp32 vector (``"sgd_momentum"``). With ZeRO,
``zero_stage`` 1, 2 and 3 divide the optimizer state, then also gradients, then also weights by
the data-parallel degree ``dp``.

**Activations** stored for the backward pass, per layer, with 16-bit activations, sequence
length ``s``, micro-batch ``b``, width ``h`` and ``a`` heads, after V. Korthikanti et al.,
"Reducing Activation Recomputation in Large Transformer Models", MLSys 2023, arXiv:2205.05198,
section 4 (equations 1-2 and Table 2), for tensor parallelism ``t``:

    no recomputation, no sequence parallelism   s b h (10 + 24 / t + 5 a s / (h t))
    no recomputation, sequence parallelism      s b h (34 + 5 a s / h) / t
    selective recomputation (attention scores)  s b h (10 + 24 / t)       (with SP: 34 s b h / t)
    full recomputation (keep each layer's input) 2 s b h                  (Table 2 gives no t)

bytes per layer, times ``L`` layers. The ``5 a s / h`` term is the attention score matrices
(``a s^2`` per sequence: softmax input and output, 2 B each, and the 1-byte dropout mask), the
term selective recomputation drops. The formula is derived for a GPT-style layer (MLP of ``4 h``,
multi-head attention, dropout); for SwiGLU MLPs and GQA it is an approximation. Embeddings,
the output logits and temporary buffers are not counted.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import pint

from .numerics import itemsize
from .transformer import ModelShape, get_model
from .units import Q_, require_count

__all__ = [
    "OPTIMIZERS",
    "RECOMPUTE",
    "ModelStates",
    "model_state_bytes",
    "activation_bytes_per_layer",
    "activation_bytes",
    "TrainingMemory",
    "training_memory",
    "mlp_block_activation_bytes",
    "mlp_block_weight_bytes",
]

#: optimizer name -> fp32 state vectors kept per parameter (besides any master copy)
OPTIMIZERS: dict[str, int] = {"adam": 2, "sgd_momentum": 1, "sgd": 0}
RECOMPUTE = ("none", "selective", "full")
_FP32 = 4  # bytes of one fp32 optimizer value


class ModelStates(NamedTuple):
    """Bytes of weights, gradients and optimizer state (master weights included) per GPU."""

    weights: pint.Quantity
    gradients: pint.Quantity
    optimizer: pint.Quantity
    total: pint.Quantity


def _params(params: int | str | ModelShape) -> int:
    if isinstance(params, (str, ModelShape)):
        return get_model(params).params
    return require_count(params, "params")


def model_state_bytes(
    params: int | str | ModelShape,
    weight_dtype: object = "bf16",
    grad_dtype: object = "bf16",
    optimizer: str = "adam",
    master_weights: bool = True,
    zero_stage: int = 0,
    dp: int = 1,
) -> ModelStates:
    """Weights, gradients and optimizer state of ``params`` parameters (a count or a model name), bytes.

    Per parameter: ``itemsize(weight_dtype)``, ``itemsize(grad_dtype)`` and
    ``4 * (master_weights + OPTIMIZERS[optimizer])``; ZeRO stage ``z`` of ``dp`` ranks divides the
    optimizer state (z >= 1), gradients (z >= 2) and weights (z = 3) by ``dp``. Mixed-precision
    Adam without ZeRO: 16 B per parameter.
    """
    n = _params(params)
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {', '.join(OPTIMIZERS)}")
    if not isinstance(master_weights, bool):
        raise TypeError(f"master_weights must be True or False, got {master_weights!r}")
    z = require_count(zero_stage, "zero_stage", minimum=0)
    if z > 3:
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {z}")
    d = require_count(dp, "dp")
    weights = n * itemsize(weight_dtype) / (d if z >= 3 else 1)
    grads = n * itemsize(grad_dtype) / (d if z >= 2 else 1)
    opt = Q_(n * _FP32 * (int(master_weights) + OPTIMIZERS[optimizer]), "byte") / (d if z >= 1 else 1)
    weights, grads, opt = weights.to("byte"), grads.to("byte"), opt.to("byte")
    return ModelStates(weights, grads, opt, (weights + grads + opt).to("byte"))


def activation_bytes_per_layer(
    seq_len: int,
    micro_batch: int,
    hidden: int,
    heads: int,
    recompute: Literal["none", "selective", "full"] = "none",
    tensor_parallel: int = 1,
    sequence_parallel: bool = False,
) -> pint.Quantity:
    """Activation bytes one transformer layer keeps for backward (Korthikanti et al. 2022; module docstring)."""
    s, b = require_count(seq_len, "seq_len"), require_count(micro_batch, "micro_batch")
    h, a = require_count(hidden, "hidden"), require_count(heads, "heads")
    t = require_count(tensor_parallel, "tensor_parallel")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    if not isinstance(sequence_parallel, bool):
        raise TypeError(f"sequence_parallel must be True or False, got {sequence_parallel!r}")
    sbh = s * b * h
    if recompute == "full":
        value = 2 * sbh
    elif sequence_parallel:
        value = sbh * (34 + (5 * a * s / h if recompute == "none" else 0)) / t
    else:
        value = sbh * (10 + 24 / t + (5 * a * s / (h * t) if recompute == "none" else 0))
    return Q_(value, "byte")


def activation_bytes(
    model: str | ModelShape,
    seq_len: int,
    micro_batch: int = 1,
    recompute: Literal["none", "selective", "full"] = "none",
    tensor_parallel: int = 1,
    sequence_parallel: bool = False,
) -> pint.Quantity:
    """``L * activation_bytes_per_layer`` for a model shape (``h = d_model``, ``a = heads``), bytes."""
    m = get_model(model)
    per_layer = activation_bytes_per_layer(seq_len, micro_batch, m.d_model, m.heads, recompute,
                                           tensor_parallel, sequence_parallel)
    return (m.layers * per_layer).to("byte")


class TrainingMemory(NamedTuple):
    """Model states and activations of one training configuration, and their sum (bytes)."""

    states: ModelStates
    activations: pint.Quantity
    total: pint.Quantity


def training_memory(
    model: str | ModelShape,
    seq_len: int,
    micro_batch: int = 1,
    recompute: Literal["none", "selective", "full"] = "none",
    weight_dtype: object = "bf16",
    optimizer: str = "adam",
    zero_stage: int = 0,
    dp: int = 1,
) -> TrainingMemory:
    """Bytes one GPU needs to train ``model`` (no tensor parallelism): model states + activations."""
    m = get_model(model)
    states = model_state_bytes(m, weight_dtype, weight_dtype, optimizer, True, zero_stage, dp)
    acts = activation_bytes(m, seq_len, micro_batch, recompute)
    return TrainingMemory(states, acts, (states.total + acts).to("byte"))


def mlp_block_activation_bytes(tokens: int, d: int, dtype: object = "bf16") -> pint.Quantity:
    """Activations autograd saves for one MLP block ``Linear(d, 4d)``, GELU, ``Linear(4d, d)``, in byte.

    The first linear keeps its input (``tokens x d``), GELU its input (``tokens x 4d``) and the second
    linear its input, GELU's output (``tokens x 4d``): ``9 * tokens * d`` values of ``itemsize(dtype)``
    bytes. (Chapter 1 checks the count against what autograd actually saves.)
    """
    tokens, d = require_count(tokens, "tokens"), require_count(d, "d")
    return (9 * tokens * d * itemsize(dtype)).to("byte")


def mlp_block_weight_bytes(d: int, dtype: object = "bf16") -> pint.Quantity:
    """Weights of the same MLP block, biases ignored: ``d x 4d`` and ``4d x d``, ``8 d^2 * itemsize`` byte."""
    d = require_count(d, "d")
    return (8 * d * d * itemsize(dtype)).to("byte")
