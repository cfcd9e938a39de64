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
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            self.ops.add(str(getattr(func, "_schema", func).name) if hasattr(func, "_schema") else str(func))
            return func(*args, **(kwargs or {}))

    return Record()


def _answer(ns: dict[str, Any], req: dict[str, Any]) -> dict[str, Any]:
    op = req.get("op")
    if op == "get":
        name = str(req["name"])
        if name not in ns:
            return {"missing": name}
        return {"ok": encode(ns[name], _handle)}
    if op == "getattr":
        return {"ok": encode(getattr(HANDLES[int(req["obj"])], str(req["name"])), _handle)}
    if op == "call":
        fn = HANDLES[int(req["fn"])]
        args = [decode(a, _ref) for a in req.get("args", [])]
        kwargs = {str(k): decode(v, _ref) for k, v in req.get("kwargs", {}).items()}
        if any(isinstance(a, Rejected) for a in [*args, *kwargs.values()]):
            raise TypeError("an argument could not be rebuilt in the worker")
        rec = _recorder()
        if rec is None:
            result = fn(*args, **kwargs)
            ops: list[str] = []
        else:
            with rec:
                result = fn(*args, **kwargs)
            ops = sorted(rec.ops)
        return {"ok": encode(result, _handle), "ops": ops}
    raise ValueError(f"unknown request {op!r}")


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
