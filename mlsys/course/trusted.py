"""Performance credit from trusted code: a fresh process that measures before it runs any answer.

The API for lab authors
-----------------------
A lab with performance points keeps a spec next to its instructor notebook,
``labs/source/<lab>/perf.toml``, one table per ``perf_*`` test cell (keyed by its grade id)::

    [perf_matmul]
    function = "matmul"                    # the name the learner's answer cells define
    points = 4
    args = { a = [4096, 4096], b = [4096, 4096] }   # positional tensor arguments, in order, with shapes
    quick_args = { a = [64, 48], b = [48, 32] }      # shapes for the fake timer on a CPU (default: args)
    fresh_args = { a = [1000, 1000], b = [1000, 999] }  # optional: shapes of the after-timing checks (default: args)
    kwargs = { causal = true }             # optional: keyword arguments of every call of the function
    dtype = "float16"                      # torch dtype name of every argument
    reference = "torch.matmul(a, b)"       # expression in torch and the argument names
    baseline = "reference"                 # time the reference ("reference") or a copy of the arguments ("copy")
    baseline_expr = "torch.matmul(a, b)"   # optional: what is timed when baseline = "reference" (default: reference)
    forbid = "matmul"                      # aten ops the function may not run: "matmul" (mm, bmm, addmm, sdpa,
                                           #  all_reduce, ...) or "compute" (anything but allocation and views)
    full_at = 0.5                          # share of the baseline that earns full credit ...
    zero_at = 0.0                          # ... and none (linear in between)
    rtol = 1e-2
    atol = 1e-2

and its ``perf_*`` cell becomes two lines::

    from mlsys.course.trusted import grade_performance
    grade_performance("lab2_tiled_matmul", "perf_matmul")

In the learner's notebook that call is a *preview* (same checks, in the notebook's own process; no
GPU: it prints :data:`mlsys.course.grading.NOT_GRADED`). When the teacher grades, the cell's output
is replaced by the verdict of :func:`main`, run by ``make grade`` in a fresh sandboxed process:

1. it imports torch, the timer (:func:`mlsys.bench.timing.time_fn`) and the check helpers, and
   records the identity of every attribute of ``torch``, ``torch.Tensor``, ``torch.nn.functional``,
   ``torch.cuda``, ``time``, ``builtins``, ``mlsys.bench.timing`` and ``mlsys.course.grading`` and
   the set of kernels registered through ``torch.library``;
2. it builds the inputs (timing inputs and fresh ones the learner's code never sees before the final
   check) with its own random seeds, computes the references and times the baseline, all before
   any learner code exists in the process;
3. it runs the learner's answer cells (never the test cells);
4. it refuses credit, with a reason, if any recorded attribute was replaced, a kernel was registered
   with ``torch.library``, a dispatch mode is left active, the function fails its correctness check,
   runs a forbidden aten op (recorded with a ``TorchDispatchMode`` during a checked call, with
   ``torch.compile`` disabled so compiled torch code shows its ops), or returns wrong results on the
   fresh inputs after timing. Only then is the share ``baseline / function`` turned into credit.

``MLSYS_FAKE_TIMER=1`` (or ``fake=True``) selects a deterministic fake timer so CI exercises every
decision on a CPU: each timed callable is called ``repeats`` times and reported as taking 1 ms, so an
honest function earns full credit and every refusal is still tested for real.
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PerfCase", "answer_cells", "load_spec", "find_spec", "grade_case", "grade_performance", "run_job", "main",
           "FORBID_MATMUL", "FORBID_MATMUL_PREFIXES", "ALLOWED_FOR_COMPUTE", "FAKE_SECONDS"]

FAKE_SECONDS = 1e-3
"""What the fake timer reports for every timed callable (seconds per call)."""

FORBID_MATMUL = frozenset({
    "mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "mv", "dot", "vdot", "addmv", "linear", "einsum",
    "tensordot", "_scaled_mm", "_int_mm", "_addmm_activation", "_scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "scaled_dot_product_attention", "_flash_attention_forward",
    "_efficient_attention_forward", "convolution", "conv2d", "cudnn_convolution",
    "all_reduce", "all_reduce_", "allreduce_", "reduce_scatter_tensor", "all_gather_into_tensor",
})
"""aten (and c10d) op names a hand-written matmul or attention kernel may not run."""

FORBID_MATMUL_PREFIXES = ("_scaled_dot_product_", "_flash_attention", "_efficient_attention", "_cudnn_attention")
"""...and every attention backend by its name's prefix: each device and PyTorch version adds its own
(on a CPU, SDPA runs ``_scaled_dot_product_flash_attention_for_cpu``, which no list above named)."""

ALLOWED_FOR_COMPUTE = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "full", "full_like", "fill_", "zero_", "view", "_unsafe_view", "reshape", "as_strided",
    "expand", "t", "transpose", "permute", "contiguous", "clone", "copy_", "_to_copy", "to", "detach", "alias",
    "slice", "select", "unsqueeze", "squeeze", "flatten", "stride", "size", "numel", "is_contiguous",
    "lift_fresh", "_local_scalar_dense", "item", "arange", "set_", "resize_", "record_stream",
})
"""aten ops a "write the kernel yourself" function may run (allocation, views, copies): all else is compute."""


@dataclass(frozen=True)
class PerfCase:
    """One ``perf_*`` cell's spec (see the module docstring for the TOML keys)."""

    grade_id: str
    function: str
    points: float
    args: dict[str, list[int]]
    quick_args: dict[str, list[int]]
    dtype: str
    reference: str
    baseline: str = "reference"
    forbid: str = "matmul"
    full_at: float = 0.5
    zero_at: float = 0.0
    rtol: float = 1e-2
    atol: float = 1e-2
    repeats: int = 20
    warmup: int = 3
    baseline_expr: str = ""
    fresh_args: dict[str, list[int]] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, grade_id: str, d: dict[str, Any]) -> PerfCase:
        known = {"function", "points", "args", "quick_args", "dtype", "reference", "baseline", "forbid", "full_at",
                 "zero_at", "rtol", "atol", "repeats", "warmup", "baseline_expr", "fresh_args", "kwargs"}
        missing = {"function", "points", "args", "dtype", "reference"} - set(d)
        if missing:
            raise ValueError(f"perf spec [{grade_id}]: missing keys {sorted(missing)}")
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"perf spec [{grade_id}]: unknown keys {sorted(unknown)}; expected some of {sorted(known)}")
        if d.get("baseline", "reference") not in ("reference", "copy"):
            raise ValueError(f"perf spec [{grade_id}]: baseline must be 'reference' or 'copy', got {d['baseline']!r}")
        if d.get("forbid", "matmul") not in ("matmul", "compute"):
            raise ValueError(f"perf spec [{grade_id}]: forbid must be 'matmul' or 'compute', got {d['forbid']!r}")
        if not float(d.get("full_at", 0.5)) > float(d.get("zero_at", 0.0)):
            raise ValueError(f"perf spec [{grade_id}]: expected full_at > zero_at")
        if not isinstance(d["args"], dict) or not d["args"]:
            raise ValueError(f"perf spec [{grade_id}]: args must be a table name -> shape, e.g. {{ x = [1024] }}")
        if "fresh_args" in d and (not isinstance(d["fresh_args"], dict) or list(d["fresh_args"]) != list(d["args"])):
            raise ValueError(f"perf spec [{grade_id}]: fresh_args must name the same arguments as args, in order")
        kw = d.get("kwargs", {})
        if not isinstance(kw, dict) or not all(isinstance(v, (bool, int, float, str)) for v in kw.values()):
            raise ValueError(f"perf spec [{grade_id}]: kwargs must be a table of plain values, e.g. {{ causal = true }}")
        if not grade_id.startswith("perf_"):
            raise ValueError(f"perf spec: table names are perf_* grade ids, got {grade_id!r}")
        return cls(grade_id=grade_id, function=str(d["function"]), points=float(d["points"]),
                   args={k: [int(n) for n in v] for k, v in d["args"].items()},
                   quick_args={k: [int(n) for n in v] for k, v in d.get("quick_args", d["args"]).items()},
                   dtype=str(d["dtype"]), reference=str(d["reference"]), baseline=d.get("baseline", "reference"),
                   forbid=d.get("forbid", "matmul"), full_at=float(d.get("full_at", 0.5)),
                   zero_at=float(d.get("zero_at", 0.0)), rtol=float(d.get("rtol", 1e-2)),
                   atol=float(d.get("atol", 1e-2)), repeats=int(d.get("repeats", 20)), warmup=int(d.get("warmup", 3)),
                   baseline_expr=str(d.get("baseline_expr", "")),
                   fresh_args={k: [int(n) for n in v] for k, v in d.get("fresh_args", d["args"]).items()},
                   kwargs=dict(kw))


def load_spec(path: Path | str) -> dict[str, PerfCase]:
    """Parse a ``perf.toml`` into {grade_id: PerfCase}; a malformed spec raises ``ValueError``."""
    import tomllib

    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    return {gid: PerfCase.from_dict(gid, d) for gid, d in data.items()}


def find_spec(lab: str) -> Path | None:
    """``perf.toml`` for ``lab``: the working folder first (a released lab), then the course's labs folder."""
    from ..runtime.paths import labs_root

    for p in (Path.cwd() / "perf.toml", labs_root() / "source" / lab / "perf.toml",
              labs_root() / "release" / lab / "perf.toml"):
        if p.is_file():
            return p
    return None


# ----------------------------------------------------------------------------------------------
# capturing what the learner must not replace

_WATCHED = ("torch", "torch.Tensor", "torch._C.TensorBase", "torch.nn.functional", "torch.cuda", "torch.library",
            "time", "builtins", "mlsys.bench.timing", "mlsys.course.grading", "mlsys.course.trusted", "triton",
            "numpy")


def _namespaces() -> dict[str, Any]:
    import importlib

    out = {}
    for name in _WATCHED:
        mod, _, attr = name.rpartition(".") if name in ("torch.Tensor", "torch._C.TensorBase") else (name, "", "")
        try:
            obj = importlib.import_module(mod)
            for part in attr.split(".") if attr else []:
                obj = getattr(obj, part)
        except Exception:
            continue
        out[name] = obj
    return out


def _snapshot(namespaces: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Identity of every callable attribute (function, class, builtin) of the watched namespaces.

    Data attributes are library state, not behaviour: ``torch.cuda._initialized``,
    ``default_generators`` and ``_cached_device_count`` change as soon as CUDA starts (seen on an
    H100, 2026-11-23: an honest submission was refused for them). Replacing a function with
    anything, callable or not, still shows as replaced or deleted.
    """
    import types

    snap = {}
    for name, obj in namespaces.items():
        d = vars(obj) if not isinstance(obj, types.ModuleType) else obj.__dict__
        snap[name] = {k: id(v) for k, v in list(d.items()) if callable(v)}
    return snap


def _replaced(before: dict[str, dict[str, int]], namespaces: dict[str, Any]) -> list[str]:
    """Attributes of the watched namespaces that were reassigned or deleted (new submodules are fine)."""
    import types

    after = _snapshot(namespaces)
    problems = []
    for name, old in before.items():
        new = after.get(name, {})
        for key, ident in old.items():
            if key not in new:
                problems.append(f"{name}.{key} was deleted")
            elif new[key] != ident and not key.startswith("__") and not key.startswith("_dynamo"):
                problems.append(f"{name}.{key} was replaced")
        obj = namespaces[name]
        d = vars(obj) if not isinstance(obj, types.ModuleType) else obj.__dict__
        for key in set(new) - set(old):
            value = d.get(key)
            if not isinstance(value, types.ModuleType) and not key.startswith("_"):
                problems.append(f"{name}.{key} was added")
    return problems


def _aten_impls(torch: Any) -> set[str]:
    """Kernels registered through torch.library for aten and c10d ops (what a learner could override)."""
    return {k for k in getattr(torch.library, "_impls", set()) if k.startswith(("aten/", "c10d/", "_c10d"))}


class _Captured:
    """What the trusted process took before any learner code ran."""

    def __init__(self, fake: bool) -> None:
        import builtins
        import time

        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        from mlsys.bench import timing

        from . import grading

        self.torch, self.fake = torch, fake
        self.time_fn, self.perf_counter = timing.time_fn, time.perf_counter
        self.assert_close, self.assert_finite = grading.assert_close, grading.assert_finite
        self.GradingError = grading.GradingError
        self.copy_ = torch.Tensor.copy_
        self.empty_like, self.randn, self.Generator = torch.empty_like, torch.randn, torch.Generator
        self.isinstance, self.callable = builtins.isinstance, builtins.callable
        self.DispatchMode = TorchDispatchMode
        self.dispatch_depth = torch._C._len_torch_dispatch_stack
        self.cuda = torch.cuda.is_available() and not fake
        self.device = "cuda" if self.cuda else "cpu"
        try:  # imported first: importing dynamo wraps a few torch functions itself
            import torch._dynamo
            import torch._dynamo.config as dynamo_config

            self.dynamo_config = dynamo_config
        except Exception:  # very old torch: nothing to disable
            self.dynamo_config = None
        self.namespaces = _namespaces()
        self.snapshot = _snapshot(self.namespaces)
        self.impls = _aten_impls(torch)

    def timer(self, fn: Any, what: str, repeats: int, warmup: int) -> float:
        """Median seconds per call of ``fn()`` (fake: call it ``repeats`` times, report :data:`FAKE_SECONDS`)."""
        if self.fake:
            for _ in range(warmup + repeats):
                fn()
            return FAKE_SECONDS
        return float(self.time_fn(fn, self.device, what=what, repeats=repeats, warmup=warmup).median)

    def tampering(self) -> list[str]:
        problems = _replaced(self.snapshot, self.namespaces)
        new_impls = _aten_impls(self.torch) - self.impls
        if new_impls:
            problems.append(f"kernels were registered with torch.library ({sorted(new_impls)[:3]})")
        if self.dispatch_depth() != 0:
            problems.append("a torch dispatch mode was left active")
        if self.torch._C._is_torch_function_mode_enabled():
            problems.append("a torch function mode was left active")
        if sys.gettrace() is not None or sys.getprofile() is not None:
            problems.append("a trace or profile hook was installed")
        return problems


def _ops_of(cap: _Captured, fn: Any, args: tuple) -> tuple[Any, set[str]]:
    """Call ``fn(*args)`` once while recording every aten op it dispatches (torch.compile disabled)."""
    seen: set[str] = set()

    class Recorder(cap.DispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            seen.add(func._schema.name.split("::")[-1])
            return func(*args, **(kwargs or {}))

    old = cap.dynamo_config.disable if cap.dynamo_config is not None else None
    if cap.dynamo_config is not None:
        cap.dynamo_config.disable = True
    try:
        with Recorder():
            out = fn(*args)
    finally:
        if cap.dynamo_config is not None:
            cap.dynamo_config.disable = old
    return out, seen


def _forbidden(case: PerfCase, ops: set[str]) -> list[str]:
    base = {op.split(".")[0] for op in ops}
    if case.forbid == "matmul":
        return sorted(op for op in base if op in FORBID_MATMUL or op.startswith(FORBID_MATMUL_PREFIXES))
    return sorted(base - ALLOWED_FOR_COMPUTE)


@dataclass
class _Prepared:
    case: PerfCase
    timing_args: tuple
    timing_ref: Any
    fresh: list[tuple[tuple, Any]]
    baseline_s: float


def _prepare(cap: _Captured, case: PerfCase, seed: int) -> _Prepared:
    """Inputs, references and the baseline time: all before any learner code runs."""
    torch = cap.torch
    dtype = getattr(torch, case.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"perf spec [{case.grade_id}]: unknown dtype {case.dtype!r}")
    small = cap.fake or not cap.cuda
    shapes = case.quick_args if small else case.args
    fresh_shapes = case.quick_args if small else case.fresh_args
    gen = torch.Generator(device=cap.device).manual_seed(seed)

    def make(which: dict[str, list[int]] = shapes) -> tuple:
        return tuple(cap.randn(*shape, generator=gen, device=cap.device, dtype=torch.float32).to(dtype)
                     for shape in which.values())

    ref_fn = eval(f"lambda {', '.join(shapes)}: {case.reference}", {"torch": torch})  # the teacher's spec
    timed_ref = eval(f"lambda {', '.join(shapes)}: {case.baseline_expr}", {"torch": torch}) if case.baseline_expr else ref_fn
    timing_args = make()
    timing_ref = ref_fn(*timing_args)
    fresh = []
    for _ in range(2):
        args = make(fresh_shapes)
        fresh.append((args, ref_fn(*args)))
    if case.baseline == "copy":
        dst = [cap.empty_like(a) for a in timing_args]
        copy_ = cap.copy_

        def base() -> None:
            for d, a in zip(dst, timing_args, strict=True):
                copy_(d, a)
    else:
        def base() -> Any:
            return timed_ref(*timing_args)
    baseline_s = cap.timer(base, "baseline", case.repeats, case.warmup)
    return _Prepared(case, timing_args, timing_ref, fresh, baseline_s)


def _verdict(case: PerfCase, credit: float | None, reason: str, lines: list[str]) -> dict[str, Any]:
    return {"grade_id": case.grade_id, "points": case.points, "credit": credit, "reason": reason, "lines": lines,
            "score": None if credit is None else round(case.points * credit, 4)}


def grade_case(cap: _Captured, prep: _Prepared, namespace: dict[str, Any]) -> dict[str, Any]:
    """Judge one case after the answer cells ran in ``namespace``; returns a verdict dict."""
    case = prep.case
    tol = {"rtol": case.rtol, "atol": case.atol}
    tampered = cap.tampering()
    if tampered:
        return _verdict(case, 0.0, "refused: the answer cells replaced what the grader relies on: "
                        + "; ".join(tampered[:5]), [])
    learner = namespace.get(case.function)
    if learner is None or not cap.callable(learner):
        return _verdict(case, 0.0, f"refused: no function {case.function}() is defined by the answer cells", [])
    kwargs = dict(case.kwargs)

    def fn(*args: Any) -> Any:
        return learner(*args, **kwargs)
    clones = [a.clone() for a in prep.timing_args]
    try:
        out, ops = _ops_of(cap, fn, prep.timing_args)
        cap.assert_close(out, prep.timing_ref, name=f"{case.function} before timing", **tol)
    except Exception as exc:
        return _verdict(case, 0.0, f"refused: {case.function} fails its correctness check, so it earns no "
                        f"performance credit: {type(exc).__name__}: {str(exc)[:300]}", [])
    for a, c in zip(prep.timing_args, clones, strict=True):
        if not cap.torch.equal(a, c):
            return _verdict(case, 0.0, f"refused: {case.function} changed its input tensors", [])
    bad = _forbidden(case, ops)
    if bad:
        return _verdict(case, 0.0, f"refused: {case.function} runs library routines this exercise asks you to "
                        f"write yourself (aten::{', aten::'.join(bad)})", [])
    if cap.tampering():
        return _verdict(case, 0.0, "refused: calling the function replaced what the grader relies on: "
                        + "; ".join(cap.tampering()[:5]), [])
    try:
        mine_s = cap.timer(lambda: fn(*prep.timing_args), case.function, case.repeats, case.warmup)
    except Exception as exc:
        return _verdict(case, 0.0, f"refused: {case.function} raised while being timed: {type(exc).__name__}: {exc}", [])
    tampered = cap.tampering()
    if tampered:
        return _verdict(case, 0.0, "refused: timing the function replaced what the grader relies on: "
                        + "; ".join(tampered[:5]), [])
    try:
        for i, (args, ref) in enumerate(prep.fresh):
            cap.assert_close(fn(*args), ref, name=f"{case.function} on fresh input {i + 1} after timing", **tol)
    except Exception as exc:
        return _verdict(case, 0.0, f"refused: results after timing differ from fresh-input references: "
                        f"{type(exc).__name__}: {str(exc)[:300]}", [])
    if not (mine_s > 0 and math.isfinite(mine_s)):
        return _verdict(case, 0.0, f"refused: the timer returned {mine_s!r} s", [])
    share = prep.baseline_s / mine_s
    credit = min(1.0, max(0.0, (share - case.zero_at) / (case.full_at - case.zero_at)))
    what = "a copy of its inputs" if case.baseline == "copy" else (case.baseline_expr or case.reference)
    timer = "fake timer (CI)" if cap.fake else f"time_fn on {cap.device}"
    lines = [f"{case.function}: {mine_s * 1e3:.4g} ms, baseline ({what}): {prep.baseline_s * 1e3:.4g} ms, "
             f"share {share:.3g} (full credit at {case.full_at:g}, none at {case.zero_at:g}) -> credit "
             f"{credit:.2f} [{timer}]"]
    return _verdict(case, credit, "", lines)


# ----------------------------------------------------------------------------------------------
# the fresh process


def answer_cells(nb: dict[str, Any]) -> list[str]:
    """Sources of every code cell of ``nb`` that is not an autograded test cell (what the learner controls)."""
    from ..runtime.notebook import cell_source, is_autograded

    return [cell_source({"source": cell.get("source", "")}) for cell in nb.get("cells", [])
            if cell.get("cell_type") == "code" and not is_autograded(cell.get("metadata", {}).get("nbgrader"))]


class _CellTimeout(BaseException):
    """An answer cell ran past its time limit in the trusted process."""


def _exec_cells(cells: list[str], namespace: dict[str, Any], cell_timeout: float = 600.0) -> list[str]:
    """Run answer-cell sources in ``namespace`` (IPython syntax translated); errors are noted, not fatal.

    Each cell gets ``cell_timeout`` seconds (SIGALRM; a cell that blocks the signal is stopped by the
    caller's wall-clock limit, which costs the performance points only).
    """
    import linecache
    import signal

    def alarm(signum: int, frame: Any) -> None:
        raise _CellTimeout()

    try:
        from IPython.core.inputtransformer2 import TransformerManager

        transform = TransformerManager().transform_cell
    except Exception:  # IPython missing: plain Python only
        def transform(src: str) -> str:
            return src
    notes = []
    for i, src in enumerate(cells):
        name = f"<answer-cell-{i}>"
        use_alarm = hasattr(signal, "setitimer")
        try:
            code = transform(src)
            linecache.cache[name] = (len(code), None, code.splitlines(True), name)
            if use_alarm:
                signal.signal(signal.SIGALRM, alarm)
                signal.setitimer(signal.ITIMER_REAL, cell_timeout)
            exec(compile(code, name, "exec"), namespace)
        except _CellTimeout:
            notes.append(f"answer cell {i} ran past {cell_timeout:g} s and was stopped")
        except BaseException as exc:  # a failing cell costs what depends on it, like in the notebook
            notes.append(f"answer cell {i} raised {type(exc).__name__}: {str(exc)[:200]}")
        finally:
            if use_alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
    return notes


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """``{"cases": {gid: spec-dict}, "cells": [sources], "fake": bool, "seed": int}`` -> verdicts by grade id."""
    import random

    from ..runtime.device import fake_timer

    fake = bool(job.get("fake")) or fake_timer()
    cases = [PerfCase.from_dict(gid, d) for gid, d in job["cases"].items()]
    from ..runtime.device import setup

    # CPU tensors (no GPU, or the fake timer): Triton kernels and their @triton.jit helpers need the
    # interpreter, which triton picks when it is first imported (by the capture below)
    if fake:
        os.environ["TRITON_INTERPRET"] = "1"
    setup()
    cap = _Captured(fake)
    seed = int(job.get("seed", random.SystemRandom().randrange(2**31)))
    prepared = {c.grade_id: _prepare(cap, c, seed + i) for i, c in enumerate(cases)}
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    notes = _exec_cells(list(job.get("cells", [])), namespace, float(job.get("cell_timeout") or 600))
    verdicts = {}
    for gid, prep in prepared.items():
        try:
            verdicts[gid] = grade_case(cap, prep, namespace)
        except BaseException as exc:  # the grader's own failure: no credit, say why
            verdicts[gid] = _verdict(prep.case, 0.0, f"refused: grading failed: {type(exc).__name__}: {exc}", [])
    return {"verdicts": verdicts, "notes": notes, "fake": fake}


def main() -> int:
    """``python -P -m mlsys.course.trusted`` < job JSON: one result line ``<nonce> {...}`` on the original stdout."""
    from .cellrunner import _private_stdout

    job = json.loads(sys.stdin.read())
    out = _private_stdout()
    try:
        result = run_job(job)
    except BaseException as exc:  # reported, never raised into the grader
        result = {"fatal": f"{type(exc).__name__}: {exc}"}
    out.write(f"{job['nonce']} {json.dumps(result)}\n")
    out.flush()
    os._exit(0)  # learner threads or atexit hooks get no say after the verdict


# ----------------------------------------------------------------------------------------------
# the learner's preview


def grade_performance(lab: str, grade_id: str, *, spec: Path | str | None = None, fake: bool | None = None,
                      namespace: dict[str, Any] | None = None) -> float:
    """Preview of a ``perf_*`` cell in the learner's notebook; returns the points (the cell's last value,
    a :class:`mlsys.course.grading.Points`: a bare number for nbgrader, a sentence in the notebook).

    Without CUDA (and no fake timer) prints :data:`mlsys.course.grading.NOT_GRADED` and returns 0.0.
    The teacher's grader ignores what this prints and re-measures in a fresh process (see above).
    """
    from ..runtime.device import fake_timer, has_cuda
    from .grading import NOT_GRADED, Points

    path = Path(spec) if spec else find_spec(lab)
    fake = fake_timer() if fake is None else fake
    if not has_cuda() and not fake:
        print(NOT_GRADED)
        return Points.not_measured()
    if path is None:
        print(f"{grade_id}: no perf.toml found for {lab}; the teacher's grader measures this cell")
        return Points(0.0, None, "measured by the teacher's grader")
    case = load_spec(path).get(grade_id)
    if case is None:
        raise KeyError(f"{path} has no [{grade_id}] table")
    if namespace is None:
        import __main__

        namespace = vars(__main__)
    cap = _Captured(fake)
    prep = _prepare(cap, case, 12345)
    verdict = grade_case(cap, prep, namespace)
    for line in verdict["lines"]:
        print(line)
    if verdict["reason"]:
        print(verdict["reason"])
    print("(a preview: the grader measures again in a fresh process that runs only your answer cells)")
    return Points(float(verdict["score"] or 0.0), case.points, "a preview")


if __name__ == "__main__":
    sys.exit(main())
