"""Transformer model shapes (loaded from ``mlsys/data/models.toml``) and what follows from them.

A decoder-only transformer of ``L`` layers, width ``d`` (``d_model``), ``a`` query heads and
``k`` key/value heads of size ``d_h``, MLP width ``f`` and vocabulary ``V``:

* Parameters per layer: attention ``d * a d_h`` (Q) + ``2 * d * k d_h`` (K, V) + ``a d_h * d``
  (output); MLP ``2 d f`` (GELU: up and down) or ``3 d f`` (SwiGLU: gate, up, down); biases
  and norm weights as the shape says. Plus the embedding ``V d``, a learned position table
  (``context * d``) if any, the final norm, and an output projection ``V d`` unless tied.
  :attr:`ModelShape.params` reproduces the published counts exactly (GPT-2 small 124,439,808;
  Llama-3-8B 8,030,261,248; Llama-3-70B 70,553,706,496), which the loader checks.
* Matmul weights per token (:attr:`ModelShape.matmul_params`): the attention and MLP matrices of
  every layer plus the output projection (``V d``, tied or not: the logits are always computed).
  The forward pass costs ``2`` FLOPs per matmul weight per token (a multiply and an add).
* Attention scores and the weighted sum of values: a token at position ``t`` (attending to ``t``
  tokens, itself included, causal) costs ``4 L t a d_h`` FLOPs (``2 t a d_h`` for ``q K^T`` and
  ``2 t a d_h`` for ``P V`` in each layer). GQA shares K and V between query heads but does not
  change these FLOPs, only the K/V bytes.

Sources of the shapes: the models' Hugging Face ``config.json`` files and papers (see the data
file). The FLOP counting follows J. Kaplan et al., "Scaling Laws for Neural Language Models",
arXiv:2001.08361 (2020), Table 1 (``2 N`` per token plus a context-dependent attention term),
with the attention term counted exactly per position instead of averaged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import pint

from .datafile import NamedTable, read_named
from .hardware import Source
from .units import Q_, require_count

__all__ = [
    "ModelShape",
    "ModelSpecError",
    "MODELS_FILE",
    "load_models",
    "get_model",
    "model_names",
    "attention_flops",
    "forward_flops",
]

MODELS_FILE = Path(str(resources.files("mlsys") / "data" / "models.toml"))

_COUNTS = ("layers", "d_model", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab", "context", "params")
_CHOICES = {"mlp": ("gelu", "swiglu"), "norm": ("layernorm", "rmsnorm"), "positions": ("learned", "rope")}
_FLAGS = ("bias", "tied_embeddings")


class ModelSpecError(ValueError):
    """The model-shape data file is malformed; the message names the model and field."""


@dataclass(frozen=True)
class ModelShape:
    """The shape of a decoder-only transformer; counts are ints, see the module docstring."""

    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn_hidden: int
    vocab: int
    context: int
    mlp: str
    norm: str
    bias: bool
    positions: str
    tied_embeddings: bool
    published_params: int
    source: Source
    aliases: tuple[str, ...] = ()

    @property
    def attention_width(self) -> int:
        """``heads * head_dim``: the width of the concatenated query heads."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """``kv_heads * head_dim``: the width of K (and of V) per token and layer."""
        return self.kv_heads * self.head_dim

    @property
    def layer_matmul_params(self) -> int:
        """Weights of one layer's matrices: ``2 d a d_h + 2 d k d_h + (2 or 3) d f``."""
        d = self.d_model
        attn = 2 * d * self.attention_width + 2 * d * self.kv_width
        mlp = (3 if self.mlp == "swiglu" else 2) * d * self.ffn_hidden
        return attn + mlp

    @property
    def layer_params(self) -> int:
        """All parameters of one layer: matrices, their biases (if any) and two norms."""
        d = self.d_model
        biases = 0
        if self.bias:  # one bias per output feature of each matrix
            mlp_out = (2 if self.mlp == "swiglu" else 1) * self.ffn_hidden + d
            biases = self.attention_width + 2 * self.kv_width + d + mlp_out
        norms = 2 * d * (2 if self.norm == "layernorm" else 1)
        return self.layer_matmul_params + biases + norms

    @property
    def embedding_params(self) -> int:
        """Token embedding ``V d`` plus a learned position table ``context d`` (none with RoPE)."""
        return self.vocab * self.d_model + (self.context * self.d_model if self.positions == "learned" else 0)

    @property
    def params(self) -> int:
        """Total parameters: ``L * layer_params + embeddings + final norm + (V d unless tied)``."""
        final_norm = self.d_model * (2 if self.norm == "layernorm" else 1)
        head = 0 if self.tied_embeddings else self.vocab * self.d_model
        return self.layers * self.layer_params + self.embedding_params + final_norm + head

    @property
    def matmul_params(self) -> int:
        """Weights used in matmuls per token: ``L * layer_matmul_params + V d`` (the output projection)."""
        return self.layers * self.layer_matmul_params + self.vocab * self.d_model

    def __str__(self) -> str:
        return f"{self.name} ({self.params / 1e9:.2f} B parameters, {self.layers} layers, d_model {self.d_model})"


def _build(raw: dict[str, Any]) -> ModelShape:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ModelSpecError(f"a [[model]] entry has no name: {raw!r}")
    known = {"name", "aliases", "source", *_COUNTS, *_CHOICES, *_FLAGS}
    unknown = set(raw) - known
    missing = known - {"aliases"} - set(raw)
    if unknown or missing:
        raise ModelSpecError(f"model {name!r}: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
    try:
        counts = {k: require_count(raw[k], f"{name}.{k}") for k in _COUNTS}
    except (TypeError, ValueError) as exc:
        raise ModelSpecError(str(exc)) from None
    for k, allowed in _CHOICES.items():
        if raw[k] not in allowed:
            raise ModelSpecError(f"{name}.{k}: expected one of {allowed}, got {raw[k]!r}")
    for k in _FLAGS:
        if not isinstance(raw[k], bool):
            raise ModelSpecError(f"{name}.{k}: expected true or false, got {raw[k]!r}")
    src = raw["source"]
    if not isinstance(src, dict) or not {"title", "url", "date"} <= src.keys():
        raise ModelSpecError(f"{name}.source: expected a table with title, url and date")
    if counts["heads"] % counts["kv_heads"]:
        raise ModelSpecError(f"{name}: heads ({counts['heads']}) must be a multiple of kv_heads ({counts['kv_heads']})")
    shape = ModelShape(
        name=name, aliases=tuple(raw.get("aliases", ())),
        layers=counts["layers"], d_model=counts["d_model"], heads=counts["heads"], kv_heads=counts["kv_heads"],
        head_dim=counts["head_dim"], ffn_hidden=counts["ffn_hidden"], vocab=counts["vocab"],
        context=counts["context"], mlp=raw["mlp"], norm=raw["norm"], bias=raw["bias"],
        positions=raw["positions"], tied_embeddings=raw["tied_embeddings"], published_params=counts["params"],
        source=Source(src["title"], src["url"], str(src["date"])),
    )
    if abs(shape.params - shape.published_params) > 0.005 * shape.published_params:
        raise ModelSpecError(f"{name}: the shape gives {shape.params:,} parameters, the source says "
                             f"{shape.published_params:,}; check the fields")
    return shape


def load_models(path: str | Path | None = None) -> dict[str, ModelShape]:
    """Load and validate a model-shape file (default ``$MLSYS_MODELS`` or the packaged one): name -> shape."""
    return _table(path).entries


def _table(path: str | Path | None = None) -> NamedTable[ModelShape]:
    path = Path(path) if path is not None else Path(os.environ.get("MLSYS_MODELS") or MODELS_FILE)
    return read_named(path, "model", _build, ModelSpecError, "MLSYS_MODELS")


@lru_cache(maxsize=1)
def _registry() -> NamedTable[ModelShape]:
    return _table()


def model_names() -> list[str]:
    """Canonical names of the models in the data file, in file order."""
    return list(_registry().entries)


def get_model(name: str | ModelShape) -> ModelShape:
    """A model shape by name or alias, ignoring case, spaces, '-', '_' and '.'; a shape passes through."""
    if isinstance(name, ModelShape):
        return name
    return _registry().get(name)


def attention_flops(model: str | ModelShape, position: int) -> pint.Quantity:
    """Score and value FLOPs of one token at (1-based) ``position``: ``4 L t a d_h``, in FLOP."""
    m = get_model(model)
    t = require_count(position, "position")
    return Q_(4 * m.layers * t * m.attention_width, "FLOP")


def forward_flops(model: str | ModelShape, tokens: int, past: int = 0) -> pint.Quantity:
    """Forward FLOPs of ``tokens`` new tokens that follow ``past`` cached ones, in FLOP.

    ``2 * matmul_params * tokens + 4 L a d_h * sum_{t = past+1}^{past+tokens} t``; the sum is
    ``tokens * (2 past + tokens + 1) / 2``. A prefill of ``S`` tokens is ``(S, 0)``; one decode
    step at context ``c`` (``c`` tokens already cached) is ``(1, c)``.
    """
    m = get_model(model)
    n = require_count(tokens, "tokens")
    p = require_count(past, "past", minimum=0)
    positions = n * (2 * p + n + 1) // 2  # integer: n (2p + n + 1) is always even
    return Q_(2 * m.matmul_params * n + 4 * m.layers * m.attention_width * positions, "FLOP")
