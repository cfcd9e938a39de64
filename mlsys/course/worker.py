"""The worker side of the grader's channel: runs in the learner's kernel, answers with plain data.

The grader process (:mod:`mlsys.course.cellrunner`) sends one request per execution, as the call
``mlsys.course.worker.serve(globals(), request, request_id)``; the reply is a display output of MIME
type :data:`mlsys.course.proxy.RPC_MIME`. Requests: ``get`` a global by name, ``call`` a handle with
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

from ..runtime.device import has_cuda
from . import watchdog
from .proxy import RPC_MIME, Rejected, decode, encode

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


def _recorder() -> Any:
    if sys.modules.get("torch") is None:
        return None
    from .checks import dispatch_recorder

    return dispatch_recorder()


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
            rec = _recorder()
            if rec is None:
                result = fn(*args, **kwargs)
                ops: list[str] = []
            else:
                with rec:
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
        if rec is None:
            return self.fn(*args, **kwargs)
        with rec:
            try:
                return self.fn(*args, **kwargs)
            finally:
                self.recorded_ops |= rec.ops


HELPERS = ("run_guarded", "call_checked", "calls_of", "running_sums_probe", "ring_runs", "tagged_runs", "dp_runs")
"""The worker-side halves of the course's checks (:mod:`mlsys.course.checks`) a grader may ask for by name."""


def _helper(name: str) -> Any:
    from . import checks

    if name not in HELPERS:
        raise ValueError(f"unknown helper {name!r}")
    return {"run_guarded": checks.worker_run_guarded, "call_checked": checks.worker_call_checked,
            "calls_of": checks.calls_of, "running_sums_probe": checks.running_sums_probe,
            "ring_runs": checks.worker_ring_runs, "tagged_runs": checks.worker_tagged_runs,
            "dp_runs": checks.worker_dp_runs}[name]


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
