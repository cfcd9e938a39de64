"""Helpers for the labs' test cells: checks with messages a learner can act on.

Every check raises :class:`GradingError` (an ``AssertionError``, so nbgrader scores the cell zero)
whose message says what was expected and what was found. The helpers also resist the obvious
cheats:

* :func:`check_on_fresh_inputs` compares a learner's function with a reference on new random
  inputs, so an answer memoised during timing is caught (call it *after* any timing);
* :func:`assert_finite` rejects NaN and Inf, which slip through naive ``abs(a - b) < tol`` tests;
* :func:`assert_no_library_calls` reads a function's source and rejects calls such as
  ``torch.matmul`` or ``F.softmax`` in a cell that asks for an implementation.

Two tiers (see DESIGN.md): correctness is graded everywhere; performance only where CUDA is
present. Without CUDA, :func:`performance_tier` prints exactly :data:`NOT_GRADED` and returns
``None``; :func:`award` turns a credit into nbgrader partial credit (the last expression of a
``perf_*`` test cell), and the teacher's grade export reports such cells as not graded.

Crash isolation: ``make grade`` runs each submission's autograde in its own process with a time
limit, so a kernel that kills its process costs that submission, never the grading run. Inside a
notebook, :func:`run_isolated` runs one call in a child process when a test must survive a crash.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from typing import Any

# What moved out of this module (issue 48, "a size it can keep"), importable from here as before: the labs'
# cells and the grader call these as grading.X (the private ones are kept by the noqa).
from mlsys.labkit.checkerror import GradingError, _describe, _is_torch, _plain
from mlsys.labkit.librarycalls import (  # noqa: F401
    _ALLOWED_OPS,
    _LIBRARIES,
    _TORCH_ALLOWED,
    FORBIDDEN_MATMUL,
    FORBIDDEN_TORCH_OPS,
    MATMUL_OPS,
    PENDING,
    _check_dispatched_ops,
    _forbidden_match,
    _loaded_module,
    _local_imports,
    _object_names,
    _python_patterns,
    _qualname,
    _resolve,
    _source_of,
    assert_no_library_calls,
    course_modules_except,
    forbidden_ops,
    recheck_library_calls,
)
from mlsys.runtime.device import has_cuda  # the tier rule: performance is graded only where this is True

__all__ = [
    "Points",
    "GradingError",
    "NOT_GRADED",
    "FORBIDDEN_MATMUL",
    "FORBIDDEN_TORCH_OPS",
    "assert_finite",
    "assert_close",
    "assert_quantity_close",
    "check_on_fresh_inputs",
    "assert_no_library_calls",
    "has_cuda",
    "performance_tier",
    "award",
    "run_isolated",
]

NOT_GRADED = "performance: not graded (no GPU)"


# ----------------------------------------------------------------------------------------------
# values


def _claims_torch(x: Any) -> bool:
    """An object whose type says it comes from torch or has a tensor's ``detach``, real or not."""
    return _is_torch(x) or str(getattr(type(x), "__module__", "")).startswith("torch") or hasattr(type(x), "detach")


def _is_quantity(x: Any) -> bool:
    """True only for a quantity of the course's unit registry (``mlsys.Q_``), exact type."""
    from mlsys.units import ureg

    return type(x) is ureg.Quantity


def _to_numpy(x: Any):
    import numpy as np

    if _is_torch(x):
        t = x.detach()
        if t.dtype.is_floating_point and t.dtype.itemsize < 4:
            t = t.float()
        return t.cpu().numpy()
    if _claims_torch(x):
        raise GradingError(f"expected a torch.Tensor, found an object of type {type(x).__module__}.{type(x).__qualname__} "
                           "(results must be real tensors, not subclasses or look-alikes)")
    if not _plain(x):
        raise GradingError(f"expected a number, a numpy array or a torch.Tensor, found {_describe(x)}")
    try:
        return np.asarray(x)
    except Exception as exc:  # e.g. a ragged list
        raise GradingError(f"expected a number, array or tensor, found {type(x).__name__}: {exc}") from exc


def assert_finite(x: Any, name: str = "result") -> None:
    """Raise :class:`GradingError` if ``x`` (number, array, tensor or quantity) holds NaN or Inf."""
    import numpy as np

    if x is None:
        raise GradingError(f"{name}: expected a value, found None (did the function forget to return?)")
    magnitude = x.magnitude if _is_quantity(x) else x
    arr = _to_numpy(magnitude)
    if arr.dtype.kind not in "fciub":
        raise GradingError(f"{name}: expected numbers, found {_describe(magnitude)}")
    if arr.dtype.kind in "fc":
        bad = ~np.isfinite(arr)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0]) if arr.ndim else ()
            raise GradingError(
                f"{name}: expected finite values, found {int(bad.sum())} NaN/Inf of {arr.size} "
                f"(first at index {where}: {arr[where] if where else arr.item()})"
            )


def assert_close(actual: Any, expected: Any, *, rtol: float = 1e-5, atol: float = 1e-8, name: str = "result") -> None:
    """Check ``|actual - expected| <= atol + rtol * |expected|`` element-wise.

    Shapes must match exactly; for tensors, dtype and device must match too. NaN/Inf in
    ``actual`` are rejected first. The message gives the largest error and where it occurs.
    """
    import numpy as np

    if actual is None:
        raise GradingError(f"{name}: expected {_describe(expected)}, found None (did the function forget to return?)")
    if _is_torch(expected):
        if not _is_torch(actual):
            raise GradingError(f"{name}: expected {_describe(expected)}, found {_describe(actual)}")
        if tuple(actual.shape) != tuple(expected.shape):
            raise GradingError(f"{name}: expected shape {tuple(expected.shape)}, found {tuple(actual.shape)}")
        if actual.dtype != expected.dtype:
            raise GradingError(f"{name}: expected dtype {expected.dtype}, found {actual.dtype}")
        if actual.device.type != expected.device.type:
            raise GradingError(f"{name}: expected a tensor on {expected.device}, found one on {actual.device}")
    assert_finite(actual, name)
    a = _to_numpy(actual).astype(np.float64) if _to_numpy(actual).dtype.kind != "c" else _to_numpy(actual)
    e = _to_numpy(expected).astype(np.float64) if _to_numpy(expected).dtype.kind != "c" else _to_numpy(expected)
    if a.shape != e.shape:
        raise GradingError(f"{name}: expected shape {e.shape}, found {a.shape}")
    err = np.abs(a - e)
    tol = atol + rtol * np.abs(e)
    bad = ~(err <= tol)
    if bad.any():
        if a.ndim:
            idx = np.unravel_index(int(np.argmax(np.where(bad, err - tol, -np.inf))), a.shape)
            where = tuple(int(i) for i in idx)
            found, want = a[idx].item(), e[idx].item()
        else:
            where, found, want = (), a.item(), e.item()
        raise GradingError(
            f"{name}: {int(bad.sum())} of {a.size} values differ by more than atol={atol:g} + rtol={rtol:g}*|expected|; "
            f"max abs error {float(err.max()):.4g}; e.g. at index {where}: expected {want!r}, found {found!r}"
        )


def assert_quantity_close(actual: Any, expected: Any, *, rtol: float = 1e-6, name: str = "result") -> None:
    """Check a pint quantity: same dimension as ``expected`` and within ``rtol`` of it.

    A plain number where a quantity is expected is an error (units are part of the answer),
    as is a wrong dimension (e.g. bits where bytes were asked, or FLOP where FLOP/byte).
    """
    if not _is_quantity(expected):
        raise TypeError(f"assert_quantity_close: expected must be a pint quantity, got {expected!r}")
    if not _is_quantity(actual):
        raise GradingError(
            f"{name}: expected a quantity in {expected.units:~P} (e.g. mlsys.Q_(x, '{expected.units}')), "
            f"found {_describe(actual)}"
        )
    if actual.dimensionality != expected.dimensionality:
        raise GradingError(
            f"{name}: expected a quantity of dimension {expected.dimensionality} (e.g. {expected.units:~P}), "
            f"found {actual.units:~P} of dimension {actual.dimensionality}"
        )
    a = actual.to(expected.units).magnitude
    assert_finite(a, name)
    e = expected.magnitude
    if not math.isclose(float(a), float(e), rel_tol=rtol, abs_tol=0.0):
        ratio = float(a) / float(e) if float(e) else math.inf
        raise GradingError(
            f"{name}: expected {float(e):.6g} {expected.units:~P} (within {rtol:g} relative), "
            f"found {float(a):.6g} {expected.units:~P} ({ratio:.4g} times the expected value)"
        )


def check_on_fresh_inputs(
    fn: Callable[..., Any],
    make_inputs: Callable[[int], tuple],
    reference: Callable[..., Any],
    *,
    trials: int = 3,
    seed: int | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-8,
    name: str | None = None,
) -> None:
    """Compare ``fn(*args)`` with ``reference(*args)`` on ``trials`` new inputs.

    ``make_inputs(s)`` builds a tuple of arguments from the integer seed ``s``. Seeds are drawn
    at random unless ``seed`` is given, so an answer cached from earlier calls is caught. Call this
    after any timing of ``fn``.
    """
    import random

    label = name or getattr(fn, "__name__", "function")
    rng = random.Random(seed)
    for t in range(trials):
        s = rng.randrange(2**31)
        args = make_inputs(s)
        if not isinstance(args, tuple):
            args = (args,)
        expected = reference(*args)
        actual = fn(*args)
        assert_close(actual, expected, rtol=rtol, atol=atol, name=f"{label} on fresh input {t + 1}/{trials} (seed {s})")


# ----------------------------------------------------------------------------------------------
# the performance tier


def performance_tier(name: str, measure: Callable[[], float], *, full_at: float, zero_at: float = 0.0) -> float | None:
    """Credit in [0, 1] for a performance target; ``None`` (and a printed notice) without CUDA.

    ``measure()`` returns the achieved fraction of a same-run reference (e.g. your GB/s over the
    copy bandwidth measured now). Credit is ``clip((x - zero_at) / (full_at - zero_at), 0, 1)``.
    Without CUDA, prints :data:`NOT_GRADED` and returns ``None`` without calling ``measure``.
    """
    if not full_at > zero_at:
        raise ValueError(f"performance_tier: expected full_at > zero_at, got full_at={full_at}, zero_at={zero_at}")
    if not has_cuda():
        print(NOT_GRADED)
        return None
    x = measure()
    try:
        x = float(x)
    except (TypeError, ValueError) as exc:
        raise GradingError(f"{name}: expected the measurement to return a number (a fraction), found {x!r}") from exc
    if not math.isfinite(x):
        raise GradingError(f"{name}: expected a finite measured fraction, found {x}")
    credit = min(1.0, max(0.0, (x - zero_at) / (full_at - zero_at)))
    print(f"{name}: achieved {x:.3g} (full credit at {full_at:g}, none at {zero_at:g}) -> credit {credit:.2f}")
    return credit


class Points(float):
    """A score as nbgrader reads it and a learner sees it.

    nbgrader takes a test cell's partial credit from the ``text/plain`` form of its last value, so a
    score must stay a bare number there; a notebook shows the richer Markdown form instead, a
    sentence rather than a stray ``0.0``: ``Points(1.5, 2)`` shows as "**1.5 of 2 points**".
    """

    def __new__(cls, value: float, out_of: float | None = None, note: str = "") -> Points:
        obj = super().__new__(cls, value)
        obj.out_of = out_of
        obj.note = note
        return obj

    @classmethod
    def not_measured(cls, out_of: float | None = None) -> Points:
        """Zero points for a performance cell on a machine where it cannot be timed (no GPU)."""
        return NotMeasured(0.0, out_of, "not measured on this machine: the grader times it on a GPU")

    def _repr_markdown_(self) -> str:
        total = f" of {self.out_of:g}" if self.out_of is not None else ""
        return f"**{float(self):g}{total} points**" + (f" ({self.note})" if self.note else "")


class NotMeasured(Points):
    """A performance cell's value where it cannot be timed: shown as "not graded here", not as 0.0.

    nbgrader's Validate reads a test cell's ``text/plain`` as partial credit, so a bare ``0.0`` made a
    correct notebook "fail" on a CPU (issue 45); text that is no number is not read as a score. The grade
    never comes from here: the teacher's grader writes each performance cell's output itself.
    """

    def __repr__(self) -> str:
        return "not graded here (no GPU): the teacher's grader times this cell on a GPU"


def award(points: float, credit: float | None) -> Points:
    """Partial credit for an nbgrader test cell: ``points * credit``.

    Use as the cell's last expression: nbgrader reads a number between 0 and the cell's points as
    its score. ``credit=None`` (no GPU) awards 0 here; the grade export reports the cell as
    "not graded (no GPU)" because the cell printed :data:`NOT_GRADED`.
    """
    if points < 0:
        raise ValueError(f"award: expected points >= 0, got {points}")
    if credit is None:
        return Points.not_measured(points)
    if not 0.0 <= float(credit) <= 1.0:
        raise ValueError(f"award: expected a credit between 0 and 1, got {credit}")
    return Points(round(float(points) * float(credit), 4), points)


# ----------------------------------------------------------------------------------------------
# crash isolation


def _child(conn: Any, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    import faulthandler

    faulthandler.disable()  # a crash is reported by the parent, without a dump of the child's stack
    try:
        conn.send(("ok", fn(*args, **kwargs)))
    except BaseException as exc:  # report every failure to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system, seconds) a process has used so far, from /proc; None where unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run_isolated(fn: Callable[..., Any], *args: Any, timeout: float = 120.0, cpu_limit: float | None = None,
                 heartbeat: float | None = None, what: str | None = None, **kwargs: Any) -> Any:
    """Run ``fn(*args, **kwargs)`` in a child process and return its (picklable) result.

    A crash (segfault, ``os._exit``), a timeout or an exception in the child raises
    :class:`GradingError` here, so one test fails and the notebook goes on. Uses ``fork`` where
    available (functions defined in a notebook need no pickling); CUDA state does not survive a
    fork, so call this before touching the GPU in the parent, or use it for CPU work.

    ``timeout`` bounds the wall-clock time. ``cpu_limit`` (seconds) also stops the child once it has
    *computed* that long: CPU time does not grow when a busy machine shares the core, so a limit on
    it stops an endless loop early without failing honest work slowed by other processes. Every
    ``heartbeat`` seconds a line on stdout says that ``what`` is still running.
    """
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    ctx = mp.get_context(method)
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, args, kwargs), daemon=True)
    proc.start()
    child.close()
    label = getattr(fn, "__name__", "function")
    start = time.monotonic()
    step = min(x for x in (timeout, heartbeat or timeout, 1.0 if cpu_limit else timeout) if x > 0)
    next_beat = start + heartbeat if heartbeat else math.inf
    try:
        while not parent.poll(min(step, max(0.0, start + timeout - time.monotonic()))):
            now = time.monotonic()
            used = _cpu_seconds(proc.pid) if cpu_limit else None
            if now - start >= timeout or (used is not None and used >= cpu_limit):
                proc.kill()
                proc.join()
                spent = (f"{used:.0f} s of computation ({now - start:.0f} s of waiting)" if used is not None
                         and used >= cpu_limit else f"{now - start:.0f} s")
                raise GradingError(f"{label}: expected it to finish within {timeout:g} s, it did not: stopped after "
                                   f"{spent} (infinite loop?)")
            if now >= next_beat:
                print(f"  ... {what or label} still running after {now - start:.0f} s "
                      f"(stopped at {cpu_limit or timeout:g} s of computation)", flush=True)
                next_beat = now + heartbeat
        try:
            status, value = parent.recv()
        except EOFError:
            proc.join()
            raise GradingError(f"{label}: expected it to return, but its process died (exit code {proc.exitcode}; "
                               "a crash such as an out-of-bounds access)") from None
    finally:
        parent.close()
    proc.join(5)
    if status == "error":
        raise GradingError(f"{label} raised {value}")
    return value
