"""What each kind of exercise may dispatch: one table, one op spelling, for every path that judges ops.

An op is named as the dispatcher names it, namespace and all: ``aten::mm``, ``c10d::send``,
``c10d::allreduce_`` (an overload, ``.default``, is dropped). :func:`qualified` brings the other spellings a
record may hold to this one (a bare aten name ``mm``; the older ``c10d:send``). Three kinds
(``forbid`` in a lab's perf.toml; the test cells' ``assert_no_library_calls`` reach the same table through
:mod:`mlsys.labkit.grading`):

- ``matmul``: a library matmul or attention however it is reached (every ``*mm``, ``*matmul*``, ``*gemm*``,
  convolutions: a 1x1 convolution is a matmul), and any library collective;
- ``compute``: anything but allocation, views and copies (:data:`COMPUTE_ALLOWED`); not a tensor's value read on
  the host (``.item()``, ``float(x[i])``: ``aten::_local_scalar_dense``), which is how a launcher computes the
  result in plain Python beside a token kernel;
- ``collectives``: every torch.distributed op but sends, receives and barriers.

``tests/test_policy.py`` judges a list of op names through every path and finds one answer for each.
"""

from __future__ import annotations

import fnmatch

__all__ = ["MATMUL", "COMPUTE_ALLOWED", "POINT_TO_POINT", "BARRIERS", "C10D_NAMESPACES", "KINDS", "qualified",
           "is_forbidden", "forbidden"]

C10D_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "_dtensor")
"""The dispatcher namespaces of torch.distributed's ops."""

MATMUL: frozenset[str] = frozenset({
    "aten::mm", "aten::bmm", "aten::addmm", "aten::matmul", "aten::baddbmm", "aten::addbmm", "aten::addmv",
    "aten::mv", "aten::dot", "aten::vdot", "aten::linear", "aten::einsum", "aten::tensordot", "aten::_scaled_mm",
    "aten::inner", "aten::outer", "aten::addr", "aten::_addmm_activation", "aten::chain_matmul",
    "aten::*scaled_dot_product*", "aten::*flash_attention*", "aten::*efficient_attention*", "aten::*cudnn_attention*",
    "aten::*mm", "aten::*_mm*", "aten::*matmul*", "aten::*gemm*", "aten::conv*", "aten::*convolution*",
})
"""Patterns of the ops that are a library matmul or attention, however they were reached."""

COMPUTE_ALLOWED: tuple[str, ...] = (
    "aten::empty*", "aten::zeros*", "aten::ones*", "aten::full*", "aten::arange*", "aten::new_*", "aten::fill_*",
    "aten::zero_", "aten::copy_", "aten::clone", "aten::contiguous", "aten::view*", "aten::reshape",
    "aten::_reshape_alias", "aten::as_strided*", "aten::t", "aten::transpose*", "aten::permute", "aten::expand*",
    "aten::unsqueeze*", "aten::squeeze*", "aten::select*", "aten::slice*", "aten::detach*", "aten::alias",
    "aten::_to_copy", "aten::to", "aten::lift_fresh*", "aten::resize_", "aten::set_", "aten::unbind*", "aten::split*",
    "aten::chunk", "aten::narrow*", "aten::stride", "aten::size", "aten::numel", "aten::dim", "aten::is_contiguous",
    "aten::_unsafe_view", "aten::flatten*", "aten::unflatten", "aten::record_stream",
)
"""Patterns of the ops a hand-written kernel's launcher may dispatch: allocation, views, copies."""

POINT_TO_POINT = frozenset({"c10d::send", "c10d::recv_", "c10d::recv_any_source_"})
"""torch.distributed ops that move data between two ranks: what a hand-written collective is made of."""

BARRIERS = frozenset({"c10d::barrier", "c10d::monitored_barrier_"})
"""torch.distributed ops that move no data."""

KINDS = ("matmul", "compute", "collectives", "step")
"""``step``: a whole training step (Lab 6), whose library kernels are its own work: it refuses no op, and the
grade rests on correctness on fresh inputs and on the speed-up over the given step."""


def qualified(op: str) -> str:
    """``op`` in the one spelling: ``mm`` -> ``aten::mm``, ``c10d:send`` -> ``c10d::send``, ``aten::mm.default``
    -> ``aten::mm``. Triton launches (``triton:name``) are not ops and are returned as they are."""
    if op.startswith("triton:"):
        return op
    ns, sep, name = op.partition("::")
    if not sep:
        ns, sep, name = op.partition(":")
        if not sep:
            ns, name = "aten", op
    return f"{ns}::{name.split('.')[0]}"


def _collective(q: str) -> bool:
    return q.split("::")[0] in C10D_NAMESPACES and q not in POINT_TO_POINT | BARRIERS


def is_forbidden(kind: str, op: str) -> bool:
    """Whether an exercise of ``kind`` refuses the dispatched ``op`` (any spelling :func:`qualified` reads)."""
    if kind not in KINDS:
        raise ValueError(f"unknown exercise kind {kind!r}: expected one of {', '.join(KINDS)}")
    q = qualified(op)
    if q.startswith("triton:") or kind == "step":
        return False
    if kind == "collectives":
        return _collective(q)
    if kind == "matmul":
        return _collective(q) or any(fnmatch.fnmatchcase(q, p) for p in MATMUL)
    return not any(fnmatch.fnmatchcase(q, p) for p in COMPUTE_ALLOWED)


def forbidden(kind: str, ops: set[str] | list[str]) -> list[str]:
    """The ops of ``ops`` an exercise of ``kind`` refuses, in the one spelling, sorted."""
    return sorted({qualified(op) for op in ops if is_forbidden(kind, op)})
