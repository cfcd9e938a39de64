"""The worker side of the grader's channel: runs in the learner's kernel, answers with plain data.

The grader process (:mod:`mlsys.grader.learnerside.cellrunner`) sends one request per execution, as the call
``mlsys.grader.learnerside.worker.serve(globals(), request, request_id)``; the reply is a display output of MIME
type :data:`mlsys.labkit.proxy.RPC_MIME`. Requests: ``get`` a global by name, ``call`` a handle with
arguments, ``getattr`` of a handle. Every call runs under a torch dispatch mode that records the
operations it dispatches (aten ops, and c10d collectives, which go through the dispatcher too) so
that the grader can refuse a library routine however it was reached (``vars(F)[...]``, a process
group's method, a method of a learner class).

Everything here runs where the learner's code runs and can be rewritten by it: it is a convenience
for honest code, not a defence. What it sends is the learner's answer, judged by the grader.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from mlsys.labkit import watchdog
from mlsys.labkit.proxy import RECORD_OVERFLOW, RPC_MIME, TO_NUMPY, Rejected, decode, encode
from mlsys.runtime.device import has_cuda

HANDLES: dict[int, Any] = {}


def _handle(x: Any) -> dict[str, Any]:
    key = len(HANDLES) + 1
    HANDLES[key] = x
    try:
        name = str(getattr(x, "__name__", "") or "")[:80]
    except Exception:  # noqa: BLE001 - a learner object whose attributes raise
        name = ""
    return {"t": "handle", "id": key, "callable": callable(x), "name": name, "type": type(x).__qualname__[:80]}


def _ref(d: dict[str, Any]) -> Any:
    return HANDLES[int(d["id"])]


def _recorder() -> CallRecorder:
    return CallRecorder()


_SKIP_PACKAGES = frozenset({"torch", "triton", "mlsys", "builtins", "_io", "posix", "sys"})
"""Packages whose functions the Python-call record leaves out: torch's work is in the dispatcher record, Triton
is the tool the labs teach, the course's own package is recorded only where code from outside it enters it."""
_LEARNER: dict[str, bool] = {}
_ROOTS: list[tuple[str, ...]] = []
_PACKAGE: list[str] = []


def _library_roots() -> tuple[str, ...]:
    """Folders whose Python files are libraries (the interpreter's, the environment's, the course package)."""
    if not _ROOTS:
        import sysconfig

        roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *sysconfig.get_paths().values(), _package_dir()}
        _ROOTS.append(tuple(sorted(r.rstrip("/") + "/" for r in roots if r and r != "/")))
    return _ROOTS[0]


_COURSE_ROOMS = ("book", "labkit", "grader")
"""The course's packages of ``mlsys`` (the book's page helpers, the learner's kit, the grader)."""


def _package_dir() -> str:
    """The course package's folder, with a trailing slash."""
    if not _PACKAGE:
        import os

        import mlsys

        _PACKAGE.append(os.path.dirname(os.path.abspath(mlsys.__file__)) + "/")
    return _PACKAGE[0]


def _is_learner(filename: str) -> bool:
    """Code the learner wrote: a notebook cell, a file of the submission, a string it compiled (``exec``);
    not a library file, not a frozen module and not a test cell's own lambda."""
    known = _LEARNER.get(filename)
    if known is None:
        known = not (filename.startswith(_library_roots()) or filename.startswith(("<frozen", "<test cell")))
        _LEARNER[filename] = known
    return known


def _top(module: Any) -> str:
    return str(module or "").partition(".")[0]


def _builtin_name(fn: Any) -> str:
    """``module.qualname`` of a C function or method (``math.fsum``, ``numpy.ufunc.reduce``)."""
    import types

    owner = getattr(fn, "__self__", None)
    name = str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "?"))
    mod = getattr(fn, "__module__", None)
    if owner is None and isinstance(getattr(fn, "__objclass__", None), type):  # an unbound method: Tensor.tolist(x)
        owner_type = fn.__objclass__
        return f"{owner_type.__module__}.{owner_type.__qualname__}.{getattr(fn, '__name__', '?')}"
    if isinstance(owner, types.ModuleType):
        mod = mod or owner.__name__
    elif owner is not None and mod is None:
        mod = type(owner).__module__
        name = f"{type(owner).__qualname__}.{getattr(fn, '__name__', '?')}"
    return f"{mod}.{name}"


MAX_RECORDED = 5000
_LEAVE_TORCH = frozenset({"numpy", "tolist"})
"""Tensor methods that hand a tensor's data to NumPy or to plain Python, where what is computed is not recorded."""


class CallRecorder:
    """What one call of the learner's code ran: ``ops`` gets the torch operations it dispatched (``aten::mm``,
    ``c10d::allreduce_``; a dispatch mode, when torch is loaded) and the library functions its own code called
    (``py:mlsys.roofline.matmul_flops``, ``py:math.fsum``, ``py:numpy.core.fromnumeric.sum``; a profile hook),
    however they were reached: an alias bound outside the ``def``, ``vars(module)[...]``, a method of a learner
    class, a helper. The course package counts where code from outside it enters it (a learner's call, or one
    through ``numpy.vectorize``); other libraries where the learner's own code calls them. Inside a Triton
    kernel run by the interpreter, only the dispatcher is recorded (the profile hook would triple its cost).

    It runs in the learner's process, which can switch it off: evidence for the grader's checks, flagged by
    the audit when an answer cell touches profiling or dispatch (see docs/TEACHERS.md)."""

    def __init__(self) -> None:
        self.ops: set[str] = set()
        self._mode = None
        if sys.modules.get("torch") is not None:
            from mlsys.labkit.checks import dispatch_recorder

            self._mode = dispatch_recorder()

    def _hook(self, frame: Any, event: str, arg: Any) -> None:
        if len(self.ops) >= MAX_RECORDED:  # a flood of names to hide one: the record says so, and the grader refuses
            self.ops.add(RECORD_OVERFLOW)
            return
        if event == "call":
            mod = frame.f_globals.get("__name__")
            top = _top(mod)
            caller = frame.f_back
            if caller is None or _is_learner(frame.f_code.co_filename):
                return
            if mod == "torch._tensor" and frame.f_code.co_name == "__array__":  # numpy.asarray(tensor), however called
                self.ops.add(TO_NUMPY)
                return
            if top == "mlsys":  # the course's own functions: entered from outside the package (by the caller's file:
                # a cell that sets its __name__ to "mlsys.x" is still not the package), the grading machinery
                # included (a learner function handed to checks.calls_of is called from the course's packages)
                where = caller.f_code.co_filename
                course_dirs = tuple(_package_dir() + room + "/" for room in _COURSE_ROOMS)
                if str(mod).startswith(tuple(f"mlsys.{room}." for room in _COURSE_ROOMS)) or (
                        where.startswith(_package_dir()) and not where.startswith(course_dirs)):
                    return
            elif top in _SKIP_PACKAGES or not _is_learner(caller.f_code.co_filename):
                return
            self.ops.add(f"py:{mod}.{frame.f_code.co_qualname}")
        elif event == "c_call" and _is_learner(frame.f_code.co_filename):
            name = _builtin_name(arg)
            if _top(name) not in _SKIP_PACKAGES:
                self.ops.add("py:" + name)
            elif getattr(arg, "__name__", "") in _LEAVE_TORCH and _top(name) == "torch":
                self.ops.add(TO_NUMPY)  # x.numpy(), x.tolist(), torch.Tensor.tolist(x)

    def __enter__(self) -> CallRecorder:
        import threading

        _pause_in_interpreted_kernels()
        if self._mode is not None:
            self._mode.__enter__()
        self._prev = (sys.getprofile(), threading.getprofile())
        sys.setprofile(self._hook)
        threading.setprofile(self._hook)  # threads the call starts
        return self

    def __exit__(self, *exc: Any) -> None:
        import threading

        sys.setprofile(self._prev[0])
        threading.setprofile(self._prev[1])
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self.ops |= self._mode.ops


def _pause_in_interpreted_kernels() -> None:
    """Under ``TRITON_INTERPRET=1``, run each kernel grid without the profile hook (the dispatch mode stays)."""
    interp = sys.modules.get("triton.runtime.interpreter")
    grid = getattr(interp, "GridExecutor", None)
    if grid is None or getattr(grid.__call__, "_mlsys_unprofiled", False):
        return
    orig = grid.__call__

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        hook = sys.getprofile()
        if hook is None:
            return orig(self, *args, **kwargs)
        sys.setprofile(None)
        try:
            return orig(self, *args, **kwargs)
        finally:
            sys.setprofile(hook)

    __call__._mlsys_unprofiled = True  # type: ignore[attr-defined]
    grid.__call__ = __call__


def _answer(ns: dict[str, Any], req: dict[str, Any]) -> dict[str, Any]:
    op = req.get("op")
    if op == "get":
        name = str(req["name"])
        if name not in ns:
            return {"missing": name}
        return {"ok": encode(ns[name], _handle)}
    if op == "getattr":
        return {"ok": encode(getattr(HANDLES[int(req["obj"])], str(req["name"])), _handle)}
    if op == "lambda":  # a lambda of a test cell, evaluated here so that it runs beside the learner's code
        fn = eval(compile(str(req["source"]), "<test cell lambda>", "eval"), ns)  # noqa: S307 - the course's test code
        return {"ok": _handle(fn)}
    if op == "call":
        fn = HANDLES[int(req["fn"])]
        args = [decode(a, _ref) for a in req.get("args", [])]
        kwargs = {str(k): decode(v, _ref) for k, v in req.get("kwargs", {}).items()}
        if any(isinstance(a, Rejected) for a in [*args, *kwargs.values()]):
            raise TypeError("an argument could not be rebuilt in the worker")
        helper = req.get("helper")
        before = [_snapshot(a) for a in args]
        if helper is not None:  # the course's worker-side half: only the learner's calls inside it are recorded
            recorded = Recorded(fn)
            args = [recorded if helper != "running_sums_probe" else fn, *args]  # a Triton function is not wrapped
            result = _helper(str(helper))(*args, **kwargs)
            if isinstance(result, dict) and isinstance(result.get("ops"), list):  # recorded in a child process
                recorded.recorded_ops.update(str(op) for op in result.pop("ops"))
            ops = sorted(recorded.recorded_ops)
            before = [None, *before]
        else:
            with _recorder() as rec:
                result = fn(*args, **kwargs)
            ops = sorted(rec.ops)
        changed = {str(i): encode(a, _handle) for i, (a, b) in enumerate(zip(args, before, strict=True))
                   if b is not None and _snapshot(a) != b}
        return {"ok": encode(result, _handle), "ops": ops, "changed": changed}
    raise ValueError(f"unknown request {op!r}")


class Recorded:
    """A learner function whose calls record the operations they dispatch into ``recorded_ops`` (the
    course's checks send that set back from the child process a guarded call runs in)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.recorded_ops: set[str] = set()
        self.__name__ = str(getattr(fn, "__name__", "") or "function")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        rec = _recorder()
        try:
            with rec:
                return self.fn(*args, **kwargs)
        finally:
            self.recorded_ops |= rec.ops


HELPERS = ("run_guarded", "call_checked", "calls_of", "running_sums_probe", "ring_runs", "tagged_runs", "dp_runs",
           "shifted_call")
"""The worker-side halves of the course's checks (:mod:`mlsys.labkit.checks`) a grader may ask for by name."""


def _helper(name: str) -> Any:
    from mlsys.labkit import checks

    if name not in HELPERS:
        raise ValueError(f"unknown helper {name!r}")
    return {"run_guarded": checks.worker_run_guarded, "call_checked": checks.worker_call_checked,
            "calls_of": checks.calls_of, "running_sums_probe": checks.running_sums_probe,
            "ring_runs": checks.worker_ring_runs, "tagged_runs": checks.worker_tagged_runs,
            "dp_runs": checks.worker_dp_runs, "shifted_call": checks.with_shifted_argument}[name]


def _snapshot(x: Any) -> bytes | None:
    """The bytes of an exact tensor or array argument, to send it back when the call changed it in place."""
    torch, np = sys.modules.get("torch"), sys.modules.get("numpy")
    if torch is not None and type(x) is torch.Tensor and x.numel() <= 1 << 22:
        t = x.detach().to("cpu").contiguous()
        return t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    if np is not None and type(x) is np.ndarray and x.dtype.kind in "biufc" and x.size <= 1 << 22:
        return np.ascontiguousarray(x).tobytes()
    return None


def _what(req: dict[str, Any]) -> str:
    if req.get("op") == "call":
        try:
            return str(getattr(HANDLES[int(req["fn"])], "__name__", "") or "your function")[:80]
        except Exception:  # noqa: BLE001 - a learner object whose attributes raise
            return "your function"
    return str(req.get("name", "a value"))[:80]


def serve(ns: dict[str, Any], request: str, request_id: str) -> None:
    """Answer one request from the grader (see the module doc)."""
    from IPython.display import display

    try:
        req = json.loads(request)
        # on a GPU a kernel that never finishes ends this process, with a message naming the call (watchdog)
        with watchdog.watch(f"the test's call of {_what(req)}", active=has_cuda()):
            reply = _answer(ns, req)
    except BaseException as exc:  # noqa: BLE001 - the learner's exception is the answer
        reply = {"error": type(exc).__name__, "message": str(exc)[:2000]}
    reply["id"] = request_id
    display({RPC_MIME: reply}, raw=True)
