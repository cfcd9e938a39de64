"""What will not compile, caught on a CPU: the learner's kernels compiled for the course's GPU target.

Triton's interpreter (``TRITON_INTERPRET=1``, the labs on a CPU) runs a kernel as NumPy code and accepts
some programs the GPU compiler rejects: a loop-carried variable whose dtype changes in the loop
(``acc = tl.zeros(..., dtype=tl.float16)`` then ``acc += a.to(tl.float32) * b``) runs, and compiling it
for sm_90 fails with "Loop-carried variable acc has initial type fp16 but is re-assigned to fp32". A
learner would learn it only from the GPU grader's grade.

So a kernel check that runs under the interpreter records each ``@triton.jit`` kernel the learner's
launcher starts (:func:`record_launches`: the kernel and the types of its arguments), and
:func:`compile_errors` asks Triton to compile each one for :data:`TARGET` in a fresh process without
the interpreter. Compiling needs no GPU (``ptxas`` ships in the Triton wheel). A
``CompilationError`` is the learner's own, reported with the line; any other failure (no ``ptxas``, an
argument type this module cannot describe) is not held against the learner and only noted.

The fresh process (``python -I .../compilecheck.py``: Triton only, not the course package) reads a JSON job on stdin: the kernel's
source and that of the ``@triton.jit`` functions it calls, its module-level names (modules and plain
constants), the signature, the constexpr values and the launch options; it prints a JSON reply.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["TARGET", "record_launches", "describe", "compile_errors", "in_grader_sandbox", "CompileProblem"]

TARGET = ("cuda", 90, 32)
"""The course's GPU target: an H100/H200 (compute capability 9.0, warps of 32), as Triton's ``GPUTarget``."""

OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
_DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64", "int8": "i8",
           "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "bool": "i1"}
_DONE: dict[str, str | None] = {}  # job key -> error text (None: compiled); shared by forked children at fork time


class CompileProblem(ValueError):
    """A kernel launch this module cannot describe to the compiler (not the learner's error)."""


def _jit_function(obj: Any) -> Any:
    """The plain Python function behind an interpreted or compiled ``@triton.jit`` object, or None."""
    fn = getattr(obj, "fn", None)
    if isinstance(fn, types.FunctionType) and type(obj).__name__ in ("InterpretedFunction", "JITFunction"):
        return fn
    return None


@contextlib.contextmanager
def record_launches() -> Iterator[list[tuple[Any, tuple, dict]]]:
    """Record ``(kernel, args, kwargs)`` of the first launch of each interpreted kernel in the block."""
    launches: list[tuple[Any, tuple, dict]] = []
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # no Triton: nothing to record
        yield launches
        return
    original = InterpretedFunction.run
    seen: set[int] = set()

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if id(self) not in seen:
            seen.add(id(self))
            launches.append((self, args, {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}))
        return original(self, *args, **kwargs)

    InterpretedFunction.run = run
    try:
        yield launches
    finally:
        InterpretedFunction.run = original


def _type_of(value: Any) -> str:
    """Triton's signature string for a runtime argument (``*fp16``, ``i32``, ``fp32``...)."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "data_ptr"):
        name = str(dtype).replace("torch.", "")
        if name not in _DTYPES:
            raise CompileProblem(f"a tensor of dtype {name}")
        return "*" + _DTYPES[name]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise CompileProblem(f"an argument of type {type(value).__name__}")


def _is_constexpr(param: inspect.Parameter) -> bool:
    ann = param.annotation
    return ann is not inspect.Parameter.empty and "constexpr" in (ann if isinstance(ann, str) else repr(ann))


def _source(fn: types.FunctionType) -> tuple[str, int]:
    """The function's source without decorators, and the line of its ``def`` in its cell or file."""
    lines, first = inspect.getsourcelines(fn)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    node = tree.body[0]
    start = node.lineno - 1  # the def line, after any decorators
    return textwrap.dedent("".join(lines[start:])), first + start


def _globals(fn: types.FunctionType, jit: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The module-level names ``fn`` uses: modules (by import name), plain constants, and jit functions (into ``jit``)."""
    out: dict[str, Any] = {}
    for name in fn.__code__.co_names:
        if name not in fn.__globals__:
            continue
        value = fn.__globals__[name]
        if isinstance(value, types.ModuleType):
            out[name] = {"module": value.__name__}
        elif isinstance(value, bool | int | float | str) or value is None:
            out[name] = {"value": value}
        elif type(value).__name__ == "constexpr" and isinstance(getattr(value, "value", None), int | float | bool):
            out[name] = {"constexpr": value.value}
        elif _jit_function(value) is not None:
            inner = _jit_function(value)
            if name not in jit:
                src, line = _source(inner)
                jit[name] = {"source": src, "line": line, "globals": {}}
                jit[name]["globals"] = _globals(inner, jit)
    return out


def describe(kernel: Any, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A JSON-ready compile job for one launch of ``kernel`` (raises :class:`CompileProblem` if it cannot)."""
    fn = _jit_function(kernel)
    if fn is None:
        raise CompileProblem(f"{kernel!r:.60} is not a @triton.jit function")
    params = list(inspect.signature(fn).parameters.values())
    bound = dict(zip([p.name for p in params], args, strict=False))
    bound.update({k: v for k, v in kwargs.items() if k not in OPTIONS})
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    for p in params:
        if p.name not in bound:
            if p.default is inspect.Parameter.empty:
                raise CompileProblem(f"no value for {p.name}")
            bound[p.name] = p.default
        value = bound[p.name]
        if _is_constexpr(p) or value is None:
            if not (isinstance(value, bool | int | float | str) or value is None):
                raise CompileProblem(f"a constexpr {p.name} of type {type(value).__name__}")
            signature[p.name] = "constexpr"
            constexprs[p.name] = value
        else:
            signature[p.name] = _type_of(value)
    jit: dict[str, dict[str, Any]] = {}
    src, line = _source(fn)
    job = {"name": fn.__name__, "source": src, "line": line, "file": fn.__code__.co_filename,
           "globals": _globals(fn, jit), "jit": jit, "signature": signature, "constexprs": constexprs,
           "options": {k: v for k, v in kwargs.items() if k in OPTIONS and isinstance(v, int)}, "target": TARGET}
    return job


def in_grader_sandbox() -> bool:
    """True where the teacher's grader runs this package (its sandbox's read-only site, ``/sandbox/site``).

    There the check is skipped: a compiler process of the checks' own would be a grandchild of the learner's kernel,
    which the grader's process census rightly flags (and this module runs the code it is sent, so it is no process
    to exempt); a GPU grader compiles the kernel anyway, and on a CPU grader the interpreter's verdict stands as
    before. The check is for the learner, on the learner's machine, before submitting.
    """
    return Path(__file__).resolve().is_relative_to("/sandbox")


def _key(job: dict[str, Any]) -> str:
    """What decides a compile's verdict: the job without the file its cell ran from (a new name in every kernel
    process), and the Triton version that compiles it."""
    triton = sys.modules.get("triton")
    what = {**{k: v for k, v in job.items() if k != "file"}, "triton": getattr(triton, "__version__", None)}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


CACHE_ENV = "MLSYS_COMPILE_CACHE"
"""A folder for compile verdicts kept between runs (default ``$XDG_CACHE_HOME/mlsys/compilecheck``, else
``~/.cache/...``); ``0`` keeps none. A notebook run again, or a lab's checks run once per learner, compile each
unchanged kernel once (about half a CPU-second each)."""


def _cache_file(key: str) -> Path | None:
    from mlsys.runtime.paths import user_cache  # here: the fresh compiling process runs without the course package

    base = user_cache("compilecheck", CACHE_ENV)
    return base / f"{key}.json" if base is not None else None


def _cached(key: str) -> tuple[bool, str | None]:
    """``(True, verdict)`` if a run before this one compiled the same job (verdict: the error, or None)."""
    path = _cache_file(key)
    try:
        reply = json.loads(path.read_text(encoding="utf-8")) if path is not None else {}
    except (OSError, ValueError):
        return False, None
    if not isinstance(reply, dict) or not ({"ok", "error"} & set(reply)):
        return False, None
    return True, reply.get("error") or None


def _keep(key: str, reply: dict[str, Any]) -> None:
    """Keep a compiler's verdict (only one: compiled, or the learner's CompilationError) for the next run."""
    path = _cache_file(key)
    if path is None or not ({"ok", "error"} & set(reply)):
        return
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({k: reply[k] for k in ("ok", "error") if k in reply}), encoding="utf-8")
        os.replace(tmp, path)


def compile_errors(launches: list[tuple[Any, tuple, dict]], *, timeout: float = 180.0) -> list[str]:
    """Compile each recorded launch for :data:`TARGET`; return the learner's compile errors, as sentences.

    A launch that cannot be described, or a compile that fails for a reason other than Triton's
    ``CompilationError`` (no ``ptxas``, a time-out), is noted on stdout and not returned.
    """
    if in_grader_sandbox():
        return []
    errors = []
    for kernel, args, kwargs in launches:
        try:
            job = describe(kernel, args, kwargs)
        except (CompileProblem, OSError, TypeError, SyntaxError) as exc:
            print(f"note (not a failure): could not check that {getattr(kernel, '__name__', 'the kernel')} compiles "
                  f"for the GPU here ({exc})")
            continue
        key = _key(job)
        if key not in _DONE:
            known, verdict = _cached(key)
            _DONE[key] = verdict if known else _compile_in_fresh_process(job, timeout, key)
        if _DONE[key]:
            errors.append(_DONE[key])
    return errors


def _compile_in_fresh_process(job: dict[str, Any], timeout: float, key: str) -> str | None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    try:
        # the file itself, not ``-m mlsys.labkit.compilecheck``: the compiler needs Triton only, not the course package
        proc = subprocess.run([sys.executable, "-I", os.path.abspath(__file__)], input=json.dumps(job),
                              capture_output=True, text=True, timeout=timeout, env=env)
        reply = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
    except (subprocess.TimeoutExpired, json.JSONDecodeError, OSError) as exc:
        reply = {"other": f"{type(exc).__name__}: {exc}"}
    _keep(key, reply)
    if reply.get("error"):
        return reply["error"]
    if "ok" not in reply:
        why = reply.get("other") or (proc.stderr.strip().splitlines() or ["no reply"])[-1]
        print(f"note (not a failure): could not check that {job['name']} compiles for the GPU here ({why[:200]})")
    return None


# ------------------------------------------------------------------------------------------------------
# the fresh process


def _namespace(spec: dict[str, Any], jit: dict[str, Any], built: dict[str, Any], triton: Any) -> dict[str, Any]:
    import importlib

    ns: dict[str, Any] = {"__name__": "learner"}  # Triton reads a function's __module__
    for name, g in spec.items():
        if "module" in g:
            ns[name] = importlib.import_module(g["module"])
        elif "constexpr" in g:
            ns[name] = triton.language.constexpr(g["constexpr"])
        elif "value" in g:
            ns[name] = g["value"]
    for name in jit:  # every jit function, built once, shared by name
        if name in built:
            ns[name] = built[name]
    return ns


def _build(name: str, src: str, line: int, filename: str, ns: dict[str, Any], triton: Any) -> Any:
    import linecache

    tree = ast.parse(src)
    ast.increment_lineno(tree, line - 1)
    text = "\n" * (line - 1) + src  # so that inspect.getsource and the compiler's messages see the real lines
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    exec(compile(tree, filename, "exec"), ns)
    return triton.jit(ns[name])


def _message(job: dict[str, Any], exc: BaseException) -> str:
    """One sentence for a CompilationError: where (the learner's line) and why (the compiler's reason).

    An error inside a called ``@triton.jit`` function arrives wrapped in one at the call site: the innermost
    says where and why."""
    while type(exc.__cause__) is type(exc):
        exc = exc.__cause__
    lineno = getattr(getattr(exc, "node", None), "lineno", None)  # 1 = the def line of the function that failed
    reason = str(getattr(exc, "error_message", "") or "").strip() or str(exc).strip().splitlines()[-1]
    wrapped = re.fullmatch(r"\w+\((['\"])(.*)\1\)", reason, re.S)  # AssertionError("...") -> ...
    if wrapped:
        reason = wrapped.group(2)
    src = getattr(exc, "src", None)
    where = ""
    if lineno and isinstance(src, str):
        funcs = {job["name"]: job, **job["jit"]}
        name, spec = next(((n, f) for n, f in funcs.items() if f["source"].strip() == textwrap.dedent(src).strip()),
                          (job["name"], None))
        lines = src.splitlines()
        text = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
        line = f"line {spec['line'] + lineno - 1} of the cell that defines {name}" if spec else f"line {lineno} of {name}"
        where = f" at {line}" + (f" (`{text}`)" if text else "")
    hint = ""
    if "Loop-carried variable" in reason:
        hint = (" A variable keeps one dtype through a loop on the GPU: initialise it in the dtype the loop gives it "
                "(an accumulator: tl.zeros(..., dtype=tl.float32)).")
    return (f"{job['name']}: the GPU compiler (Triton, for sm_{job['target'][1]}) rejects your kernel{where}: "
            f"{reason.rstrip('.')}.{hint} The interpreter on this CPU runs it, but the grader's GPU cannot: fix it here.")


def _main() -> int:
    job = json.loads(sys.stdin.read())
    os.environ.pop("TRITON_INTERPRET", None)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.errors import CompilationError

    built: dict[str, Any] = {}
    try:
        for name, dep in job["jit"].items():  # dependencies first; they may call each other by name at compile time
            ns = _namespace(dep["globals"], job["jit"], built, triton)
            built[name] = _build(name, dep["source"], dep["line"], job["file"], ns, triton)
        for fn in built.values():  # late binding: every jit function sees every other
            fn.fn.__globals__.update(built)
        ns = _namespace(job["globals"], job["jit"], built, triton)
        kernel = _build(job["name"], job["source"], job["line"], job["file"], ns, triton)
        src = triton.compiler.ASTSource(fn=kernel, signature=job["signature"], constexprs=job["constexprs"])
        triton.compile(src, target=GPUTarget(*job["target"]), options=job["options"] or None)
    except CompilationError as exc:
        print(json.dumps({"error": _message(job, exc)}))
        return 0
    except Exception as exc:  # not the learner's: the caller notes it
        print(json.dumps({"other": f"{type(exc).__name__}: {str(exc)[:300]}"}))
        return 0
    print(json.dumps({"ok": True}))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
