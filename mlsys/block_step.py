"""One transformer block's training step (forward and backward), written slowly on purpose (Lab 6).

The block is pre-norm: ``h = LN(x)``, multi-head self-attention (``qkv = h @ w_qkv``, ``H`` heads of
``D / H``, ``o = attn @ w_o``), ``x1 = x + o``, then the MLP ``y = x1 + gelu(LN(x1) @ w_fc + b_fc) @ w_proj
+ b_proj`` (GELU in its tanh form). LayerNorm has no weight and bias, to keep the argument list short.
Every weight matrix is used at the usual initialisation scale, :func:`scaled` (``w / sqrt(fan_in)``), so
that on standard-normal inputs (what a grader draws) activations and attention scores stay near 1: the
softmax is soft, not one-hot, and two correct orders of summation agree to rounding. Unscaled, a score of
~500 makes the softmax pick one key, and float32 rounding can flip which key on a GPU.
A step takes the block's input ``x`` (B, T, D), the gradient ``gy`` flowing back into its output, and
the weights; it runs the forward, then the backward of ``(y * gy).sum()``, and returns
:func:`pack` of ``y`` and the gradients of ``x`` and of every weight: one flat tensor, so that a grader
can compare one result.

:func:`given_step` is the slow version learners profile in Lab 6: it has the same arithmetic as
:func:`reference_step` and three planted costs a roofline does not see:

1. **host overhead**: a Python loop over the heads, so every head's attention is a handful of small
   operators (kernel launches on a GPU) instead of one batched operator each;
2. **a synchronisation**: inside that loop, an overflow guard ``if not torch.isfinite(s).all()`` turns a
   device tensor into a Python bool, so on a GPU the host waits for the device once per head;
3. **an unfused memory-bound epilogue**: bias, GELU (written out as six element-wise operators) and the
   residual are separate operators, each a pass over memory.

Its FLOPs are Lab 6's first exercise (worked out by hand in tests/test_lab6.py).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["SHAPES", "pack", "scaled", "given_step", "reference_step", "arg_shapes"]

SHAPES = {"B": 2, "T": 32, "D": 64, "H": 8}
"""Lab 6's sizes on a CPU: a step runs in milliseconds, its operators are small enough for overhead to show."""


def arg_shapes(B: int, T: int, D: int) -> list[list[int]]:
    """Shapes of (x, gy, w_qkv, w_o, w_fc, b_fc, w_proj, b_proj), in that order."""
    return [[B, T, D], [B, T, D], [D, 3 * D], [D, D], [D, 4 * D], [4 * D], [4 * D, D], [D]]


def pack(y: Any, grads: list[Any]) -> Any:
    """One flat tensor: ``y`` then every gradient, each flattened, in order."""
    import torch

    return torch.cat([t.reshape(-1) for t in (y, *grads)])


def scaled(w: Any) -> Any:
    """``w / sqrt(fan_in)``, ``fan_in = w.shape[0]`` (the rows a product ``h @ w`` sums over): a matrix of
    standard-normal entries at the usual initialisation scale (std ``1 / sqrt(fan_in)``), used where the
    block uses the weight so that gradients still flow to ``w`` itself."""
    return w * (w.shape[0] ** -0.5)


def _leaves(args: tuple) -> list[Any]:
    """Detached copies of the inputs that need gradients (all but ``gy``, the second)."""
    return [a.detach().requires_grad_() if i != 1 else a for i, a in enumerate(args)]


def given_step(x: Any, gy: Any, w_qkv: Any, w_o: Any, w_fc: Any, b_fc: Any, w_proj: Any, b_proj: Any,
               heads: int = SHAPES["H"]) -> Any:
    """The slow step: a loop over heads with a sync in it, and an unfused bias-GELU-residual epilogue."""
    import torch
    import torch.nn.functional as F

    x, gy, w_qkv, w_o, w_fc, b_fc, w_proj, b_proj = _leaves((x, gy, w_qkv, w_o, w_fc, b_fc, w_proj, b_proj))
    B, T, D = x.shape
    hd = D // heads
    qkv = F.layer_norm(x, (D,)) @ scaled(w_qkv)
    outs = []
    for i in range(heads):  # (1) a Python loop: ~10 small operators per head, forward and backward
        q = qkv[..., i * hd:(i + 1) * hd]
        k = qkv[..., D + i * hd:D + (i + 1) * hd]
        v = qkv[..., 2 * D + i * hd:2 * D + (i + 1) * hd]
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        if not torch.isfinite(s).all():  # (2) a sync: the host waits for the device, once per head
            raise FloatingPointError(f"head {i}: non-finite attention scores")
        outs.append(torch.softmax(s, dim=-1) @ v)
    x1 = x + torch.cat(outs, dim=-1) @ scaled(w_o)
    u = F.layer_norm(x1, (D,)) @ scaled(w_fc)
    u = u + b_fc  # (3) the epilogue, one pass over memory per operator: bias, GELU's six, ...
    g = 0.5 * u * (1.0 + torch.tanh(0.7978845608028654 * (u + 0.044715 * u * u * u)))
    y = g @ scaled(w_proj)
    y = y + b_proj  # ... the second bias ...
    y = y + x1  # ... and the residual
    leaves = [x, w_qkv, w_o, w_fc, b_fc, w_proj, b_proj]
    grads = torch.autograd.grad(y, leaves, grad_outputs=gy)
    return pack(y.detach(), list(grads))


def reference_step(x: Any, gy: Any, w_qkv: Any, w_o: Any, w_fc: Any, b_fc: Any, w_proj: Any, b_proj: Any,
                   heads: int = SHAPES["H"]) -> Any:
    """The same step written plainly: heads batched in one view, no guard, library GELU (a grader's
    reference for the values; not the fastest version)."""
    import torch
    import torch.nn.functional as F

    x, gy, w_qkv, w_o, w_fc, b_fc, w_proj, b_proj = _leaves((x, gy, w_qkv, w_o, w_fc, b_fc, w_proj, b_proj))
    B, T, D = x.shape
    q, k, v = (F.layer_norm(x, (D,)) @ scaled(w_qkv)).view(B, T, 3, heads, D // heads).permute(2, 0, 3, 1, 4)
    p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // heads), dim=-1)
    x1 = x + (p @ v).transpose(1, 2).reshape(B, T, D) @ scaled(w_o)
    y = x1 + F.gelu(F.layer_norm(x1, (D,)) @ scaled(w_fc) + b_fc, approximate="tanh") @ scaled(w_proj) + b_proj
    leaves = [x, w_qkv, w_o, w_fc, b_fc, w_proj, b_proj]
    return pack(y.detach(), list(torch.autograd.grad(y, leaves, grad_outputs=gy)))
