"""Guard buffers and the access tracker: a learner's kernel run under the Triton interpreter on inputs and
outputs padded with sentinel values (:class:`Guarded`), its loads and stores counted and checked (:class:`Tracker`).

Moved out of :mod:`mlsys.labkit.checks` (issue 48, "a size it can keep"); ``checks`` re-exports its names,
the ones the labs' cells and the grader call.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mlsys.labkit.proxy import HARNESS

MAGIC = -12288.0
"""Sentinel of output buffers: -1.5 x 2^13, exact in fp32, fp16 and bf16, and unlikely as a result."""


def _torch():
    import torch

    return torch


@dataclass
class Guarded:
    """A tensor ``view`` living inside a larger flat ``buffer`` whose other elements hold ``sentinel``.

    ``role`` is ``"input"`` (NaN guard: reads of it show up as NaN) or ``"output"`` (``MAGIC``
    guard: stores into it are found afterwards). ``pad`` elements of guard precede and follow the
    view; a 2-D view has ``row_gap`` guard elements after each row.
    """

    name: str
    buffer: Any
    view: Any
    offset: int
    sentinel: float
    role: str
    original: Any = None  # an input's values, to detect a kernel that modifies its input

    def inside(self):
        """Boolean mask over ``buffer``: True where an element of the view lives."""
        torch = _torch()
        idx = torch.arange(self.buffer.numel(), device=self.buffer.device)
        mask = torch.zeros(self.buffer.numel(), dtype=torch.bool, device=self.buffer.device)
        if self.view.numel():
            mask[idx.as_strided(self.view.shape, self.view.stride(), self.offset).reshape(-1)] = True
        return mask

    def address_range(self) -> tuple[int, int]:
        """[first, last) byte addresses of the whole buffer, guards included."""
        start = self.buffer.data_ptr()
        return start, start + self.buffer.numel() * self.buffer.element_size()


@contextlib.contextmanager
def _harness() -> Any:
    """The checks' own torch work inside a learner's call: not recorded as the learner's operations
    (:data:`mlsys.labkit.proxy.HARNESS`)."""
    HARNESS[0] += 1
    try:
        yield
    finally:
        HARNESS[0] -= 1


def _alloc(name: str, shape: Sequence[int], dtype: Any, device: Any, *, sentinel: float, role: str,
           row_gap: int = 0, pad: int | None = None) -> Guarded:
    torch = _torch()
    shape = tuple(int(s) for s in shape)
    numel = math.prod(shape)
    if len(shape) == 2 and row_gap:
        rows, cols = shape
        stride = (cols + row_gap, 1)
        span = (rows - 1) * stride[0] + cols if rows and cols else 0
    else:
        stride = torch.empty(shape, device="meta").stride()
        span = numel
    pad = max(4096, 2 * span) if pad is None else pad
    buffer = torch.full((pad + span + pad,), sentinel, dtype=dtype, device=device)
    view = buffer.as_strided(shape, stride, pad)
    return Guarded(name, buffer, view, pad, sentinel, role)


def guard_input(name: str, t: Any, *, row_gap: int = 0) -> Guarded:
    """A copy of tensor ``t`` inside a NaN-filled guard buffer (floating point only).

    With ``row_gap > 0`` a 2-D ``t`` gets that many NaN elements after each row, so its row stride
    is ``cols + row_gap``: a kernel that assumes row-major layout reads NaN.
    """
    torch = _torch()
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise TypeError(f"guard_input: expected a floating-point tensor for {name}, got {t!r:.80}")
    g = _alloc(name, t.shape, t.dtype, t.device, sentinel=float("nan"), role="input",
               row_gap=row_gap if t.dim() == 2 else 0)
    g.view.copy_(t)
    g.original = t.detach().clone()
    return g


_OUTPUT_FACTORIES = ("empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
                     "empty_strided")


class _CaptureOutputs:
    """A torch function mode that places the tensors a launcher allocates in MAGIC-guarded buffers."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        self.captured: list[Guarded] = []

    def __enter__(self) -> _CaptureOutputs:
        from torch.overrides import TorchFunctionMode

        capture = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                name = getattr(func, "__name__", "")
                torch = _torch()
                if name in _OUTPUT_FACTORIES and isinstance(out, torch.Tensor) and out.is_floating_point():
                    return capture._guard(out, name)
                return out

        self._mode = Mode()
        self._mode.__enter__()
        return self

    def _guard(self, out: Any, factory: str) -> Any:
        label = self.names[len(self.captured)] if len(self.captured) < len(self.names) else \
            f"tensor #{len(self.captured) + 1} your code allocated"
        # inside __torch_function__ the mode is switched off: these calls are not intercepted again
        with _harness():
            g = _alloc(label, out.shape, out.dtype, out.device, sentinel=MAGIC, role="output")
            if factory.startswith("empty"):
                g.original = None  # an element still MAGIC afterwards was never written
            else:
                g.view.copy_(out)
                g.original = out.clone()
        self.captured.append(g)
        return g.view

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)


class Tracker:
    """Under Triton's interpreter, watch every masked load and store a kernel issues.

    For each guarded buffer it counts the elements loaded from the view (``reads[name]``) and
    collects the offsets, relative to the view's first element, of loads from the guard
    (``guard_loads[name]``). Stores outside a tensor are found by the sentinel comparison, which works on
    a GPU too; the addresses and values Triton stores (and the addresses atomics) write are kept
    (:meth:`stored_in`), so that an output whose elements were written by torch or Python code beside, or
    after, a token kernel is seen.
    Outside the interpreter it does nothing (``active`` is False).
    """

    MAX_STORED = 20_000_000
    """Stored elements kept per call (an int64 address and a float64 value each: 320 MB); past it, which
    elements a kernel wrote is not judged."""

    def __init__(self, guards: Sequence[Guarded]) -> None:
        self.guards = list(guards)
        self.reads: dict[str, int] = {g.name: 0 for g in self.guards}
        self.guard_loads: dict[str, list[int]] = {g.name: [] for g in self.guards}
        self.load_instructions = 0
        self.stored: list[Any] = []  # (int64 addresses, float64 values or None for an atomic), per store instruction
        self.stored_count = 0
        self.active = os.environ.get("TRITON_INTERPRET") == "1"

    def _store(self, ptrs: Any, mask: Any, value: Any = None) -> None:
        import numpy as np

        if self.stored_count > self.MAX_STORED:
            return
        shape = np.asarray(ptrs.data).shape
        addrs = np.asarray(ptrs.data).reshape(-1).astype(np.int64)
        vals = None
        if value is not None:
            try:
                vals = np.broadcast_to(np.asarray(value.data), shape).reshape(-1).astype(np.float64)
            except (TypeError, ValueError):  # a value numpy cannot widen (bf16 held as raw bits): not compared
                vals = None
        if mask is not None:
            live = np.broadcast_to(np.asarray(mask.data), shape).reshape(-1).astype(bool)
            addrs = addrs[live]
            vals = vals[live] if vals is not None else None
        self.stored.append((addrs, vals))
        self.stored_count += int(addrs.size)

    def stored_in(self, g: Guarded) -> tuple[int, int] | None:
        """(elements of ``g``'s view Triton stores wrote during the call, elements whose value now is not the last
        value a Triton store wrote there: overwritten by torch or Python code afterwards); None: not known."""
        import numpy as np

        if not self.active or self.stored_count > self.MAX_STORED:
            return None
        torch = _torch()
        lo, hi = g.address_range()
        size = g.buffer.element_size()
        inside = g.inside().cpu().numpy().reshape(-1)
        hit = np.zeros(inside.shape, bool)
        last = np.full(inside.shape, np.nan)
        known = np.zeros(inside.shape, bool)  # the last write was a plain store whose value we hold
        for addrs, vals in self.stored:
            sel = (addrs >= lo) & (addrs < hi)
            idx = (addrs[sel] - lo) // size
            if idx.size:
                hit[idx] = True
                known[idx] = vals is not None
                if vals is not None:
                    last[idx] = vals[sel]
        with _harness():
            flat = g.buffer.detach().reshape(-1).cpu()
            want = torch.from_numpy(last).to(flat.dtype)  # the stored values as the buffer holds them
            same = (flat == want) | (torch.isnan(flat) & torch.isnan(want))
        changed = known & inside & ~same.numpy()
        return int((hit & inside).sum()), int(changed.sum())

    def add(self, g: Guarded) -> None:
        self.guards.append(g)
        self.reads.setdefault(g.name, 0)
        self.guard_loads.setdefault(g.name, [])

    def __enter__(self) -> Tracker:
        if not self.active:
            return self
        import numpy as np
        from triton.runtime import interpreter

        builder = interpreter.InterpreterBuilder
        self._orig = builder.create_masked_load
        tracker = self
        orig = self._orig

        def create_masked_load(b, ptrs, mask, other, *args, **kwargs):
            addrs = np.asarray(ptrs.data).reshape(-1).astype(np.int64)
            live = np.asarray(mask.data).reshape(-1).astype(bool) if mask is not None else np.ones(addrs.shape, bool)
            if live.shape != addrs.shape:
                live = np.broadcast_to(np.asarray(mask.data), np.asarray(ptrs.data).shape).reshape(-1).astype(bool)
            tracker._record(addrs[live])
            return orig(b, ptrs, mask, other, *args, **kwargs)

        builder.create_masked_load = create_masked_load
        self._orig_store = (builder.create_masked_store, builder.create_atomic_rmw, builder.create_atomic_cas)
        store, rmw, cas = self._orig_store

        def create_masked_store(b, ptrs, value, mask, *args, **kwargs):
            tracker._store(ptrs, mask, value)
            return store(b, ptrs, value, mask, *args, **kwargs)

        def create_atomic_rmw(b, op, ptr, val, mask, *args, **kwargs):
            tracker._store(ptr, mask)
            return rmw(b, op, ptr, val, mask, *args, **kwargs)

        def create_atomic_cas(b, ptr, cmp, val, *args, **kwargs):
            tracker._store(ptr, None)
            return cas(b, ptr, cmp, val, *args, **kwargs)

        builder.create_masked_store = create_masked_store
        builder.create_atomic_rmw = create_atomic_rmw
        builder.create_atomic_cas = create_atomic_cas
        return self

    def _record(self, addrs: Any) -> None:
        import numpy as np

        self.load_instructions += 1
        if not hasattr(self, "_layout"):  # address range, element size and in-view mask of each guard, once
            with _harness():
                self._layout = [(g, *g.address_range(), g.buffer.element_size(), g.inside().cpu().numpy())
                                for g in self.guards]
        for g, lo, hi, size, inside in self._layout:
            hit = addrs[(addrs >= lo) & (addrs < hi)]
            if not hit.size:
                continue
            elem = (hit - lo) // size
            in_view = inside[elem]
            self.reads[g.name] += int(in_view.sum())
            out = elem[~in_view]
            if out.size and len(self.guard_loads[g.name]) < 100_000:
                self.guard_loads[g.name].extend(int(e) - g.offset for e in np.unique(out)[:10_000])

    def __exit__(self, *exc: Any) -> None:
        if self.active:
            from triton.runtime import interpreter

            builder = interpreter.InterpreterBuilder
            builder.create_masked_load = self._orig
            builder.create_masked_store, builder.create_atomic_rmw, builder.create_atomic_cas = self._orig_store
