"""A launcher run on guarded tensors and what it did, reported: out-of-bounds reads and writes, outputs not
written, a crash explained (:class:`GuardReport`), in a child process with CPU and wall limits where needed;
:func:`check_kernel` is the labs' one-call check of a kernel.

Moved out of :mod:`mlsys.labkit.checks` (issue 48, "a size it can keep"); ``checks`` re-exports its names,
the ones the labs' cells and the grader call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlsys.labkit import compilecheck, watchdog
from mlsys.labkit.grading import GradingError, assert_close, run_isolated
from mlsys.labkit.guardbuffers import Guarded, Tracker, _CaptureOutputs, _torch, guard_input
from mlsys.labkit.proxy import RemoteFunction
from mlsys.runtime.device import has_cuda


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
            from mlsys.labkit.versions import problems

            known = [p for p in problems() if "interpreter" in p]
            if known:  # Triton's own interpreter with a newer NumPy, not the learner's kernel
                return f"{label}: not your kernel: {known[0]} ({text[:200]})"
        return f"{label}: the Triton interpreter stopped your kernel ({text[:300]}).{hint}"
    return f"{label} raised {text[:500]}"


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
    from mlsys.runtime.device import triton_interpreted

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
    if isinstance(getattr(args[0], "recorded_ops", None), set):  # mlsys.grader.learnerside.worker.Recorded: ops back to the parent
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
    if isinstance(getattr(fn, "recorded_ops", None), set):  # mlsys.grader.learnerside.worker.Recorded: ops back to the parent
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
    return has_cuda() and type(fn).__module__ != "mlsys.labkit.proxy"


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
        from mlsys.diagrams.touched import show_report

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
        _check_reads(rep, max_reads, label)
    return result


def _check_reads(rep: GuardReport, max_reads: dict[str, float], label: str) -> None:
    """Fail when the kernel loaded more elements of an input than ``max_reads[name]`` times its size (under the
    interpreter, where every load is counted)."""
    for name, limit in max_reads.items():
        size = rep.sizes.get(name, 0)
        got = rep.reads.get(name, 0)
        if size and got > limit * size:
            raise GradingError(
                f"{label}: your kernel loaded {got:,} elements of {name}, {got / size:.2g} times its {size:,} "
                f"elements; a fused kernel reads each input element {limit:g} time{'s' if limit != 1 else ''}. "
                "Keep what you loaded in registers instead of loading it again (e.g. one tl.load of the row, "
                "then max, exp, sum and divide on that block)")


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
