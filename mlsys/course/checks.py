"""Kernel checks for the labs that turn a learner's mistake into feedback instead of a dead notebook.

A Triton kernel with a missing mask does not fail politely: under the interpreter an out-of-bounds
store can kill the Python process, and a read past the end returns whatever lies there. The checks
here run a learner's launcher on tensors placed inside larger **guard buffers** and report what the
kernel did outside them, with index ranges:

* inputs sit in the middle of a buffer filled with NaN (and, for matrices, with a few NaN columns
  between rows, so a wrong row stride lands in the gaps): a read of the guard turns into NaN in the
  output, and under the interpreter every load is also checked address by address;
* outputs allocated by the launcher (``torch.empty``, ``torch.empty_like``, ...) are intercepted and
  placed in a buffer filled with :data:`MAGIC`: a store into the guard is found by comparing the
  guard with the sentinel afterwards ("your kernel wrote 17 elements past the end of C: check the
  store mask"), and an output element still holding :data:`MAGIC` was never written (dropped edge
  tiles, a grid too small);
* on a CPU the call runs in a child process (:func:`mlsys.course.grading.run_isolated`), so a crash
  costs this check only, and an endless loop is stopped after :data:`CPU_LIMIT` seconds of
  computation (CPU time: a busy laptop slows honest work without using it up) or :data:`WALL_LIMIT`
  seconds of waiting, with a "still running" line every :data:`HEARTBEAT` seconds; on a GPU a fork
  would lose the CUDA context, so the call runs in place and an illegal memory access is reported as
  such (the CUDA context is then lost for the rest of the run), and a kernel that never finishes
  ends the process after :data:`mlsys.course.watchdog.GPU_LIMIT` seconds with a message naming the
  check (:mod:`mlsys.course.watchdog`; at grading the kernel is restarted and only that cell is lost).

Warnings raised while a check runs are printed on stdout: nbgrader scores a test cell that writes
to stderr as failed, and the course's own warnings must never cost points.

Under the interpreter the checks also count the elements each kernel loads from each input
(:class:`Tracker`), which catches a fused kernel that reads its input twice. Further helpers cover
the silent mistakes: :func:`accumulation_probe` (a product that fp16 accumulation gets wrong),
:func:`check_rate_arithmetic` (an achieved FLOP/s that is not the learner's FLOPs over the learner's
own measured time: ms taken as seconds, MACs for FLOPs; nothing is timed again),
:func:`check_chain_arities` (the structure of an element-wise chain), Lab 4's collectives
(:func:`check_ring`, which refuses a library collective recorded in any rank and names a dtype slip, an
invalid rank, a step count, chunk indices or an unfinished request through :func:`diagnose_ring`;
:func:`check_dp`; each with a worker-side half, ``worker_*_runs``, that starts the ranks where the
learner's function lives) and Lab 5's online softmax
(:func:`check_scores_far_below_zero` for the initial max, :func:`check_running_sums_fp32` for fp16
accumulation in the inner loop, :func:`check_attention_sums_fp32` for it anywhere in the kernel,
:func:`in_zero_padding` so one mistake is charged to one check).
:func:`assert_plausible_rate` (a rate against a fresh timing) is kept for callers outside the labs.

Every check raises :class:`mlsys.course.grading.GradingError` with a message that names the mistake.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..runtime.device import has_cuda
from . import compilecheck, watchdog
from .grading import GradingError, assert_close, run_isolated
from .proxy import HARNESS, RemoteFunction, zero_padded

__all__ = [
    "MAGIC",
    "Guarded",
    "Tracker",
    "GuardReport",
    "guard_input",
    "run_guarded",
    "check_kernel",
    "accumulation_probe",
    "check_accumulation",
    "assert_plausible_rate",
    "check_roof_measured_here",
    "check_chain_arities",
    "explain_exception",
    "check_rate_arithmetic",
    "COLLECTIVES",
    "FORBIDDEN_COLLECTIVES",
    "PROCESS_GROUP_COLLECTIVES",
    "C10D_NAMESPACES",
    "POINT_TO_POINT_OPS",
    "RING_ALLOWED_OPS",
    "dispatch_recorder",
    "library_collectives",
    "diagnose_ring",
    "check_ring",
    "make_mlp",
    "check_dp",
    "check_scores_far_below_zero",
    "check_running_sums_fp32",
    "check_attention_sums_fp32",
    "FP16_MAX",
    "in_zero_padding",
    "calls_of",
    "running_sums_probe",
    "worker_run_guarded",
    "worker_call_checked",
    "worker_ring_runs",
    "worker_tagged_runs",
    "worker_dp_runs",
]

MAGIC = -12288.0
"""Sentinel of output buffers: -1.5 x 2^13, exact in fp32, fp16 and bf16, and unlikely as a result."""


def _torch():
    import torch

    return torch


# ----------------------------------------------------------------------------------------------
# guard buffers


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
    (:data:`mlsys.course.proxy.HARNESS`)."""
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


# ----------------------------------------------------------------------------------------------
# counting and checking accesses under the interpreter


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


# ----------------------------------------------------------------------------------------------
# the report


def _ranges(values: Sequence[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"3..5, 9"`` (at most four ranges, then ``...``)."""
    vals = sorted(set(int(v) for v in values))
    if not vals:
        return ""
    out, start, prev = [], vals[0], vals[0]
    for v in vals[1:]:
        if v != prev + 1:
            out.append((start, prev))
            start = v
        prev = v
    out.append((start, prev))
    text = ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in out[:4])
    return text + (", ..." if len(out) > 4 else "")


def _where(g: Guarded, rel: Sequence[int]) -> list[str]:
    """Describe guard positions (offsets relative to the view's first element) in words."""
    view = g.view
    shape = tuple(view.shape)
    last = 0 if not view.numel() else sum((s - 1) * st for s, st in zip(shape, view.stride(), strict=True))
    before = [r for r in rel if r < 0]
    after = [r - last for r in rel if r > last]
    between = [r for r in rel if 0 <= r <= last]
    parts = []
    if after:
        parts.append(f"{len(after)} element{'s' if len(after) != 1 else ''} past the end of {g.name} "
                     f"(1 to {max(after)} elements beyond its last element)")
    if before:
        parts.append(f"{len(before)} element{'s' if len(before) != 1 else ''} before the start of {g.name} "
                     f"(offsets {_ranges(before)})")
    if between and len(shape) == 2:
        row_stride = view.stride(0)
        rows = sorted({r // row_stride for r in between})
        parts.append(f"{len(between)} element{'s' if len(between) != 1 else ''} beyond the last column of {g.name} "
                     f"(after rows {_ranges(rows)})")
    elif between:
        parts.append(f"{len(between)} elements between the elements of {g.name}")
    return parts


@dataclass
class GuardReport:
    """What one guarded call did outside its tensors; ``problems()`` lists them as messages."""

    label: str
    bad_stores: dict[str, list[int]] = field(default_factory=dict)
    bad_loads: dict[str, list[int]] = field(default_factory=dict)
    unwritten: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    unstored: dict[str, tuple[int, int]] = field(default_factory=dict)  # elements no Triton store wrote (interpreter)
    modified_inputs: list[str] = field(default_factory=list)
    reads: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    descriptions: dict[str, list[str]] = field(default_factory=dict)
    kernel_loads: int = -1  # load instructions Triton kernels issued during the call (-1: not counted here)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # each tensor's shape, for the picture
    unwritten_at: dict[str, list[int]] = field(default_factory=dict)  # flat indices never written (first 100,000)

    def problems(self) -> list[str]:
        out = []
        for name, parts in self.descriptions.items():
            kind, _, tensor = name.partition(":")
            if kind == "store":
                out.append(f"{self.label}: your kernel wrote {'; '.join(parts)}: check the store mask "
                           f"(and the strides and offsets used for {tensor})")
            elif kind == "load":
                out.append(f"{self.label}: your kernel read {'; '.join(parts)}: check the load mask "
                           f"(and the strides and offsets used for {tensor})")
        for name in self.modified_inputs:
            out.append(f"{self.label}: your kernel changed its input {name}: it must only read it "
                       "(a store through the wrong pointer?)")
        for name, (count, total, where) in self.unwritten.items():
            out.append(f"{self.label}: your kernel left {count} of {total} elements of {name} unwritten ({where}): "
                       "dropped edge tiles or blocks? check the grid size (triton.cdiv) and the store mask")
        return out


def _positions(g: Guarded, flat: Any) -> list[int]:
    return [int(i) - g.offset for i in flat]


def _inspect(label: str, guards: Sequence[Guarded], tracker: Tracker | None, result: Any = None) -> GuardReport:
    """Compare every guard with its sentinel; ``result`` is what the call returned (an output buffer
    counts as unwritten only if the result lives in it: a launcher that returns another tensor is
    judged by its values instead)."""
    torch = _torch()
    result_storage = result.untyped_storage().data_ptr() if isinstance(result, torch.Tensor) else None
    rep = GuardReport(label)
    for g in guards:
        inside = g.inside()
        buf = g.buffer
        guard_vals = buf[~inside]
        if g.role == "input":
            changed = ~torch.isnan(guard_vals)
        else:
            changed = (guard_vals != g.sentinel) | torch.isnan(guard_vals)
        if bool(changed.any()):
            flat = torch.nonzero(~inside).reshape(-1)[changed].cpu().tolist()
            rel = _positions(g, flat)
            rep.bad_stores[g.name] = rel[:1000]
            rep.descriptions[f"store:{g.name}"] = _where(g, rel)
        if g.role == "input" and g.original is not None:
            now = g.view
            same = (now == g.original) | (torch.isnan(now) & torch.isnan(g.original))
            if not bool(same.all()):
                rep.modified_inputs.append(g.name)
        if (g.role == "output" and g.original is None and g.view.numel()
                and g.buffer.untyped_storage().data_ptr() == result_storage):
            left = g.view == g.sentinel
            n = int(left.sum())
            if n:
                idx = torch.nonzero(left)
                if g.view.dim() == 2:
                    where = f"rows {_ranges(idx[:, 0].tolist())}, columns {_ranges(idx[:, 1].tolist())}"
                else:
                    where = f"indices {_ranges(idx.reshape(-1).tolist())}"
                rep.unwritten[g.name] = (n, g.view.numel(), where)
                rep.unwritten_at[g.name] = torch.nonzero(left.reshape(-1)).reshape(-1)[:100_000].tolist()
            stored = tracker.stored_in(g) if tracker is not None else None
            if stored is not None and (stored[0] < g.view.numel() or stored[1]):
                # elements no Triton store wrote, or whose value was replaced after the last one did
                rep.unstored[g.name] = (g.view.numel() - stored[0] + stored[1], g.view.numel())
        rep.sizes[g.name] = g.view.numel()
        rep.shapes[g.name] = tuple(int(n) for n in g.view.shape)
        if tracker is not None and tracker.active:
            rep.kernel_loads = tracker.load_instructions
            rep.reads[g.name] = tracker.reads.get(g.name, 0)
            if tracker.guard_loads.get(g.name):
                rep.bad_loads[g.name] = tracker.guard_loads[g.name][:1000]
                rep.descriptions[f"load:{g.name}"] = _where(g, tracker.guard_loads[g.name])
    return rep


def explain_exception(label: str, exc: BaseException) -> str:
    """A learner-facing message for an exception raised while running a kernel."""
    text = f"{type(exc).__name__}: {exc}"
    low = text.lower()
    if "illegal memory access" in low or "misaligned address" in low or "out of bounds" in low:
        return (f"{label}: your kernel made an illegal memory access on the GPU ({text[:200]}); a load or store "
                "outside its tensors: check every mask and the grid. The GPU context is lost: restart the kernel.")
    if "InterpreterError" in type(exc).__name__ or "interpretererror" in low:
        hint = ""
        if "assert" in low:
            hint = (" Under the interpreter, tl.dot asserts when its operands or accumulator have unexpected "
                    "types: accumulate in fp32 (tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)) and pass "
                    "blocks of the input dtype.")
        if "only 0-dimensional arrays can be converted" in text:
            from .versions import problems

            known = [p for p in problems() if "interpreter" in p]
            if known:  # Triton's own interpreter with a newer NumPy, not the learner's kernel
                return f"{label}: not your kernel: {known[0]} ({text[:200]})"
        return f"{label}: the Triton interpreter stopped your kernel ({text[:300]}).{hint}"
    return f"{label} raised {text[:500]}"


# ----------------------------------------------------------------------------------------------
# running a launcher on guarded tensors


def _guarded_call(fn: Callable[..., Any], inputs: Sequence[Any], names: Sequence[str], output_names: Sequence[str],
                  row_gap: int, kwargs: dict[str, Any], label: str) -> dict[str, Any]:
    """Run ``fn`` on guarded copies of ``inputs``; return the result and the report (picklable)."""
    torch = _torch()
    guards = [guard_input(n, t, row_gap=row_gap) if isinstance(t, torch.Tensor) and t.is_floating_point() else None
              for n, t in zip(names, inputs, strict=True)]
    args = [g.view if g is not None else t for g, t in zip(guards, inputs, strict=True)]
    real = [g for g in guards if g is not None]
    tracker = Tracker(real)
    capture = _CaptureOutputs(output_names)
    error = None
    result = None
    launches: list = []
    try:
        with tracker, capture, _launch_record() as launches:
            result = fn(*args, **kwargs)
        if has_cuda():
            torch.cuda.synchronize()
    except Exception as exc:  # the learner's code: report, never propagate raw
        error = explain_exception(label, exc)
    compile_errors = compilecheck.compile_errors(launches) if error is None and launches else []
    all_guards = real + capture.captured
    rep = _inspect(label, all_guards, tracker, result)
    if (tracker.active and error is None and isinstance(result, torch.Tensor) and result.numel() > 1
            and result.untyped_storage().data_ptr() not in {g.buffer.untyped_storage().data_ptr()
                                                             for g in capture.captured}):
        rep.unstored["the result"] = (result.numel(), result.numel())  # made outside every buffer a kernel could write
    if isinstance(result, torch.Tensor):
        result = result.detach().clone()
    return {"result": result, "report": rep, "error": error, "tracked": tracker.active,
            "compile_errors": compile_errors, "compiled": dict(compilecheck._DONE)}


def _launch_record() -> Any:
    """Record the kernels a call launches under the interpreter (to compile them for the GPU, see
    :mod:`.compilecheck`); nothing on a GPU, where the real compiler already ran."""
    from ..runtime.device import triton_interpreted

    return compilecheck.record_launches() if triton_interpreted() else contextlib.nullcontext([])


def _quiet_call(*args: Any) -> dict[str, Any]:
    """:func:`_guarded_call` with every warning collected into ``out["warnings"]`` instead of printed.

    nbgrader scores a test cell that writes anything to stderr as failed, so a warning raised while a
    check runs (by torch, Triton or this module) must never reach stderr: it is shown on stdout.
    """
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _guarded_call(*args)
    out["warnings"] = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    return out


def _show_warnings(out: dict[str, Any]) -> None:
    for text in out.get("warnings", [])[:3]:
        print(f"note (not a failure): a warning while the check ran: {text[:300]}")


def _packed_call(*args: Any) -> dict[str, Any]:
    """:func:`_guarded_call` with the result serialised to bytes (a tensor crosses the pipe as plain data)."""
    import io

    # A forked child must not wait on the parent's thread pools (OpenMP, BLAS): their worker threads
    # do not exist here, and a parallel region would block forever. One thread is plenty for small checks.
    _torch().set_num_threads(1)
    out = _quiet_call(*args)
    if isinstance(getattr(args[0], "recorded_ops", None), set):  # mlsys.course.worker.Recorded: ops back to the parent
        out["ops"] = sorted(args[0].recorded_ops)
    torch = _torch()
    if isinstance(out["result"], torch.Tensor):
        buf = io.BytesIO()
        torch.save(out["result"].cpu(), buf)
        out["result"] = ("tensor", buf.getvalue())
    return out


def _call_to_bytes(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a forked child, a tensor result serialised to bytes: torch's own pickling of a tensor
    shares its memory through a file descriptor that vanishes when the child exits."""
    import io

    torch = _torch()
    torch.set_num_threads(1)  # see _packed_call
    out = fn(*args)
    if isinstance(out, torch.Tensor):
        buf = io.BytesIO()
        torch.save(out.detach().cpu(), buf)
        out = ("tensor", buf.getvalue())
    if isinstance(getattr(fn, "recorded_ops", None), set):  # mlsys.course.worker.Recorded: ops back to the parent
        return ("with_ops", out, sorted(fn.recorded_ops))
    return out


def _unpack(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "tensor":
        import io

        return _torch().load(io.BytesIO(value[1]))
    return value


CPU_LIMIT = 60.0
"""Seconds of computation after which a guarded call is stopped as an endless loop. The largest honest
check of the labs computes for a few seconds under the interpreter; CPU time, unlike waiting time,
does not grow on a busy machine, so this limit never fails honest work on a loaded laptop."""

WALL_LIMIT = 240.0
"""Seconds of waiting after which a guarded call is stopped whatever its CPU time (well under the
five minutes after which a learner would give up, and under nbgrader's per-cell timeout)."""

HEARTBEAT = 15.0
"""Seconds between the "still running" lines a long guarded call prints on stdout."""


def _runs_here_on_gpu(fn: Callable[..., Any]) -> bool:
    """True when calling ``fn`` runs a kernel on a GPU in this process, where only :mod:`.watchdog` can end
    a kernel that never finishes. A handle to a function of the learner's kernel (:mod:`.proxy`, when a
    test cell runs in the grader) runs elsewhere: the learner's kernel watches its own calls."""
    return has_cuda() and type(fn).__module__ != "mlsys.course.proxy"


def run_guarded(fn: Callable[..., Any], inputs: Sequence[Any], *, names: Sequence[str] | None = None,
                output_names: Sequence[str] = ("the output",), row_gap: int = 0, isolate: bool | None = None,
                timeout: float = WALL_LIMIT, cpu_limit: float = CPU_LIMIT, label: str | None = None,
                **kwargs: Any) -> dict[str, Any]:
    """Call ``fn(*inputs, **kwargs)`` on guarded copies of the inputs; return ``{"result", "report", ...}``.

    ``isolate`` (default: True without CUDA) runs the call in a child process, so a crash raises
    :class:`GradingError` here ("your kernel crashed the process ...") instead of killing the
    notebook, and a call that computes for ``cpu_limit`` seconds (or waits ``timeout``) is stopped,
    with a line on stdout every :data:`HEARTBEAT` seconds meanwhile. Out-of-bounds findings are
    returned in ``report`` (a :class:`GuardReport`), not raised. Warnings go to stdout, never stderr.
    """
    label = label or getattr(fn, "__name__", "your function")
    names = list(names) if names is not None else [f"input {i}" for i in range(len(inputs))]
    if isinstance(fn, RemoteFunction):  # a test cell in the grader: the guarded call runs in the learner's kernel
        out = _guarded_reply(fn.run_helper("run_guarded", list(inputs), names=names, output_names=list(output_names),
                                           row_gap=row_gap, isolate=isolate, timeout=timeout, cpu_limit=cpu_limit,
                                           label=label, **kwargs), label)
        _show_warnings(out)
        return out
    if isolate is None:
        isolate = not has_cuda()
    if not isolate:
        with watchdog.watch(label, active=_runs_here_on_gpu(fn)):
            out = _quiet_call(fn, inputs, names, output_names, row_gap, kwargs, label)
        _show_warnings(out)
        return out
    try:
        out = run_isolated(_packed_call, fn, inputs, names, output_names, row_gap, kwargs, label, timeout=timeout,
                           cpu_limit=cpu_limit, heartbeat=HEARTBEAT, what=label)
        out["result"] = _unpack(out["result"])
        compilecheck._DONE.update(out.get("compiled", {}))  # compiled in the child: not again in the next check
        _show_warnings(out)
        return out
    except GradingError as exc:
        msg = str(exc)
        if "process died" in msg:
            raise GradingError(
                f"{label}: your kernel crashed the process that ran it ({msg.split('(', 1)[-1].rstrip(')')}). "
                "This is almost always a load or store far outside a tensor: check every mask, the strides and "
                "the grid. (The check ran in a separate process, so only this check is lost.)") from None
        if "within" in msg and "did not" in msg:
            spent = msg.split("stopped after ", 1)[-1].split(" (infinite", 1)[0] if "stopped after" in msg \
                else f"{timeout:g} s"
            raise GradingError(f"{label}: stopped after {spent} without finishing (the check's own call takes a few "
                               "seconds): an endless loop in the kernel or the launcher? (a loop whose counter never "
                               "reaches its bound, a while loop on a value that never changes, a grid far too "
                               "large?)") from None
        raise


def check_kernel(fn: Callable[..., Any], inputs: Sequence[Any], expected: Any, *, names: Sequence[str] | None = None,
                 output_names: Sequence[str] = ("the output",), row_gap: int = 0, rtol: float = 1e-5,
                 atol: float = 1e-8, max_reads: dict[str, float] | None = None, isolate: bool | None = None,
                 label: str | None = None, **kwargs: Any) -> Any:
    """Run ``fn`` on guarded inputs and check everything; return its result.

    In order, it fails on: an exception or a crash; stores outside the tensors; loads outside them
    (interpreter); a modified input; unwritten output elements; NaN/Inf in the result (a read of a NaN
    guard); a result that differs from ``expected``; and, under the interpreter, more element loads
    from an input than ``max_reads[name]`` times its size (e.g. ``{"x": 1}`` for a kernel that must read
    its input once).
    """
    label = label or getattr(fn, "__name__", "your function")
    out = run_guarded(fn, inputs, names=names, output_names=output_names, row_gap=row_gap, isolate=isolate,
                      label=label, **kwargs)
    if out["error"]:
        raise GradingError(out["error"])
    rep: GuardReport = out["report"]
    problems = rep.problems()
    if problems:
        from ..diagrams.touched import show_report

        show_report(rep)  # beside the message: a map of what the kernel wrote outside, or never wrote
        raise GradingError("\n".join(problems))
    if out.get("compile_errors"):  # runs here under the interpreter, but the GPU compiler rejects it
        raise GradingError(out["compile_errors"][0])
    result = out["result"]
    if result is None:
        raise GradingError(f"{label}: expected a tensor, found None (did the function forget to return?)")
    torch = _torch()
    # a result that no Triton load produced (one element, as a 1 x 1 softmax's, may fairly be written without one)
    if out["tracked"] and rep.kernel_loads == 0 and type(result) is torch.Tensor and result.numel() > 1:
        raise GradingError(f"{label}: no Triton kernel loaded anything during this call, yet it returned a result: "
                           "this exercise asks for the computation in your own Triton kernel (a result computed "
                           "outside it, with NumPy or plain Python, earns nothing here)")
    unstored = [(n, c, t) for n, (c, t) in rep.unstored.items() if t > 1] if out["tracked"] else []
    for name, count, total in unstored[:1]:
        raise GradingError(f"{label}: {count} of the {total} elements of {name} do not hold what a Triton store wrote "
                           "(never stored by a kernel, or replaced afterwards by torch or Python code): this exercise "
                           "asks for the computation in your own Triton kernel, which stores every element of the "
                           "result in a tensor the launcher allocated")
    if isinstance(result, torch.Tensor) and result.is_floating_point():
        bad = ~torch.isfinite(result.float())
        if bool(bad.any()):
            first = tuple(int(i) for i in torch.nonzero(bad)[0])
            raise GradingError(
                f"{label}: {int(bad.sum())} of {result.numel()} results are NaN/Inf (first at index {first}) although "
                "the inputs are finite and every element outside them is NaN: your kernel read outside its inputs "
                "(a missing load mask, a wrong stride or offset) or skipped the max-subtraction of a softmax")
    assert_close(result, expected, rtol=rtol, atol=atol, name=label)
    if max_reads and out["tracked"]:
        for name, limit in max_reads.items():
            size = rep.sizes.get(name, 0)
            got = rep.reads.get(name, 0)
            if size and got > limit * size:
                raise GradingError(
                    f"{label}: your kernel loaded {got:,} elements of {name}, {got / size:.2g} times its {size:,} "
                    f"elements; a fused kernel reads each input element {limit:g} time{'s' if limit != 1 else ''}. "
                    "Keep what you loaded in registers instead of loading it again (e.g. one tl.load of the row, "
                    "then max, exp, sum and divide on that block)")
    return result


# ----------------------------------------------------------------------------------------------
# silent mistakes


def accumulation_probe(k: int = 4096, big: float = 2048.0, small: float = 1.0, dtype: Any = None,
                       device: str = "cpu") -> tuple[Any, Any, Any]:
    """``(A, B, expected)`` for a 1 x k by k x 1 fp16 product that fp16 accumulation gets wrong.

    ``A`` is all ones; ``B`` holds ``big`` first and ``small`` after it. In fp32 the dot product is
    ``big + (k - 1) * small``. A partial sum held in fp16 stops growing once it reaches ``big``
    whenever ``small`` is at most half the fp16 spacing there (the spacing at 2048 is 2), so the
    fp16 answer falls short by about ``small`` for every term that follows in the same partial sum.
    ``expected`` is computed in float64 and rounded to fp16.
    """
    torch = _torch()
    dtype = dtype or torch.float16
    a = torch.ones(1, k, dtype=dtype, device=device)
    b = torch.full((k, 1), small, dtype=dtype, device=device)
    b[0, 0] = big
    expected = torch.matmul(a.double(), b.double()).to(dtype)
    return a, b, expected


def check_accumulation(fn: Callable[..., Any], *, device: str = "cpu", probes: Sequence[tuple[float, float]] = (
        (2048.0, 1.0), (2048.0, 1.0 / 32)), k: int = 4096, isolate: bool | None = None, **kwargs: Any) -> None:
    """Fail if ``fn(A, B)`` loses long sums of fp16 products: the sign of an fp16 accumulator.

    Each probe ``(big, small)`` is :func:`accumulation_probe`; the result must be within 0.5% of
    the float64 answer (fp16 output rounding is below 0.05%; an fp16 accumulator is off by 2-6%).
    """
    label = getattr(fn, "__name__", "your function")
    for big, small in probes:
        a, b, expected = accumulation_probe(k, big, small, device=device)
        out = run_guarded(fn, (a, b), names=("A", "B"), output_names=("C",), isolate=isolate,
                          label=f"{label} on a long fp16 dot product", **kwargs)
        if out["error"]:
            raise GradingError(out["error"])
        result = out["result"]
        want = float(expected.double().item())
        got = float(result.double().reshape(-1)[0].item()) if result is not None and result.numel() else math.nan
        if not math.isfinite(got) or abs(got - want) > 0.005 * abs(want):
            raise GradingError(
                f"{label}: a 1 x {k} by {k} x 1 fp16 product whose terms are {big:g} then {k - 1} times {small:g} "
                f"should give {want:g}, found {got:g}: your partial sums are rounded to fp16 (fp16 accumulation). "
                "Accumulate in fp32 (tl.zeros(..., dtype=tl.float32) and convert the loaded blocks or let tl.dot "
                "accumulate into an fp32 acc), and convert to the output dtype only at the store")


def assert_plausible_rate(label: str, claimed: Any, flops: Any, seconds_now: float, *, factor: float = 100.0) -> None:
    """Fail if ``claimed`` FLOP/s is off by more than ``factor`` from ``flops / seconds_now``.

    ``seconds_now`` is a fresh, independent timing of the same operation (pass its best time: a busy
    machine slows a timing, never speeds it up). A slip of ms for s (or us for s) is a factor of 1000;
    the default factor of 100 leaves room for a loaded 2-core machine (an honest Lab 1 point was seen
    36 times off its re-timing there, 2026-11-23); a MAC-for-FLOP slip changes the FLOPs, not this ratio.
    """
    value = claimed.to("FLOP/s").magnitude if hasattr(claimed, "to") else float(claimed)
    f = flops.to("FLOP").magnitude if hasattr(flops, "to") else float(flops)
    if not (seconds_now > 0 and math.isfinite(seconds_now)):
        raise ValueError(f"assert_plausible_rate: expected a positive time in seconds, got {seconds_now!r}")
    now = f / seconds_now
    ratio = value / now if now else math.inf
    if not (1 / factor <= ratio <= factor):
        hint = ""
        # around 1000, widened because the fresh time is a best time and the learner's a median
        if 200 <= 1 / ratio <= 20000:
            hint = " (about 1000 times too low: a time in ms used as seconds?)"
        elif 200 <= ratio <= 20000:
            hint = " (about 1000 times too high: a time in s used as ms?)"
        raise GradingError(
            f"{label}: your achieved rate is {value:.4g} FLOP/s but timing it again here gives {now:.4g} FLOP/s, "
            f"{ratio:.3g} times that{hint}; divide the FLOPs by the median time in seconds (t.median)")


def _roof_slip(ratio: float, i: int) -> str:
    """The slip a roof ``ratio`` times this machine's points to (``i``: 0 peak, 1 bandwidth), or ""."""
    if i == 1 and 3 <= ratio <= 30:  # 8 on an idle machine; a busy one moves either measurement
        return " (bits counted as bytes? that is 8 times too much)"
    if 300 <= ratio <= 3000 or 1 / 3000 <= ratio <= 1 / 300:
        return " (about 1000 times off: ms against s, or GB against MB?)"
    if ratio > 30:
        return " (far beyond this machine: a datasheet figure, or another machine's?)"
    return ""


def check_roof_measured_here(roof: Any, *, faster: float = 3.0, slower: float = 20.0, tries: int = 3,
                             where: str = "on the grading machine") -> None:
    """Fail unless ``roof`` (a :class:`mlsys.roofline.Roof`) is this machine's, measured.

    The grader measures the same two figures again, here, with :func:`mlsys.bench.micro.quick_roof` (copy
    bandwidth; matmul throughput in :func:`mlsys.bench.micro.roof_dtype`), on this process's device, each
    from its fastest timed call. A roof more than ``faster`` times faster than that measurement is not this
    machine's (typed in, taken from a datasheet or another machine); one more than ``slower`` times slower
    is refused too. A busy machine slows a measurement and never speeds it up (the learner's ran at another
    moment than the grader's, maybe while other submissions were graded beside it), so the grader compares
    with its fastest calls and, while the roof looks too fast, measures again (up to ``tries`` times in all),
    keeping the fastest figure; the error names every figure that is still off, and the slip its ratio points
    to (8 for bandwidth: bits for bytes; 1000: ms for s; far beyond: a datasheet). ``where`` names the machine in
    the message: the grading machine for the hidden test, "on this machine" for the notebook's visible check.
    """
    from ..bench.micro import quick_roof, roof_dtype
    from ..runtime.device import default_device

    if tries < 1:
        raise ValueError(f"check_roof_measured_here: tries must be at least 1, got {tries!r}")
    device = default_device()
    claimed = (roof.peak.to("FLOP/s").magnitude, roof.bandwidth.to("byte/s").magnitude)
    names = (f"peak ({roof_dtype(device)} matmul)", "memory bandwidth (copy)")
    units = (("TFLOP/s", 1e12), ("GB/s", 1e9))

    def too_fast(here: tuple[float, ...]) -> list[int]:  # the only refusal that a slowed measurement can cause
        return [i for i in range(2) if claimed[i] > here[i] * faster]

    here: tuple[float, ...] = quick_roof(device)
    for _ in range(tries - 1):
        if not too_fast(here):
            break
        here = tuple(max(a, b) for a, b in zip(here, quick_roof(device), strict=True))
    bad = sorted(too_fast(here) + [i for i in range(2) if claimed[i] < here[i] / slower])
    if bad:
        parts = [f"your roof's {names[i]} is {claimed[i] / units[i][1]:.4g} {units[i][0]}, this machine's "
                 f"{here[i] / units[i][1]:.4g} {units[i][0]} ({claimed[i] / here[i]:.3g} times that)"
                 f"{_roof_slip(claimed[i] / here[i], i)}" for i in bad]
        raise GradingError(
            f"measured again here, {where} ({device}): " + "; ".join(parts) +
            f" (accepted: up to {faster:g} times faster or {slower:g} times slower than this machine): build my_roof "
            "from what mlsys.bench.micro measures in this notebook, not from typed numbers, a datasheet or "
            "another machine")


def check_rate_arithmetic(label: str, claimed: Any, flops: Any, timing: Any) -> None:
    """Fail unless ``claimed`` FLOP/s is ``flops`` over one of the learner's own measured times.

    ``timing`` is the :class:`mlsys.bench.Timing` the learner's code measured (``times`` in seconds).
    Any time between its fastest and slowest call is accepted (median, mean or best: all honest), with
    0.5% for rounding. Nothing is timed again, so the check does not depend on the machine being idle:
    it checks the arithmetic, and names the slip from the ratio found (1000: ms for s; 10^6: us for s;
    2: MACs for FLOPs; 8: bits for bytes).
    """
    value = claimed.to("FLOP/s").magnitude if hasattr(claimed, "to") else float(claimed)
    f = flops.to("FLOP").magnitude if hasattr(flops, "to") else float(flops)
    times = [float(t) for t in getattr(timing, "times", ())]
    if not times or not all(t > 0 and math.isfinite(t) for t in times):
        raise GradingError(f"{label}: expected the Timing your code measured (positive times in seconds), "
                           f"found {timing!r:.120}")
    per_call = getattr(timing, "per_call", 1) or 1
    fast, slow = min(times) / per_call, max(times) / per_call
    median = float(getattr(timing, "median", sorted(times)[len(times) // 2] / per_call))
    lo, hi = f / slow * 0.995, f / fast * 1.005
    if lo <= value <= hi:
        return
    want = f / median
    ratio = value / want if want else math.inf
    hints = [(1e-3, "a time in ms used as seconds (the times of time_fn are in seconds)"),
             (1e3, "a time in seconds divided by 1000, or taken as ms"),
             (1e-6, "a time in us used as seconds"), (1e6, "a time in seconds taken as us"),
             (0.5, "MACs counted instead of FLOPs? (use the FLOPs your counts give, 2mnk for a matmul)"),
             (2.0, "FLOPs counted twice?"), (1 / 8, "bits instead of bytes somewhere?"), (8.0, "bits instead of bytes?")]
    cause = next((h for r, h in hints if 0.7 * r <= ratio <= 1.4 * r), None)
    if cause is None and not math.isfinite(value):
        cause = "a time of zero?"
    raise GradingError(
        f"{label}: expected your FLOPs ({f:.4g}) over your own measured median time ({median:.4g} s) = {want:.4g} "
        f"FLOP/s (any time between your fastest and slowest call is accepted), found {value:.4g} FLOP/s, "
        f"{ratio:.3g} times that" + (f": likely {cause}" if cause else
                                     ": is the point made from the FLOPs of this operation and its own time?"))


def check_chain_arities(arities: Any, *, ops: int, outside_tensors: int, label: str = "arities") -> None:
    """Check the structure of an element-wise chain's arities without giving the answer away.

    ``ops`` operators in the chain read ``outside_tensors`` distinct tensors from outside it; op 0
    reads only outside tensors, op ``i > 0`` reads the previous result plus ``arities[i] - 1``
    outside ones, so ``sum(arities) - (ops - 1)`` must equal ``outside_tensors``.
    """
    if not isinstance(arities, (list, tuple)) or not all(isinstance(a, int) and not isinstance(a, bool)
                                                         for a in arities):
        raise GradingError(f"{label}: expected a list of integers (one per op), found {arities!r:.80}")
    if len(arities) != ops:
        raise GradingError(f"{label}: the chain has {ops} operators, so expected {ops} arities, found {len(arities)}")
    if any(a < 1 for a in arities):
        raise GradingError(f"{label}: every op reads at least one tensor, found {list(arities)}")
    reads_outside = arities[0] + sum(a - 1 for a in arities[1:])
    if reads_outside != outside_tensors:
        raise GradingError(
            f"{label}: this chain reads {outside_tensors} tensor{'s' if outside_tensors != 1 else ''} from outside it, "
            f"but your arities count {reads_outside} (op 0 reads only outside tensors; op i > 0 reads the previous "
            "result, which counts as one of its inputs, plus arities[i] - 1 outside tensors)")


# ----------------------------------------------------------------------------------------------
# collectives (Lab 4): a ring all-reduce and a data-parallel step, run in every rank on inputs the grader chose
#
# Where a test cell runs in the grader (mlsys.course.testcells), the learner's function stays in the learner's
# kernel: the worker-side halves (worker_ring_runs, worker_tagged_runs, worker_dp_runs) start the ranks from
# there, run the function on the tensors the grader sent, and return, per rank, the tensors afterwards and the
# operations (c10d collectives included) each rank's call dispatched. The grader-side halves (check_ring,
# diagnose_ring, check_dp) draw the inputs, compute every expected value themselves and decide. In the
# learner's own notebook (a self-check) the same halves run one after the other in one process.

COLLECTIVES = ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "all_gather", "all_gather_into_tensor",
               "reduce", "broadcast", "all_to_all", "all_to_all_single", "all_reduce_coalesced", "gather", "scatter")
"""The collectives of ``torch.distributed`` a hand-built ring must not call."""

PROCESS_GROUP_COLLECTIVES = ("allreduce", "allreduce_coalesced", "allgather", "allgather_into_tensor_coalesced",
                             "_allgather_base", "reduce_scatter", "_reduce_scatter_base", "alltoall", "alltoall_base")
"""The same collectives as methods of a process group or its backend (``dist.group.WORLD.allreduce``)."""

FORBIDDEN_COLLECTIVES = frozenset({f"torch.distributed*.{c}" for c in COLLECTIVES} | {f".{c}" for c in COLLECTIVES}
                                  | {f".{c}" for c in PROCESS_GROUP_COLLECTIVES})

C10D_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional", "_dtensor")
"""Operator namespaces of torch.distributed: every collective, however reached, dispatches one of their ops."""

POINT_TO_POINT_OPS = frozenset({"c10d::send", "c10d::recv_", "c10d::recv_any_source_"})
"""The dispatched ops of ``send``/``isend``/``recv``/``irecv`` (``batch_isend_irecv`` included)."""

RING_ALLOWED_OPS = POINT_TO_POINT_OPS | {"c10d::barrier", "c10d::monitored_barrier_"}
"""The torch.distributed ops a hand-built ring may dispatch: every other c10d op is a library collective."""

_TAG_BASE = 5
"""Rank r's diagnostic input is ``5**r * (1 + i % 7)``: a sum's base-5 digits count each rank's share
(exact in float32 for up to four ranks: at most 7 * (1 + 5 + 25 + 125) = 1092)."""


_RECORD: list[Any] = []


def dispatch_recorder() -> Any:
    """A torch dispatch mode whose ``ops`` collects the names of the operations dispatched under it
    (``aten::add``, ``c10d::send``, ``c10d::allreduce_``...); the course's own guard-buffer work is left out.

    The class opts out of torch's default of wrapping ``__torch_dispatch__`` in ``torch._disable_dynamo``,
    which imports Dynamo: 3-4 s of CPU in every process that first defines such a class (each rank a Lab 4
    check starts; measured on the 2-core grader, 2026-11-26)."""
    if not _RECORD:
        from torch.utils._python_dispatch import TorchDispatchMode

        class Record(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                return False

            def __init__(self) -> None:
                super().__init__()
                self.ops: set[str] = set()
                self.traffic: list[list[Any]] = []  # [op, peer (-1: none), elements] of each torch.distributed op

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
                if not HARNESS[0]:
                    name = str(func._schema.name) if hasattr(func, "_schema") else str(func)
                    self.ops.add(name)
                    if name.split("::")[0] in C10D_NAMESPACES and len(self.traffic) < 10_000:
                        self.traffic.append([name, *_traffic(name, args)])
                return func(*args, **(kwargs or {}))

        _RECORD.append(Record)
    return _RECORD[0]()


def _traffic(name: str, args: Sequence[Any]) -> tuple[int, int]:
    """(peer rank or -1, bytes of the tensors) of one dispatched torch.distributed op: what it moved, and where
    (``c10d::send(tensors, group, dstRank, tag)``, ``c10d::recv_(tensors, group, srcRank, tag)``). Bytes, not
    elements: data packed into a wider dtype (complex128) moves as many bytes."""
    torch = _torch()
    elements = 0
    for a in args:
        for t in (a if isinstance(a, (list, tuple)) else [a]):
            if isinstance(t, torch.Tensor):
                elements += t.numel() * t.element_size()
    peer = args[2] if name in ("c10d::send", "c10d::recv_") and len(args) > 2 and isinstance(args[2], int) else -1
    return int(peer), int(elements)


def _rank_traffic(rows: Any) -> list[tuple[str, int, int]]:
    """The ``traffic`` records of a rank's reply rows, as (op, peer, elements); malformed entries are dropped."""
    out = []
    for row in rows if isinstance(rows, list) else [rows]:
        for t in (row.get("traffic") if isinstance(row, dict) else None) or []:
            if isinstance(t, list) and len(t) == 3 and isinstance(t[1], int) and isinstance(t[2], int):
                out.append((str(t[0]), t[1], t[2]))
    return out


def check_ring_traffic(what: str, p: int, r: int, n: int, traffic: Sequence[tuple[str, int, int]],
                       itemsize: int = 1) -> None:
    """A ring all-reduce of ``n`` elements of ``itemsize`` bytes on ``p`` ranks: rank ``r`` sends only to its right
    neighbour and receives only from its left, and sends 2(p - 1) chunks of at most ceil(n / p) elements
    (reduce-scatter, then all-gather). Anything else (every rank sending its whole tensor to every other, a
    relay, a tree) is not a ring. ``traffic``: (op, peer, bytes) records."""
    sends = [(peer, k) for op, peer, k in traffic if op == "c10d::send"]
    recvs = [(peer, k) for op, peer, k in traffic if op in ("c10d::recv_", "c10d::recv_any_source_")]
    right, left = (r + 1) % p, (r - 1) % p
    to = sorted({peer for peer, k in sends if k and peer != right})
    frm = sorted({peer for peer, k in recvs if k and peer != left})
    if to or frm:
        raise GradingError(f"{what}, {p} processes, rank {r}: it sent to rank(s) {to or [right]} and received from "
                           f"rank(s) {frm or [left]}; in a ring each rank sends only to its right neighbour ({right}) "
                           f"and receives only from its left ({left})")
    bound = 2 * (p - 1) * -(-n // p)
    sent = sum(k for _, k in sends) / itemsize
    if sent > bound:
        raise GradingError(f"{what}, {p} processes, rank {r}, {n} elements: it sent {sent:,.0f} elements' worth of "
                           f"bytes; a ring sends 2(p - 1) = {2 * (p - 1)} chunks of at most ceil(n / p) = {-(-n // p)} "
                           f"elements ({bound:,} in all): whole tensors sent (or relayed) are not a ring all-reduce")


def library_collectives(ops: Sequence[str]) -> list[str]:
    """The ops of ``ops`` that are torch.distributed's own collectives (not a send, receive or barrier)."""
    return sorted(op for op in ops if op.split("::")[0] in C10D_NAMESPACES and op not in RING_ALLOWED_OPS)


def _learner(fn: Any) -> Any:
    """The learner's function inside the worker's recording wrapper: each rank records its own call."""
    return fn.fn if type(fn).__name__ == "Recorded" and type(fn).__module__ == "mlsys.course.worker" else fn


def _trap_collectives() -> Callable[[], None]:
    """Replace the collectives of ``torch.distributed`` by a trap (a clear error in the learner's own
    notebook); returns the function that puts them back. Only a convenience: the recorded ops decide."""
    import torch.distributed as d
    import torch.distributed.distributed_c10d as c10d

    originals = {c: getattr(d, c) for c in COLLECTIVES if hasattr(d, c)}

    def trap(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the ring called a collective of torch.distributed; build it from send/recv")

    for m in (d, c10d):  # the collectives are reachable under both names
        for c in originals:
            setattr(m, c, trap)

    def restore() -> None:
        for m in (d, c10d):
            for c, f in originals.items():
                setattr(m, c, f)
    return restore


def _ring_rank(fn: Callable[..., Any], inputs: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """In each rank: ``fn`` on a copy of each of this rank's inputs; per input the tensor it returned (or the
    name of its type), the input afterwards and the ops the call dispatched."""
    torch = _torch()
    import torch.distributed as d

    fn = _learner(fn)
    rows = []
    for x in inputs[d.get_rank()]:
        mine = x.clone()
        rec = dispatch_recorder()
        restore = _trap_collectives()
        try:
            with rec:
                out = fn(mine)
        finally:
            restore()
        rows.append({"out": out.detach().clone() if type(out) is torch.Tensor else None, "type": type(out).__name__,
                     "x": mine, "ops": sorted(rec.ops), "traffic": rec.traffic})
    return rows


def _launched(target: Callable[..., Any], p: int, *args: Any, timeout: float) -> dict[str, Any]:
    """``{"ranks": launch(target, p, *args)}``, or ``{"error": "timeout" | "failed", "message": ...}``."""
    from ..runtime.launch import LaunchError, LaunchTimeout, launch

    dispatch_recorder()  # its class (and torch's dispatch-mode module) made here once, inherited by the forked ranks
    try:
        return {"ranks": launch(target, p, *args, timeout=timeout)}
    except LaunchTimeout as exc:
        return {"error": "timeout", "message": str(exc)[:3000]}
    except LaunchError as exc:
        return {"error": "failed", "message": str(exc)[:3000]}


def worker_ring_runs(fn: Callable[..., Any], p: int, inputs: Sequence[Sequence[Any]], *, timeout: float = 30.0) -> dict[str, Any]:
    """Worker-side half of :func:`check_ring`: ``fn`` on ``p`` ranks, rank r on each tensor of ``inputs[r]``."""
    return _launched(_ring_rank, int(p), fn, inputs, timeout=float(timeout))


class _HeldReceive:
    """The request of a receive posted in a diagnostic run (:func:`_tagged_run`). The message lands in a private
    buffer; the learner's tensor holds NaN from the moment the receive is posted until ``wait()`` (or an
    ``is_completed()`` that returns True) is called on this request, which copies the message in. A read of
    the receive buffer before its request completed therefore always finds NaN, whatever the race between
    the ranks and whatever the allocator left in the buffer; every other call goes to the real request."""

    def __init__(self, work: Any, private: Any, target: Any) -> None:
        self._work, self._private, self._target = work, private, target

    def _deliver(self) -> None:
        if self._target is not None:  # once: what the learner writes there after wait() is theirs
            self._target.copy_(self._private)
            self._target = None

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        done = self._work.wait(*args, **kwargs)
        self._deliver()
        return done

    def is_completed(self) -> bool:
        done = self._work.is_completed()
        if done:
            self._deliver()
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _held_irecv(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``irecv`` for a diagnostic run: into a private buffer, the learner's tensor filled with NaN (a float
    tensor; the diagnostic input is float32) until the request's ``wait()``; see :class:`_HeldReceive`."""
    torch = _torch()

    def irecv(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(tensor, torch.Tensor) or not (tensor.is_floating_point() or tensor.is_complex()):
            return orig(tensor, *args, **kwargs)
        private = torch.empty_like(tensor)
        work = orig(private, *args, **kwargs)
        if work is None:  # this rank is not in the group: nothing was posted
            return None
        tensor.fill_(float("nan"))
        return _HeldReceive(work, private, tensor)
    return irecv


def _tagged_run(fn: Callable[..., Any], n: int) -> tuple[Any, list[tuple[int | None, Any]]]:
    """In each rank: ``fn`` on the diagnostic input ``5**r * (1 + i % 7)`` (float32), each ``irecv`` held
    until its request's ``wait()`` (:class:`_HeldReceive`), so that a read before it is seen in every run.

    Returns the tensor afterwards and, for every message this rank sent, its offset in the tensor
    (None if sent from another buffer) and a copy of its contents at the time of sending.
    """
    torch = _torch()
    import torch.distributed as d
    import torch.distributed.distributed_c10d as c10d

    fn = _learner(fn)
    x = (_TAG_BASE ** d.get_rank()) * (1 + torch.arange(n) % 7).to(torch.float32)
    sends: list[tuple[int | None, Any]] = []
    originals = {k: getattr(c10d, k) for k in ("isend", "send", "irecv")}

    def recorder(orig: Callable[..., Any]) -> Callable[..., Any]:
        def record(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(tensor, torch.Tensor) and tensor.numel():
                same = tensor.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
                offset = (tensor.data_ptr() - x.data_ptr()) // x.element_size() if same else None
                sends.append((offset, tensor.detach().clone()))
            return orig(tensor, *args, **kwargs)
        return record

    wrapped = {k: (_held_irecv(f) if k == "irecv" else recorder(f)) for k, f in originals.items()}
    for k, f in wrapped.items():  # the same object under both names, as P2POp checks its op by identity
        setattr(c10d, k, f)
        setattr(d, k, f)
    try:
        fn(x)
    finally:
        for k, f in originals.items():
            setattr(c10d, k, f)
            setattr(d, k, f)
    return x, sends


def worker_tagged_runs(fn: Callable[..., Any], p: int, n: int, *, timeout: float = 30.0) -> dict[str, Any]:
    """Worker-side half of :func:`diagnose_ring`: two runs of :func:`_tagged_run` on ``p`` ranks."""
    runs = []
    for _ in range(2):
        one = _launched(_tagged_run, int(p), fn, int(n), timeout=float(timeout))
        if "error" in one:
            return one
        runs.append([[x, [list(s) for s in sends]] for x, sends in one["ranks"]])
    return {"runs": runs}


def _decode(values: Any, p: int, start: int = 0) -> list[tuple[int, ...] | None]:
    """Per element (``start`` is the first one's index): how many times each rank's input went into it,
    or None if it is no such sum."""
    out: list[tuple[int, ...] | None] = []
    for i, v in enumerate(values.reshape(-1).tolist(), start):
        c = v / (1 + i % 7)
        if not math.isfinite(c) or c < 0 or abs(c - round(c)) > 1e-3 or round(c) >= _TAG_BASE ** p:
            out.append(None)
            continue
        c, digits = int(round(c)), []
        for _ in range(p):
            digits.append(c % _TAG_BASE)
            c //= _TAG_BASE
        out.append(tuple(digits))
    return out


def _shares(counts: tuple[int, ...] | None) -> str:
    if counts is None:
        return "no sum of the ranks' inputs"
    parts = [f"rank {q}" + (f" x{k}" if k != 1 else "") for q, k in enumerate(counts) if k]
    return "the sum of " + (", ".join(parts) if parts else "nothing")


def _check_sends(sends: list[list[tuple[int | None, Any]]], p: int, n: int) -> str:
    """What the messages each rank sent say about the step count and the chunks sent in each phase."""
    if n < p:
        return ""
    expected = 2 * (p - 1)
    for r, rank_sends in enumerate(sends):
        if len(rank_sends) != expected:
            return (f"rank {r} sent {len(rank_sends)} message{'s' if len(rank_sends) != 1 else ''}; a ring "
                    f"all-reduce on {p} processes sends 2(p - 1) = {expected} per rank: p - 1 = {p - 1} "
                    f"step{'s' if p != 2 else ''} of reduce-scatter, then p - 1 of "
                    "all-gather. Check the step counts of both loops")
    for r, rank_sends in enumerate(sends):
        for k, (offset, data) in enumerate(rank_sends):
            if offset is None:
                continue
            decoded = [c for c in _decode(data, p, offset) if c is not None]
            if not decoded:
                continue
            found = max(set(decoded), key=decoded.count)
            held = sum(1 for c in found if c)
            if k < p - 1 and held != k + 1:
                return (f"in reduce-scatter step {k}, rank {r} sent a chunk holding {_shares(found)}; expected "
                        f"a chunk holding {k + 1} of the {p} inputs (its own, plus one more per step): check which "
                        f"chunk each step sends, (r - s) % p in step s, and which it receives and adds, (r - s - 1) % p")
            if k >= p - 1 and held != p:
                return (f"in all-gather step {k - (p - 1)}, rank {r} sent a chunk holding {_shares(found)}, not yet "
                        f"the sum of all {p} inputs: the all-gather must pass on finished chunks, starting with the "
                        f"one this rank completed in the reduce-scatter, (r + 1) % p; check its indices")
    return ""


def diagnose_ring(fn: Callable[..., Any], p: int, n: int, *, timeout: float = 30.0) -> str:
    """:func:`_diagnose_ring` at ``n``; for fewer elements than processes, where chunks are empty and the
    messages say little, also at ``4p + 1`` elements."""
    cause = _diagnose_ring(fn, p, n, timeout=timeout)
    if n >= p or (cause and not cause.startswith("some elements miss")):
        return cause
    m = 4 * p + 1
    other = _diagnose_ring(fn, p, m, timeout=timeout)
    if other.startswith("on inputs of small integers"):
        return (f"the ring is right for {m} elements but not for {n} < p = {p}, where some chunks are empty: both "
                "the sender and the receiver of an empty chunk must skip it (or both send it)")
    return f"{other} (found on a run of {m} elements)" if other else cause


def _tagged_runs(fn: Callable[..., Any], p: int, n: int, timeout: float) -> list[list[tuple[Any, list]]] | None:
    """Two runs of :func:`_tagged_run` (in the learner's kernel where ``fn`` lives there), checked for form:
    per run, per rank, the tensor afterwards and the (offset, contents) of each message sent; None on failure."""
    torch = _torch()
    reply = _worker_half(fn, "tagged_runs", worker_tagged_runs, p, n, timeout=timeout)
    try:
        runs = []
        for run in reply["runs"][:2]:
            ranks = []
            for x, sends in run[:p]:
                if type(x) is not torch.Tensor or x.numel() != n:
                    return None
                ok = [(o if isinstance(o, int) and not isinstance(o, bool) else None, t) for o, t in sends
                      if type(t) is torch.Tensor]
                ranks.append((x, ok))
            runs.append(ranks)
        return runs if len(runs) == 2 and all(len(r) == p for r in runs) else None
    except (KeyError, TypeError, ValueError):
        return None


def _diagnose_ring(fn: Callable[..., Any], p: int, n: int, *, timeout: float = 30.0) -> str:
    """Why a ring all-reduce gives wrong sums, from a run on inputs whose sums say which ranks they hold.

    Rank r holds ``5**r * (1 + i % 7)``, so every element of a correct result has each rank's share
    exactly once, and each message sent shows how many shares it carried. A receive buffer holds NaN
    until its request's ``wait()`` (:class:`_HeldReceive`). In order: NaN in the result (a receive buffer
    read before its request completed, in every run); two runs that differ (another read of a buffer not
    yet filled); elements that are no such sum;
    a wrong number of messages per rank (step count); a message with the wrong number of shares for
    its step (chunk indices of either phase); only the last ``n % p`` elements wrong (chunk
    boundaries); shares counted twice. Returns "" where nothing specific is found.
    """
    runs = _tagged_runs(fn, p, n, timeout)
    if runs is None:
        return ""
    results = [[x for x, _ in run] for run in runs]
    first = [_decode(t, p) for t in results[0]]
    full = tuple([1] * p)
    bad = [(r, i, c) for r, row in enumerate(first) for i, c in enumerate(row) if c != full]
    if not bad:
        return ("on inputs of small integers the ring is right: does it depend on the values (a buffer reused "
                "across calls? rounding?)")
    r0, i0, c0 = bad[0]
    example = f"e.g. rank {r0}, element {i0}: {_shares(c0)}"
    held = [(r, i) for r, i, c in bad if c is None and math.isnan(float(results[0][r][i]))]
    if held:
        return (f"some elements are NaN (e.g. rank {held[0][0]}, element {held[0][1]}): in these diagnostic runs a "
                "receive buffer holds NaN from the moment its receive is posted until wait() is called on its "
                "request, so a receive buffer was read (or sent on) before its request completed: call wait() on "
                "every request of a step before reading (or adding) what it received, and before sending from "
                "that buffer again")
    if any(not torch_equal(a, b) for a, b in zip(results[0], results[1], strict=True)):
        return (f"the result changes from one run to the next ({example}): a receive buffer read before its "
                "request completed? call wait() on every request of a step before reading (or adding) what it "
                "received, and before sending from that buffer again")
    if any(c is None for _, _, c in bad):
        return (f"some elements hold no sum of the ranks' inputs ({example}): a receive buffer read before its "
                "request completed (wait() first), or a scratch buffer used before it was filled")
    sends = _check_sends([s for _, s in runs[0]], p, n)
    if sends:
        return f"{sends} ({example} at the end)"
    tail = n - (n // p) * p
    wrong = {i for _, i, _ in bad}
    if n >= p and tail and wrong <= set(range(n - tail, n)):
        return (f"only the last {tail} elements (n % p with n = {n}, p = {p}) are wrong ({example}): the chunks "
                "do not cover the whole tensor: check the chunk boundaries (chunk_bounds)")
    if any(max(c) > 1 for _, _, c in bad if c is not None):
        return (f"some elements count a rank's input more than once ({example}): the reduce-scatter adds a chunk "
                "twice, or the all-gather adds what it receives (it copies)")
    return f"some elements miss some ranks' inputs ({example}): check both phases' chunk indices"


def torch_equal(a: Any, b: Any) -> bool:
    """Exact equality of two tensors, NaN equal to NaN (a garbage read is rarely the same twice)."""
    torch = _torch()
    return bool(torch.equal(torch.nan_to_num(a, nan=1.2345), torch.nan_to_num(b, nan=1.2345)))


def _grader_generator() -> Any:
    """A generator seeded from the OS: inputs no answer cell can know in advance."""
    return _torch().Generator().manual_seed(int.from_bytes(os.urandom(6), "little"))


def _ring_input(n: int, dtype: str, gen: Any) -> Any:
    torch = _torch()
    if dtype.startswith("int"):
        return torch.randint(-1000, 1000, (n,), generator=gen, dtype=getattr(torch, dtype))
    return torch.randn(n, generator=gen, dtype=torch.float64).to(getattr(torch, dtype))


def _worker_half(fn: Any, name: str, local: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The worker-side half of a check, run where ``fn`` lives: ``name`` (one of :data:`mlsys.course.worker.HELPERS`)
    in the learner's kernel when ``fn`` is a :class:`RemoteFunction` (a test cell run in the grader), else
    ``local`` here (the learner's own notebook)."""
    if isinstance(fn, RemoteFunction):
        return fn.run_helper(name, *args, **kwargs)
    return local(fn, *args, **kwargs)


def _ranks_reply(reply: Any, p: int, what: str) -> list[Any]:
    """The per-rank list of a worker-side half's reply, or the :class:`GradingError` its error means."""
    if not isinstance(reply, dict):
        raise GradingError(f"{what}: the notebook's kernel sent back a malformed reply")
    if reply.get("error") in ("timeout", "failed"):
        raise GradingError(str(reply.get("message", ""))[:3000] or what)
    ranks = reply.get("ranks")
    if not isinstance(ranks, list) or len(ranks) != p:
        raise GradingError(f"{what}: the notebook's kernel sent back a malformed reply (expected {p} ranks)")
    return ranks


def _rank_ops(rows: Any) -> set[str]:
    ops: set[str] = set()
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and isinstance(row.get("ops"), list):
            ops |= {str(op) for op in row["ops"]}
    return ops


def check_ring(fn: Callable[..., Any], world_sizes: Sequence[int], lengths: Sequence[int],
               dtypes: Sequence[str] = ("float32",), timeout: float = 30.0, what: str = "ring_allreduce") -> None:
    """Run ``fn`` as an all-reduce on ``world_sizes`` processes for each length and dtype; fail with a cause.

    Every rank gets inputs drawn here (from the OS's randomness) and its result and its input afterwards
    are compared with the sum computed here. Every rank's call records the operations it dispatched: a
    library collective (``c10d::allreduce_`` and the like, however it was reached: ``dist.all_reduce``,
    ``dist.group.WORLD.allreduce``, a process group's method) fails, and so does a rank of several that
    sent and received nothing through torch.distributed. float32 runs first; a ring right in float32 and
    wrong (or dying) in another dtype is reported as a dtype slip. Wrong sums are explained by
    :func:`diagnose_ring`.
    """
    from .grading import assert_no_library_calls

    assert_no_library_calls(fn, forbidden=FORBIDDEN_COLLECTIVES, name=what)
    torch = _torch()
    gen = _grader_generator()
    lengths = [int(n) for n in lengths]
    order = sorted(dtypes, key=lambda d: d != "float32")
    for p in world_sizes:
        passed: list[str] = []
        for dtype in order:
            slip = (f" It is right in {passed[0]} but not in {dtype}: a buffer of a fixed dtype? (torch.empty(n) or "
                    "dtype=torch.float32 is float32 whatever the input: allocate scratch buffers with "
                    "dtype=flat.dtype, device=flat.device)") if passed else ""
            inputs = [[_ring_input(n, dtype, gen) for n in lengths] for _ in range(p)]
            wide = torch.int64 if dtype.startswith("int") else torch.float64
            want = [torch.stack([inputs[r][i].to(wide) for r in range(p)]).sum(0).to(getattr(torch, dtype))
                    for i in range(len(lengths))]
            reply = _worker_half(fn, "ring_runs", worker_ring_runs, p, inputs, timeout=timeout)
            try:
                ranks = _ranks_reply(reply, p, f"{what} with {p} processes on {dtype}")
            except GradingError as exc:
                did = "did not finish" if isinstance(reply, dict) and reply.get("error") == "timeout" else "failed"
                raise GradingError(f"{what} with {p} processes on {dtype} {did}: {exc}{slip}") from None
            for r, rows in enumerate(ranks):
                ops = _rank_ops(rows)
                library = library_collectives(sorted(ops))
                if library:
                    raise GradingError(
                        f"{what}, {p} processes, rank {r}: running it dispatched {', '.join(library)}, a collective "
                        "of torch.distributed's library (however it was reached: dist.all_reduce, "
                        "dist.group.WORLD.allreduce, a process group's method); this exercise asks you to build the "
                        "ring yourself from send/recv (isend/irecv)")
                if p > 1 and not ops & POINT_TO_POINT_OPS:
                    raise GradingError(
                        f"{what}, {p} processes, rank {r}: it sent and received nothing through torch.distributed's "
                        "send/recv (none was recorded), so the ranks' data moved some other way or not at all; "
                        "build the ring from send/recv (isend/irecv)")
                if p > 1 and isinstance(rows, list):
                    for n, row in zip(lengths, rows, strict=False):
                        check_ring_traffic(what, p, r, n, _rank_traffic([row]),
                                           itemsize=getattr(torch, dtype).itemsize)
            for r, rows in enumerate(ranks):
                if not isinstance(rows, list) or len(rows) != len(lengths):
                    raise GradingError(f"{what}, rank {r}: the notebook's kernel sent back a malformed reply")
                for i, (n, row) in enumerate(zip(lengths, rows, strict=True)):
                    where = f"{what}, {p} processes, rank {r}, {n} elements of {dtype}"
                    try:
                        out = row.get("out") if isinstance(row, dict) else None
                        inplace = row.get("x") if isinstance(row, dict) else None
                        if type(out) is not torch.Tensor:
                            found = str(row.get("type", "?"))[:60] if isinstance(row, dict) else "?"
                            raise GradingError(f"{where}: expected the summed tensor to be returned, found "
                                               f"{found} (return tensor)")
                        if out.dtype != want[i].dtype:
                            raise GradingError(f"{where}: expected a result of dtype {want[i].dtype}, found {out.dtype}"
                                               f".{slip}")
                        if type(inplace) is not torch.Tensor:
                            raise GradingError(f"{where}: the notebook's kernel sent back a malformed reply")
                        tol = dict(rtol=1e-5, atol=1e-5) if dtype != "float16" else dict(rtol=1e-2, atol=1e-2)
                        assert_close(out, want[i], **tol, name=f"{where}, returned tensor")
                        assert_close(inplace, want[i], **tol, name=f"{where}, in place (the input tensor itself)")
                    except GradingError as exc:
                        cause = slip.strip() if slip else diagnose_ring(fn, p, n, timeout=timeout)
                        raise GradingError(f"{exc}" + (f"\nLikely cause: {cause}" if cause else "")) from None
            passed.append(dtype)
    print(f"{what}: correct for {len(lengths)} lengths x {len(dtypes)} dtypes on {list(world_sizes)} processes")


def make_mlp(width: int = 32, depth: int = 3, seed: int = 0) -> Any:
    """A small MLP (Linear, Tanh) x depth with reproducible weights."""
    torch = _torch()
    from torch import nn

    torch.manual_seed(seed)
    layers: list[Any] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*layers)


def _dp_rank(step_fn: Callable[..., Any], x: Any, y: Any, seed: int) -> dict[str, Any]:
    """In each rank: step_fn's gradients, the rows of the batch its model saw and the ops the step dispatched."""
    torch = _torch()
    model = make_mlp(seed=seed)
    # the rows this rank's loss depends on, read from the gradient of its input: however the forward pass was
    # computed (model(x), model.forward(x), F.linear on the weights), a row the loss used gets a gradient
    xx = x.clone().requires_grad_(True)
    rec = dispatch_recorder()
    with rec:
        grads = _learner(step_fn)(model, xx, y.clone(), 0.001)  # tiny buckets: several all-reduces per step
    grads = [t.detach().clone() if type(t) is torch.Tensor else None for t in grads] if isinstance(grads, (list, tuple)) \
        else None
    rows = int((xx.grad != 0).any(dim=1).sum()) if xx.grad is not None else 0
    return {"grads": grads, "rows": rows, "ops": sorted(rec.ops), "traffic": rec.traffic}


def worker_dp_runs(step_fn: Callable[..., Any], p: int, x: Any, y: Any, seed: int, *, timeout: float = 60.0) -> dict[str, Any]:
    """Worker-side half of :func:`check_dp`: ``step_fn`` on ``p`` ranks, each given the whole batch ``x, y``.

    Dynamo is imported here, once, before the ranks fork: DDP's constructor reads a Dynamo setting, and
    that import cost 2-3 s of CPU in every rank (9 ranks for the lab's three world sizes, about 20 CPU-s per
    graded notebook; the import starts no thread, so the ranks still fork cleanly)."""
    import torch._dynamo  # noqa: F401 - inherited by the forked ranks

    return _launched(_dp_rank, int(p), step_fn, x, y, int(seed), timeout=float(timeout))


def _full_batch_grads(x: Any, y: Any, seed: int) -> list[Any]:
    model = make_mlp(seed=seed)
    ((model(x) - y) ** 2).mean().backward()
    return [param.grad for param in model.parameters()]


def check_dp(step_fn: Callable[..., Any], world_sizes: Sequence[int], batch: int, timeout: float = 60.0) -> None:
    """Every rank of a data-parallel step must end with the whole batch's gradient, having seen its share and
    exchanged something through torch.distributed (a rank that computed the whole batch alone did not)."""
    from ..runtime.launch import launch

    torch = _torch()
    gen = _grader_generator()
    for p in world_sizes:
        x, y = torch.randn(batch, 32, generator=gen), torch.randn(batch, 32, generator=gen)
        seed = int(torch.randint(0, 1000, (), generator=gen))
        if isinstance(step_fn, RemoteFunction):
            reply = step_fn.run_helper("dp_runs", p, x, y, seed, timeout=timeout)
            want = _full_batch_grads(x, y, seed)  # here: the grader forks no ranks after this
        else:
            reply = worker_dp_runs(step_fn, p, x, y, seed, timeout=timeout)
            # the reference runs in a child too: autograd in this process would start its device threads,
            # after which forked ranks can no longer use autograd or CUDA
            want = launch(_full_batch_grads, 1, x, y, seed, timeout=timeout)[0]
        try:
            ranks = _ranks_reply(reply, p, f"data_parallel_step on {p} processes")
        except GradingError as exc:
            raise GradingError(f"data_parallel_step on {p} processes failed: {exc}") from None
        for r, rank in enumerate(ranks):
            grads, rows = (rank.get("grads"), rank.get("rows")) if isinstance(rank, dict) else (None, None)
            if rows != batch // p:
                raise GradingError(f"rank {r} of {p}: expected the model to see its share of {batch // p} rows, "
                                   f"it saw {rows} (the rows of the batch whose input got a gradient: those its loss "
                                   "used)")
            if p > 1 and not any(op.split("::")[0] in C10D_NAMESPACES for op in _rank_ops([rank])):
                raise GradingError(f"rank {r} of {p}: its step exchanged nothing through torch.distributed (no "
                                   "collective or message was recorded), so it cannot hold the whole batch's gradient "
                                   "honestly; average the gradients across processes (DDP, or an all-reduce)")
            moved = sum(k for _, _, k in _rank_traffic([rank]))
            needed = sum(int(t.numel()) * t.element_size() for t in want)
            if p > 1 and moved < needed:
                raise GradingError(f"rank {r} of {p}: its step exchanged {moved:,} bytes through torch.distributed, "
                                   f"fewer than the {needed:,} bytes of gradients it must average with the other "
                                   "processes (a barrier or a token message is not an all-reduce of the gradients)")
            if not isinstance(grads, list) or len(grads) != len(want):
                raise GradingError(f"rank {r}: expected a list of {len(want)} gradients, found {type(grads).__name__}")
            for i, (got, exp) in enumerate(zip(grads, want, strict=True)):
                assert_close(got, exp, rtol=1e-4, atol=1e-6,
                             name=f"gradient {i} on rank {r} of {p} (the whole batch's gradient)")
    print(f"data_parallel_step: correct on {list(world_sizes)} processes")


# ----------------------------------------------------------------------------------------------
# online softmax (Lab 5)


def _plain_call(fn: Callable[..., Any], inputs: Sequence[Any], label: str, isolate: bool | None) -> Any:
    """``fn(*inputs)`` on copies in zero-filled memory (:func:`in_zero_padding`), in a child process on a CPU
    (a crash or an endless loop costs this check only; on a GPU under :mod:`.watchdog`); a learner's
    exception becomes a :class:`GradingError`. A function of the learner's kernel (a test cell run in the
    grader) is called there through :func:`worker_call_checked`, and only its plain result comes back."""
    torch = _torch()
    inputs = [in_zero_padding(t) if isinstance(t, torch.Tensor) else t for t in inputs]
    if isinstance(fn, RemoteFunction):
        reply = fn.run_helper("call_checked", *inputs, isolate=isolate, label=label)
        if not isinstance(reply, dict) or not isinstance(reply.get("error", ""), str):
            raise GradingError(f"{label}: the notebook's kernel sent back a malformed reply")
        if reply.get("error"):
            raise GradingError(reply["error"])
        return reply.get("result")
    return worker_call_checked(fn, *inputs, isolate=isolate, label=label, _raise=True)["result"]


def _mismatch(result: Any, expected: Any, *, rtol: float, atol: float, label: str) -> str | None:
    """What is wrong with ``result`` ("12 of 640 outputs NaN/Inf", "max abs error ..."), or None if it is right."""
    torch = _torch()
    if type(result) is not torch.Tensor:  # exactly: a subclass or a look-alike could answer the checks' reads
        raise GradingError(f"{label}: expected a tensor, found {type(result).__name__}")
    nonfinite = int((~torch.isfinite(result.float())).sum())
    if nonfinite:
        return f"{nonfinite} of {result.numel()} outputs NaN/Inf"
    try:
        assert_close(result, expected, rtol=rtol, atol=atol, name=label)
    except GradingError as exc:
        return str(exc).split(": ", 1)[-1]
    return None


def check_scores_far_below_zero(fn: Callable[..., Any], inputs: Sequence[Any], expected: Any, *,
                                lowest_score: float, rtol: float, atol: float, label: str,
                                isolate: bool | None = None) -> Any:
    """Run ``fn`` on inputs whose every score is far below zero; fail naming the initial max.

    Softmax is unchanged by any shift, so an online softmax whose running max starts at 0 instead of
    -inf is right whenever some score is near or above 0, and wrong only here: every exp(s - 0)
    underflows to 0, the running sum stays 0 and the output is 0 / 0 (NaN) or garbage. The inputs
    are copied into zero-filled memory (:func:`in_zero_padding`), so a read past their end (charged by
    the guarded checks) does not cost this check too; on a CPU the call runs in a child process.

    Scores of size ``|lowest_score|`` carry fp32 rounding of a few units in the last place, about
    ``|lowest_score| x 2^-22`` (the kernel's and the reference's differently), and exp turns that
    absolute error into a relative error of each weight. So the check allows at least
    ``|lowest_score| x 2^-20 x max|expected|`` of absolute error (4e-4 at a score of -204 and outputs
    of 2): honest kernels differ from the reference by about 1e-5 here, while a running max that starts
    at 0 gives NaN or outputs off by their own size.
    """
    torch = _torch()
    if isinstance(expected, torch.Tensor) and expected.numel():
        atol = max(atol, abs(lowest_score) * 2.0 ** -20 * float(expected.abs().max()))
    result = _plain_call(fn, inputs, label, isolate)
    found = _mismatch(result, expected, rtol=rtol, atol=atol, label=label)  # refuses a non-tensor, by exact type
    if found is None:
        return result
    raise GradingError(
        f"{label}: every score is far below zero (down to about {lowest_score:.0f}); expected the softmax-weighted "
        f"average of V as usual, found {found}. Likely cause: the running max starts at 0 instead of -inf (or "
        "the scores are not shifted by it). With m = 0, exp(s - m) underflows to 0 for every key, the running sum "
        "l stays 0 and the output is 0 / 0. Start it at -inf (tl.full([BLOCK_M], float(\"-inf\"), tl.float32)): "
        "the first block then sets it to its own max")


FP16_MAX = 65504.0
"""The largest finite fp16 value, (2 - 2^-10) x 2^15."""


def check_attention_sums_fp32(fn: Callable[..., Any], q: Any, k: Any, v: Any, expected: Any, *, rtol: float,
                              atol: float, label: str, isolate: bool | None = None) -> Any:
    """Run ``fn(q, k, v)`` on fp16 inputs whose running sum acc passes fp16's range; fail naming fp16 accumulation.

    Before the final division, acc = sum_j exp(s_j - max_j s_j) v_j per query row and column (s =
    q k^T / sqrt(D)). The check first works that sum out in float64 from the inputs and refuses
    inputs where it stays below :data:`FP16_MAX`. A kernel that keeps acc in fp32 from its
    ``tl.zeros`` in the program through every block is right here. One that holds acc in fp16
    anywhere (its initial dtype in the kernel, a cast back to the input dtype in the loop, an fp16
    ``out_dtype`` of ``tl.dot``) overflows to inf: every key adds to the sum, which cannot be
    rescaled below its final value. Inputs sit in zero-filled memory; on a CPU the call runs in a child
    process (:func:`_plain_call`).
    """
    torch = _torch()
    s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    sums = torch.exp(s - s.amax(-1, keepdim=True)) @ v.double()
    largest = float(sums.abs().max())
    if largest <= FP16_MAX:
        raise ValueError(f"{label}: the inputs' largest unnormalised sum is {largest:.4g}, within fp16's range; "
                         f"choose values or a length that take it past {FP16_MAX:g}")
    result = _plain_call(fn, (q, k, v), label, isolate)
    found = _mismatch(result, expected, rtol=rtol, atol=atol, label=label)
    if found is None:
        return result
    raise GradingError(
        f"{label}: expected the softmax-weighted average of V (values up to {float(v.abs().max()):g}, so outputs "
        f"of that size), found {found}. Before the division by l, acc = sum of p * v reaches {largest:.3g} here, "
        f"more than fp16's largest value, {FP16_MAX:g}: acc is held in fp16 somewhere (fp16 accumulation), in "
        "attention_kernel's tl.zeros, in a cast back to the input dtype inside the loop, or in tl.dot's out_dtype. "
        "Keep acc, l and m in fp32 (tl.float32) from attention_kernel through attend_blocks, convert only the block "
        "of probabilities p to V's dtype for tl.dot, and convert the output to O's dtype only when you store it")


def check_running_sums_fp32(acc_from_0: Any, l_from_0: Any, acc_from_big: Any, l_from_big: Any, *, big: float,
                            label: str = "attend_blocks") -> None:
    """Fail if the same key blocks add less to running sums that start at ``big`` than to sums starting at 0.

    In fp32 both increments are equal (to rounding); held in fp16 between blocks, a sum of 2048
    (spacing 2) absorbs each block's contribution of about 1, so the increment from ``big`` is ~0.
    """
    torch = _torch()
    for name, small, large in (("acc", acc_from_0, acc_from_big), ("l", l_from_0, l_from_big)):
        inc_small = small.double()
        inc_large = large.double() - big
        bad = (inc_large - inc_small).abs() > 1e-3 * inc_small.abs().clamp_min(1e-6)
        if bool(bad.any()):
            i = tuple(int(x) for x in torch.nonzero(bad)[0])
            raise GradingError(
                f"{label}: the same four key blocks add {float(inc_small[i]):.6g} to the running {name} when it starts "
                f"at 0, but {float(inc_large[i]):.6g} when it starts at {big:g} (at index {i}); in fp32 both add the "
                f"same. The running {name} is rounded to fp16 between blocks (fp16 accumulation: the spacing of fp16 "
                f"at {big:g} is {2.0 ** (math.floor(math.log2(big)) - 10):g}, so a long sequence's later keys are "
                "lost). Keep acc, l and m in fp32 (tl.float32) and convert only the block of probabilities p to "
                "V's dtype for tl.dot")


def in_zero_padding(t: Any, pad: int = 4096) -> Any:
    """A contiguous copy of ``t`` at the start of a zero-filled buffer ``pad`` elements longer.

    For checks of one property (a causal mask, fp16 stability) whose inputs would otherwise be followed
    by arbitrary memory: a read past the end (a missing load mask, charged by the check that uses guard
    buffers) then reads zeros, which a masked score ignores, instead of NaN that would cost this check too.
    """
    return zero_padded(t, pad)  # sent to the learner's kernel, it is rebuilt in zero-filled memory there too


# ----------------------------------------------------------------------------------------------
# worker-side halves: where a lab's test cells run in the grader (mlsys.course.testcells), these run in the
# learner's kernel on inputs the grader chose and return plain data; the grader's half above decides


def worker_call_checked(fn: Callable[..., Any], *inputs: Any, isolate: bool | None = None, label: str = "your function",
                        _raise: bool = False) -> dict[str, Any]:
    """``{"result": fn(*inputs)}`` (in a child process on a CPU), or ``{"error": message}`` when it raised or crashed."""
    if isolate is None:
        isolate = not has_cuda()
    try:
        if isolate:
            result = run_isolated(_call_to_bytes, fn, *inputs, timeout=WALL_LIMIT, cpu_limit=CPU_LIMIT,
                                  heartbeat=HEARTBEAT, what=label)
            if isinstance(result, tuple) and len(result) == 3 and result[0] == "with_ops":
                fn.recorded_ops.update(result[2])
                result = result[1]
            result = _unpack(result)
        else:
            with watchdog.watch(label, active=_runs_here_on_gpu(fn)):
                result = fn(*inputs)
                if has_cuda():
                    _torch().cuda.synchronize()  # a hung kernel is waited for here, under the watchdog
    except GradingError as exc:
        msg = f"{label}: {exc}"
    except Exception as exc:  # the learner's code
        msg = explain_exception(label, exc)
    else:
        return {"result": result}
    if _raise:
        raise GradingError(msg) from None
    return {"error": msg}


def worker_run_guarded(fn: Callable[..., Any], inputs: Sequence[Any], **opts: Any) -> dict[str, Any]:
    """:func:`run_guarded` with its report as plain data (the grader rebuilds a :class:`GuardReport`)."""
    import dataclasses

    out = dict(run_guarded(fn, inputs, **opts))
    out["report"] = dataclasses.asdict(out["report"])
    out.pop("compiled", None)  # this process's compile cache: nothing the grader reads
    return out


def _guarded_reply(out: Any, label: str) -> dict[str, Any]:
    """The grader's reading of :func:`worker_run_guarded`'s reply: a :class:`GuardReport` rebuilt from plain fields."""
    import dataclasses

    try:
        fields = {f.name for f in dataclasses.fields(GuardReport)}
        rep = out["report"]
        report = GuardReport(**{k: v for k, v in rep.items() if k in fields})
        report.problems()  # every field readable as the report's own code reads it
        return {"result": out.get("result"), "report": report, "error": out.get("error"),
                "tracked": out.get("tracked") is True, "warnings": [str(w) for w in out.get("warnings", [])][:3],
                "compile_errors": [str(e)[:2000] for e in out.get("compile_errors") or []][:1]}
    except Exception as exc:  # noqa: BLE001 - a reply that is not what worker_run_guarded sends
        raise GradingError(f"{label}: the notebook's kernel sent back a malformed check report "
                           f"({type(exc).__name__})") from None


def calls_of(fn: Callable[..., Any], name: str, *args: Any, **kwargs: Any) -> list[tuple]:
    """The positional arguments of every call of the global function ``name`` that ``fn(*args, **kwargs)`` makes.

    The global is wrapped for the duration of the call (in the learner's namespace, where ``fn`` looks it
    up) and restored after. In a test cell that runs in the grader, the call and the count run in the
    learner's kernel and the arguments come back as plain data.
    """
    if isinstance(fn, RemoteFunction):
        return fn.run_helper("calls_of", name, *args, **kwargs)
    ns = getattr(fn, "fn", fn).__globals__  # (through mlsys.course.worker.Recorded in the learner's kernel)
    if name not in ns or not callable(ns[name]):
        raise GradingError(f"{getattr(fn, '__name__', 'your function')}: expected a function {name} beside it")
    real, calls = ns[name], []

    def counting(*a: Any, **k: Any) -> Any:
        calls.append(a)
        return real(*a, **k)

    ns[name] = counting
    try:
        fn(*args, **kwargs)
    finally:
        ns[name] = real
    return calls


def with_shifted_argument(fn: Callable[..., Any], name: str, index: int, shift: float, *args: Any) -> Any:
    """``fn(*args)`` with every call of the global function ``name`` given its positional argument ``index`` plus
    ``shift``: whether ``fn``'s result is built from what ``name`` returns, not only from calls it makes.

    For Lab 5's ``streamed_attention``: shifting ``online_update``'s block of values by c shifts every row of
    an honest result by c (a row's weights sum to 1); a result computed another way, beside calls whose
    returns it drops, does not move. In a test cell run by the grader, it runs in the learner's kernel."""
    if isinstance(fn, RemoteFunction):
        return fn.run_helper("shifted_call", name, int(index), float(shift), *args)
    ns = getattr(fn, "fn", fn).__globals__
    if name not in ns or not callable(ns[name]):
        raise GradingError(f"{getattr(fn, '__name__', 'your function')}: expected a function {name} beside it")
    real = ns[name]

    def shifted(*a: Any, **k: Any) -> Any:
        a = tuple(x + shift if i == index else x for i, x in enumerate(a))
        return real(*a, **k)

    ns[name] = shifted
    try:
        return fn(*args)
    finally:
        ns[name] = real


_PROBE_SOURCE = """
@triton.jit
def attend_blocks_probe(K, V, OUT, start_value, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_m = tl.arange(0, 16)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.full([16, HEAD_DIM], 1.0, K.dtype.element_ty)
    acc = tl.zeros([16, HEAD_DIM], tl.float32) + start_value
    l_i = tl.zeros([16], tl.float32) + start_value
    m_i = tl.zeros([16], tl.float32)
    acc, l_i, m_i = attend_blocks(acc, l_i, m_i, q, K, V, 0, N_CTX, offs_m, N_CTX, 1.0, HEAD_DIM, BLOCK_N,
                                  False, False)
    tl.store(OUT + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc)
    tl.store(OUT + 16 * HEAD_DIM + offs_m, l_i)
"""


def running_sums_probe(attend_blocks: Any, *, device: str = "cpu", starts: Sequence[float] = (0.0, 2048.0)) -> list:
    """``[(acc, l), ...]``: Lab 5's ``attend_blocks`` run from running sums that start at each of ``starts``.

    fp16 accumulation shows only at thousands of keys (too slow under the interpreter), where the running
    sums are large. So this probe starts the sums there: acc = l = start, then four blocks of 16 keys with
    scores -4 (log2 units, p = 2^-4) and values 1 each add 16 * 2^-4 = 1 to both, as they do to sums
    starting at 0. Held in fp16 between blocks (spacing 2 at 2048), each 2048 + 1 rounds back to 2048.
    Judge the result with :func:`check_running_sums_fp32`.
    """
    if isinstance(attend_blocks, RemoteFunction):
        return attend_blocks.run_helper("running_sums_probe", device=device, starts=list(starts))
    import linecache

    import triton
    import triton.language as tl

    torch = _torch()
    filename = "<mlsys.course.checks: attend_blocks probe>"  # Triton reads a kernel's source through linecache
    linecache.cache[filename] = (len(_PROBE_SOURCE), None, _PROBE_SOURCE.splitlines(True), filename)
    ns: dict[str, Any] = {"triton": triton, "tl": tl, "attend_blocks": attend_blocks}
    exec(compile(_PROBE_SOURCE, filename, "exec"), ns)  # noqa: S102 - the course's own probe kernel
    probe_kernel = ns["attend_blocks_probe"]
    k16 = torch.full((64, 16), -0.25, dtype=torch.float16, device=device)  # q.k = 16 * 1 * -0.25 = -4
    v16 = torch.ones(64, 16, dtype=torch.float16, device=device)
    out = []
    for start in starts:
        probe = torch.zeros(16 * 16 + 16, device=device)
        probe_kernel[(1,)](k16, v16, probe, float(start), 64, HEAD_DIM=16, BLOCK_N=16)
        out.append((probe[:256].reshape(16, 16).cpu(), probe[256:].cpu()))
    return out
