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

import ast
import fnmatch
import importlib
import inspect
import math
import multiprocessing as mp
import os
import sys
import textwrap
import time
import types
from collections.abc import Callable, Iterable
from typing import Any

from ..runtime import pysource
from ..runtime.device import has_cuda  # the tier rule: performance is graded only where this is True
from . import policy

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


class GradingError(AssertionError):
    """A failed check; the message says what was expected and what was found."""


# ----------------------------------------------------------------------------------------------
# values


def _is_torch(x: Any) -> bool:
    """True only for an exact ``torch.Tensor``: a subclass or an object that imitates one (a class whose
    ``__module__`` says torch, a lazy result computed when read) is not a tensor to a check."""
    torch = sys.modules.get("torch")
    return torch is not None and type(x) is torch.Tensor


def _claims_torch(x: Any) -> bool:
    """An object whose type says it comes from torch or has a tensor's ``detach``, real or not."""
    return _is_torch(x) or str(getattr(type(x), "__module__", "")).startswith("torch") or hasattr(type(x), "detach")


_PLAIN_SCALARS = (bool, int, float, complex)


def _is_quantity(x: Any) -> bool:
    """True only for a quantity of the course's unit registry (``mlsys.Q_``), exact type."""
    from mlsys.units import ureg

    return type(x) is ureg.Quantity


def _plain(x: Any, depth: int = 0) -> bool:
    """Plain data a check may convert itself: an exact ndarray, number, numpy scalar, or a list/tuple of them."""
    import numpy as np

    if type(x) in _PLAIN_SCALARS or type(x) is np.ndarray or isinstance(x, np.generic):
        return type(x) is np.ndarray or type(x) in _PLAIN_SCALARS or type(x).__module__ == "numpy"
    if type(x) in (list, tuple) and depth < 8:
        return all(_plain(v, depth + 1) for v in x)
    return False


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


def _describe(x: Any) -> str:
    if _is_torch(x):
        return f"tensor(shape={tuple(x.shape)}, dtype={x.dtype}, device={x.device})"
    if _plain(x) and hasattr(x, "shape"):
        return f"array(shape={tuple(x.shape)}, dtype={x.dtype})"
    if _plain(x) or type(x) is str or x is None:
        return f"{type(x).__name__} {x!r}"[:200]
    from .proxy import Rejected, RemoteObject

    if isinstance(x, (RemoteObject, Rejected)):  # the grader's own stand-ins: their repr is safe
        return repr(x)
    return f"an object of type {type(x).__qualname__}"  # its repr is the learner's code: not called


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
# "implement it, don't call it"

FORBIDDEN_MATMUL: frozenset[str] = frozenset({
    "@",
    "torch.matmul", "torch.mm", "torch.bmm", "torch.addmm", "torch.baddbmm", "torch.addbmm", "torch.addmv",
    "torch.mv", "torch.dot", "torch.einsum", "torch.tensordot", "torch.inner", "torch.outer",
    "torch.chain_matmul", "torch.linalg.*", "torch._C.*", "torch._scaled_mm", "torch.ops.*",
    "torch.nn.functional.*", "torch.nn.Linear", "torch.cuda.*",
    "numpy.matmul", "numpy.dot", "numpy.einsum", "numpy.tensordot", "numpy.inner", "numpy.linalg.*",
    ".matmul", ".mm", ".bmm", ".addmm", ".baddbmm", ".mv", ".dot", ".einsum", ".__matmul__", ".__rmatmul__",
    "*cublas*",
})
"""Calls a hand-written matmul may not make: torch/numpy matmul routines, ``@``, F.*, cuBLAS."""

# torch functions that only allocate or describe tensors: allowed everywhere
_TORCH_ALLOWED = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "arange", "tensor", "as_tensor", "from_numpy", "device", "dtype", "Size", "manual_seed", "is_tensor",
    "is_floating_point", "finfo", "iinfo", "get_default_dtype", "no_grad", "inference_mode", "Generator",
    "float16", "float32", "float64", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool",
})

FORBIDDEN_TORCH_OPS: frozenset[str] = FORBIDDEN_MATMUL | frozenset({
    "torch.*",  # every torch function except the allocators above
    ".relu", ".softmax", ".log_softmax", ".sum", ".mean", ".var", ".std", ".exp", ".log", ".sigmoid", ".tanh",
    ".sqrt", ".rsqrt", ".max", ".min", ".amax", ".amin", ".argmax", ".argmin", ".norm", ".cumsum", ".prod",
    ".pow", ".clamp", ".gelu", ".silu", ".layer_norm", ".logsumexp", ".add", ".mul", ".sub", ".div",
    ".add_", ".mul_", ".sub_", ".div_", ".exp_", ".relu_", ".abs", ".neg", ".square",
    "numpy.*",
})
"""Calls a hand-written kernel may not make: any torch compute op, Tensor compute methods, numpy."""


_LIBRARIES = frozenset({"torch", "numpy", "triton", "mlsys", "builtins", "math", "functools"})


def _resolve(node: ast.AST, scope: dict[str, Any]) -> tuple[Any, str] | None:
    """Resolve a Name/Attribute chain in ``scope`` to (object, qualified dotted name), else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in scope:
        return None
    parts.reverse()
    obj = scope[node.id]
    qual = _qualname(obj) or node.id
    for p in parts:
        try:
            obj = inspect.getattr_static(obj, p) if not isinstance(obj, types.ModuleType) else getattr(obj, p)
        except Exception:
            return None
        qual = _qualname(obj) if isinstance(obj, types.ModuleType) else f"{qual}.{p}"
    return obj, qual


def _qualname(obj: Any) -> str | None:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    return None


def _object_names(obj: Any) -> set[str]:
    """Public dotted names an object is known by, for aliases like ``from torch import mm as f``."""
    import sys

    name = getattr(obj, "__name__", None)
    names = set()
    if isinstance(name, str):
        for modname in ("torch", "torch.nn.functional", "torch.linalg", "numpy", "numpy.linalg"):
            mod = sys.modules.get(modname)
            if mod is not None and getattr(mod, name, None) is obj:
                names.add(f"{modname}.{name}")
    if not names and inspect.isfunction(obj):
        names.add(f"{obj.__module__}.{obj.__qualname__}")
    return names


def _forbidden_match(qual: str, forbidden: Iterable[str]) -> str | None:
    for pattern in forbidden:
        if pattern.startswith(".") or pattern == "@":
            continue
        if fnmatch.fnmatchcase(qual, pattern) or fnmatch.fnmatchcase(qual.lower(), pattern.lower()):
            if pattern == "torch.*" and qual.split(".")[1] in _TORCH_ALLOWED and qual.count(".") == 1:
                continue
            return pattern
    return None


def _source_of(fn: Any) -> tuple[ast.AST, dict[str, Any], str]:
    target = getattr(fn, "fn", fn)  # a Triton JITFunction wraps the Python function in .fn
    target = inspect.unwrap(target) if callable(target) else target
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        raise GradingError(f"expected a Python function to inspect, found {_describe(fn)}")
    try:
        src = textwrap.dedent(inspect.getsource(target))
    except (OSError, TypeError) as exc:
        raise GradingError(
            f"could not read the source of {getattr(target, '__name__', target)!r} ({exc}); "
            "define it with `def` in a notebook cell"
        ) from exc
    scope = dict(getattr(target, "__globals__", {}))
    if getattr(target, "__closure__", None):
        for var, cell in zip(target.__code__.co_freevars, target.__closure__, strict=False):
            try:
                scope[var] = cell.cell_contents
            except ValueError:
                pass
    tree = pysource.parse(src)
    scope.update(_local_imports(tree))
    return tree, scope, getattr(target, "__name__", "function")


def _loaded_module(name: str) -> Any:
    """The module ``name`` if its top-level package is already imported (importing a submodule of
    it if need be), else None: nothing new from outside the loaded packages is imported."""
    if name in sys.modules:
        return sys.modules[name]
    if name.split(".")[0] not in sys.modules:
        return None
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a name the learner's code could not import either
        return None


def _local_imports(tree: ast.AST) -> dict[str, Any]:
    """Names bound by ``import`` statements inside the function (``from mlsys import layers`` in its
    body), resolved with :func:`_loaded_module`: a call through such a name is checked like one
    through a global import."""
    found: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                mod = _loaded_module(alias.name)
                if mod is not None:
                    found[alias.asname or alias.name.split(".")[0]] = (
                        mod if alias.asname else sys.modules.get(alias.name.split(".")[0], mod))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            mod = _loaded_module(node.module)
            for alias in node.names:
                obj = getattr(mod, alias.name, None) if mod is not None else None
                if obj is None:
                    obj = _loaded_module(f"{node.module}.{alias.name}")
                if obj is not None:
                    found[alias.asname or alias.name] = obj
    return found


def assert_no_library_calls(fn: Callable[..., Any], forbidden: Iterable[str] = FORBIDDEN_MATMUL,
                            name: str | None = None, *, _depth: int = 2, _seen: set | None = None) -> None:
    """Raise :class:`GradingError` if ``fn``'s source calls something in ``forbidden``.

    Patterns: ``"torch.matmul"`` or ``"torch.nn.functional.*"`` match the resolved dotted name of
    a call (aliases included), ``".matmul"`` matches a method of that name on any object, ``"@"``
    the matrix-multiply operator. The check follows the functions ``fn`` calls that are defined in
    the learner's own code (e.g. a launcher's Triton kernel), two levels deep. ``eval``/``exec``/
    ``getattr`` with a forbidden name are rejected too. Best effort: it reads source, it does not
    trace execution.
    """
    forbidden = frozenset(forbidden)
    seen = _seen if _seen is not None else set()
    from .proxy import RemoteFunction

    if isinstance(fn, RemoteFunction):  # a test cell in the grader process: the function lives in the worker
        PENDING.append((fn, forbidden, name or fn.__name__))  # checked again over every call when the cell ends
        _check_dispatched_ops(fn, forbidden, name or fn.__name__)
        static = object.__getattribute__(fn, "__dict__").get("static")
        if static is None:
            raise GradingError(f"{name or fn.__name__}: expected a function defined with `def {fn.__name__}(...)` in "
                               "an answer cell; none was found in the notebook")
        tree, scope = static
        fname = fn.__name__
    else:
        tree, scope, fname = _source_of(fn)
    label = name or fname
    seen.add(id(fn if isinstance(fn, RemoteFunction) else getattr(fn, "fn", fn)))
    methods = {p[1:] for p in forbidden if p.startswith(".")}
    forbidden_names = {p.lstrip(".") for p in forbidden} | {p.rsplit(".", 1)[-1] for p in forbidden if "*" not in p}
    to_follow: list[Any] = []

    def fail(what: str, node: ast.AST) -> None:
        raise GradingError(
            f"{label}: this exercise asks you to implement the computation yourself, but line "
            f"{getattr(node, 'lineno', '?')} of {fname} uses {what}; write it without library routines"
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("__dict__", "__getattribute__", "__globals__"):
            fail(f".{node.attr} to look up a function", node)
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult) and "@" in forbidden:
            fail("the @ operator", node)
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Subscript):  # kernel[grid](...)
            func = func.value
        if isinstance(func, ast.Name) and func.id in ("eval", "exec", "__import__", "compile"):
            fail(f"{func.id}()", node)
        if isinstance(func, ast.Name) and func.id in ("vars", "globals", "locals"):
            fail(f"{func.id}() to look up a function", node)
        if isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) >= 2:
            arg = node.args[1]
            if not isinstance(arg, ast.Constant) or str(arg.value) in forbidden_names:
                fail("getattr() to look up a function", node)
        resolved = _resolve(func, scope)
        if resolved is not None:
            obj, qual = resolved
            for q in {qual, *_object_names(obj)}:
                pattern = _forbidden_match(q, forbidden)
                if pattern:
                    fail(f"{q} (not allowed here: {pattern})", node)
            inner = getattr(obj, "fn", obj)
            if inspect.isfunction(inner) and id(inner) not in seen:
                top = (getattr(inner, "__module__", "") or "").split(".")[0]
                if top not in _LIBRARIES:  # the learner's own helper: read it too
                    to_follow.append(inner)
        elif isinstance(func, ast.Attribute) and func.attr in methods:
            fail(f".{func.attr}()", node)

    if _depth > 0:
        for inner in to_follow:
            if id(inner) not in seen:
                assert_no_library_calls(inner, forbidden, label, _depth=_depth - 1, _seen=seen)


MATMUL_OPS: frozenset[str] = policy.MATMUL
"""Dispatched operations that are a library matmul or attention, however they were reached
(:data:`mlsys.course.policy.MATMUL`: the one table the verdict process judges by too)."""

_ALLOWED_OPS = policy.COMPUTE_ALLOWED
"""Operations a hand-written kernel's launcher may dispatch: allocation, views, copies
(:data:`mlsys.course.policy.COMPUTE_ALLOWED`). Not a tensor's values read on the host (``float(x[i])``,
``.item()``, ``x == y``), which is how a launcher computes the result in plain Python beside a token kernel."""


def course_modules_except(*allowed: str) -> frozenset[str]:
    """Patterns for every module of the course package but ``allowed`` (``"hardware"``, ``"units"``...).

    For a function that must work a figure out itself: it may look up data and units, but reach no course
    function that computes the figure, however it is reached (``mlsys.cli.main`` runs ``roofline.bound``)."""
    import pkgutil

    import mlsys

    names = {m.name for m in pkgutil.iter_modules(mlsys.__path__)} | {"__main__"}
    return frozenset(f"mlsys.{n}.*" for n in sorted(names - set(allowed)))


def forbidden_ops(forbidden: Iterable[str]) -> tuple[frozenset[str], bool]:
    """The dispatched-op patterns that ``forbidden`` (source-level names) implies, and whether every
    compute op is forbidden (``torch.*``). ``c10d::*`` (a collective through any route, a process
    group's method included) is forbidden with ``torch.distributed.*`` or ``torch.*``; a matmul exercise
    refuses what :func:`mlsys.course.policy.is_forbidden` refuses for ``"matmul"`` (collectives included)."""
    forbidden = frozenset(forbidden)
    pats: set[str] = set()
    if forbidden & {"@", "torch.matmul", "torch.mm"} or any(p.startswith("torch.nn.functional") for p in forbidden):
        pats |= MATMUL_OPS
    if any(p in forbidden for p in ("torch.distributed.*", "torch.*")):
        pats.add("c10d::*")
    return frozenset(pats), "torch.*" in forbidden


PENDING: list[tuple[Any, frozenset[str], str]] = []
"""``assert_no_library_calls`` applied to a learner function in a test cell run by the grader: (handle,
forbidden, label). :func:`recheck_library_calls` checks each again when the cell ends, over every call of that
function the cell made, before or after the assert (a check placed first in a cell sees no call yet)."""

"""Recorded calls that take a tensor's data out of torch, where what happens to it is not recorded."""


def _python_patterns(forbidden: Iterable[str]) -> list[str]:
    """The patterns of ``forbidden`` that name Python-level library functions outside torch (``mlsys.roofline.*``,
    ``numpy.*``, ``math.fsum``): matched against the worker's ``py:`` records (torch is in the dispatcher's)."""
    return [p for p in forbidden if not p.startswith((".", "@", "*")) and p.partition(".")[0] != "torch"]


def _check_dispatched_ops(fn: Any, forbidden: Iterable[str], label: str, extra: Iterable[str] = ()) -> None:
    """Refuse a library routine seen in what ``fn``'s calls ran (recorded by the worker): a dispatched torch
    operation, or a library function its own code called (``py:`` records)."""
    from .proxy import RECORD_OVERFLOW, TO_NUMPY

    pats, every = forbidden_ops(forbidden)
    matmul = MATMUL_OPS <= pats  # a matmul exercise: judged by the one table (mlsys.course.policy), collectives too
    python = _python_patterns(forbidden)
    for op in sorted({*fn.ops, *extra}):
        if op.startswith("py:"):
            hit = next((p for p in python if fnmatch.fnmatchcase(op[3:], p)), None)
            what = f"called the library function {op[3:]} (not allowed here: {hit})"
            if hit is None and op == TO_NUMPY and any(p.startswith("numpy") for p in python):
                hit, what = op, ("took a tensor's data out of torch (Tensor.numpy, Tensor.tolist or numpy.asarray) to "
                                 "compute with it")
            if hit is None and op == RECORD_OVERFLOW and python:
                hit, what = op, "called more library functions than the grader's record holds"
            if hit is not None:
                raise GradingError(f"{label}: this exercise asks you to implement the computation yourself, but running "
                                   f"it {what}; write it without library routines")
            continue
        bad = any(fnmatch.fnmatchcase(op, p) for p in pats) or (matmul and policy.is_forbidden("matmul", op))
        if every and not any(fnmatch.fnmatchcase(op, p) for p in _ALLOWED_OPS):
            bad = True  # any namespace: a custom op (torch.library) hides the aten ops it runs from the record
        if bad:
            raise GradingError(f"{label}: this exercise asks you to implement the computation yourself, but running "
                               f"it dispatched the library operation {op}; write it without library routines")


def recheck_library_calls(lambdas: Iterable[tuple[frozenset[str], Any]] = ()) -> None:
    """At the end of a test cell run by the grader: each :data:`PENDING` check again, over every call of its
    function the cell made, and the calls of the cell's lambdas that name that function (``lambda a, b:
    tiled_matmul(a.t(), b.t())`` runs in the learner's kernel, so its record is the lambda's). Clears it."""
    pending = list(PENDING)
    PENDING.clear()
    for fn, forbidden, label in pending:
        extra = {op for names, lam in lambdas if fn.__name__ in names for op in getattr(lam, "ops", ())}
        _check_dispatched_ops(fn, forbidden, label, extra)


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
