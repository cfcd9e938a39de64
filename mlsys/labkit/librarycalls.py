"""Implement it, don't call it: the checks that a learner's function reaches no library routine.

Two views of one rule: :func:`assert_no_library_calls` reads the function's source (aliases, helpers it
calls, ``getattr`` with a built name); :func:`recheck_library_calls` judges what its calls dispatched, as the
worker recorded them (:mod:`mlsys.labkit.proxy`), by the one table of :mod:`mlsys.labkit.policy`. The labs
call both through :mod:`mlsys.labkit.grading`, which re-exports them.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import inspect
import sys
import textwrap
import types
from collections.abc import Callable, Iterable
from typing import Any

from mlsys.labkit import policy
from mlsys.labkit.checkerror import GradingError, _describe
from mlsys.runtime import pysource

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
    from mlsys.labkit.proxy import RemoteFunction

    tree, scope, fname = _source_to_check(fn, forbidden, name)
    label = name or fname
    seen.add(id(fn if isinstance(fn, RemoteFunction) else getattr(fn, "fn", fn)))
    methods = {p[1:] for p in forbidden if p.startswith(".")}
    forbidden_names = {p.lstrip(".") for p in forbidden} | {p.rsplit(".", 1)[-1] for p in forbidden if "*" not in p}
    to_follow: list[Any] = []
    for node in ast.walk(tree):
        what = (_lookup_refusal(node, forbidden, forbidden_names)
                or _call_refusal(node, scope, forbidden, methods, seen, to_follow))
        if what:
            raise GradingError(
                f"{label}: this exercise asks you to implement the computation yourself, but line "
                f"{getattr(node, 'lineno', '?')} of {fname} uses {what}; write it without library routines"
            )
    if _depth > 0:
        for inner in to_follow:
            if id(inner) not in seen:
                assert_no_library_calls(inner, forbidden, label, _depth=_depth - 1, _seen=seen)


def _source_to_check(fn: Any, forbidden: frozenset[str], name: str | None) -> tuple[ast.AST, dict[str, Any], str]:
    """The source tree, scope and name :func:`assert_no_library_calls` reads for ``fn``: a function of this
    process, or a learner's function a test cell run by the grader holds as a handle (its static view from the
    notebook; the check is also queued on :data:`PENDING` and applied now to what its calls dispatched)."""
    from mlsys.labkit.proxy import RemoteFunction

    if not isinstance(fn, RemoteFunction):
        return _source_of(fn)
    PENDING.append((fn, forbidden, name or fn.__name__))  # checked again over every call when the cell ends
    _check_dispatched_ops(fn, forbidden, name or fn.__name__)
    static = object.__getattribute__(fn, "__dict__").get("static")
    if static is None:
        raise GradingError(f"{name or fn.__name__}: expected a function defined with `def {fn.__name__}(...)` in "
                           "an answer cell; none was found in the notebook")
    tree, scope = static
    return tree, scope, fn.__name__


def _callee(node: ast.Call) -> ast.AST:
    """What a call calls: ``kernel`` for ``kernel[grid](...)``, else the call's own ``func``."""
    return node.func.value if isinstance(node.func, ast.Subscript) else node.func


def _lookup_refusal(node: ast.AST, forbidden: frozenset[str], forbidden_names: set[str]) -> str | None:
    """What ``node`` uses that reaches a function without naming it (``.__dict__``, ``eval``, ``vars()``,
    ``getattr`` with a built or forbidden name) or the ``@`` operator where it is forbidden; None if nothing."""
    if isinstance(node, ast.Attribute) and node.attr in ("__dict__", "__getattribute__", "__globals__"):
        return f".{node.attr} to look up a function"
    if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult) and "@" in forbidden:
        return "the @ operator"
    if not isinstance(node, ast.Call):
        return None
    func = _callee(node)
    if isinstance(func, ast.Name) and func.id in ("eval", "exec", "__import__", "compile"):
        return f"{func.id}()"
    if isinstance(func, ast.Name) and func.id in ("vars", "globals", "locals"):
        return f"{func.id}() to look up a function"
    if isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) >= 2:
        arg = node.args[1]
        if not isinstance(arg, ast.Constant) or str(arg.value) in forbidden_names:
            return "getattr() to look up a function"
    return None


def _call_refusal(node: ast.AST, scope: dict[str, Any], forbidden: frozenset[str], methods: set[str],
                  seen: set[int], to_follow: list[Any]) -> str | None:
    """For a call in the source: the forbidden routine it resolves to (by its dotted name in ``scope`` or the
    names of the object found there) or the forbidden method it calls; None if neither. A learner's own helper
    it calls (outside the libraries) is appended to ``to_follow``, to be read too."""
    if not isinstance(node, ast.Call):
        return None
    func = _callee(node)
    resolved = _resolve(func, scope)
    if resolved is None:
        return f".{func.attr}()" if isinstance(func, ast.Attribute) and func.attr in methods else None
    obj, qual = resolved
    for q in {qual, *_object_names(obj)}:
        pattern = _forbidden_match(q, forbidden)
        if pattern:
            return f"{q} (not allowed here: {pattern})"
    inner = getattr(obj, "fn", obj)
    if inspect.isfunction(inner) and id(inner) not in seen:
        top = (getattr(inner, "__module__", "") or "").split(".")[0]
        if top not in _LIBRARIES:  # the learner's own helper: read it too
            to_follow.append(inner)
    return None


MATMUL_OPS: frozenset[str] = policy.MATMUL
"""Dispatched operations that are a library matmul or attention, however they were reached
(:data:`mlsys.labkit.policy.MATMUL`: the one table the verdict process judges by too)."""

_ALLOWED_OPS = policy.COMPUTE_ALLOWED
"""Operations a hand-written kernel's launcher may dispatch: allocation, views, copies
(:data:`mlsys.labkit.policy.COMPUTE_ALLOWED`). Not a tensor's values read on the host (``float(x[i])``,
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
    refuses what :func:`mlsys.labkit.policy.is_forbidden` refuses for ``"matmul"`` (collectives included)."""
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
    from mlsys.labkit.proxy import RECORD_OVERFLOW, TO_NUMPY

    pats, every = forbidden_ops(forbidden)
    matmul = MATMUL_OPS <= pats  # a matmul exercise: judged by the one table (mlsys.labkit.policy), collectives too
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
