"""The narrow channel between the grader process and the learner's kernel: plain data only.

Test cells run in the grader process (:mod:`mlsys.grader.learnerside.cellrunner`), an interpreter that never
executes an answer cell; the learner's functions and values live in the worker kernel. This module
is the codec both sides use, and the grader's stand-ins for what stays in the worker:

* values cross as **plain data**: ``None``, booleans, integers, floats, strings, lists, tuples, dicts
  with string or integer keys, exact ``torch.Tensor`` and ``numpy.ndarray`` objects (rebuilt on the
  other side from their raw bytes, dtype and shape, written to a file in the sandbox's private
  ``/tmp``), quantities of the course's unit registry (a magnitude and a unit string), and objects of
  the course's own classes (``mlsys.*``, e.g. ``Roof``, ``viz.Point``), which the grader rebuilds
  with its own constructor from their fields. Nothing is pickled; the grader never calls a method of
  a learner object;
* everything else (a function, a Triton kernel, an object of a learner's class, a tensor subclass)
  stays in the worker, and the grader holds a :class:`RemoteFunction` or :class:`RemoteObject`
  handle: calling it ships the arguments as plain data and returns the result as plain data, with the
  torch operations the call dispatched (:attr:`RemoteFunction.ops`), recorded by the worker harness
  (:mod:`mlsys.grader.learnerside.worker`);
* a result that claims to be something it is not (a tensor subclass, a class whose ``__module__``
  says ``torch``) crosses as :class:`Rejected`, which every check refuses.

The worker is learner-controlled: what it sends is only ever *the learner's answer*, which the
grader's own checks then judge. See the trust model in docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import importlib
import math
import os
import secrets
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["Rejected", "RemoteFunction", "RemoteObject", "LearnerCodeError", "encode", "decode", "RPC_MIME",
           "RPC_DIR", "ZERO_PAD", "HARNESS", "zero_padded"]

RPC_MIME = "application/x-mlsys-rpc+json"
RPC_DIR = Path(os.environ.get("TMPDIR", "/tmp")) / "mlsys-rpc"
MAX_DEPTH = 12
MAX_ITEMS = 100_000
REBUILDABLE = ("mlsys.roofline", "mlsys.viz", "mlsys.tiling", "mlsys.fusion", "mlsys.layers", "mlsys.comm",
               "mlsys.hardware", "mlsys.overhead", "mlsys.memory_access", "mlsys.occupancy")
"""Modules whose classes cross by value: the grader rebuilds them with its own constructors."""
ZERO_PAD = "_mlsys_zero_pad"
"""Attribute :func:`mlsys.labkit.checks.in_zero_padding` sets on the tensor it returns: the tensor crosses
as its bytes and is rebuilt inside zero-filled memory of that many extra elements on the other side."""
MAX_PAD = 1 << 20


RECORD_OVERFLOW = "py:(more library functions than the record holds)"
"""In a call's record (:class:`mlsys.grader.learnerside.worker.CallRecorder`): too many library functions were called to list."""
TO_NUMPY = "py:torch.Tensor.numpy"
"""In a call's record: a tensor's data taken out of torch (``.numpy()``, ``.tolist()``, ``numpy.asarray``), where
what is done with it is no longer recorded."""

HARNESS = [0]
"""Above 0 while the course's checks do their own torch work inside a learner's call (allocating guard buffers
for what it allocates, mapping the addresses its loads touch): the worker's op record leaves those out."""


def zero_padded(t: Any, pad: int) -> Any:
    """A contiguous copy of tensor ``t`` at the start of a zero-filled buffer ``pad`` elements longer, marked
    (:data:`ZERO_PAD`) so that it is rebuilt the same way on the other side of the channel."""
    import torch

    buf = torch.zeros(t.numel() + pad, dtype=t.dtype, device=t.device)
    view = buf[:t.numel()].view(t.shape)
    view.copy_(t)
    setattr(view, ZERO_PAD, pad)
    return view


class LearnerCodeError(AssertionError):
    """The learner's code raised, or its kernel could not answer (a test cell scores zero)."""


class Rejected:
    """A value that was not what it claimed to be; every check refuses it."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __repr__(self) -> str:
        return f"<rejected: {self.what}>"


def _blob(raw: bytes) -> str:
    RPC_DIR.mkdir(parents=True, exist_ok=True)
    path = RPC_DIR / (secrets.token_hex(12) + ".bin")
    path.write_bytes(raw)
    return path.name


def _read_blob(name: str) -> bytes:
    if not isinstance(name, str) or "/" in name or not name.endswith(".bin"):
        raise ValueError(f"bad blob name {name!r}")
    path = RPC_DIR / name
    try:  # a regular file, never through a link (the sender could point one at /proc/<grader>/fd/...)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError(f"blob {name!r} is not a regular file")
            with os.fdopen(fd, "rb", closefd=False) as fh:
                return fh.read()
        finally:
            os.close(fd)
    finally:
        path.unlink(missing_ok=True)


def encode(x: Any, handle: Callable[[Any], dict[str, Any]], depth: int = 0) -> dict[str, Any]:
    """``x`` as tagged plain data; what is not plain data becomes ``handle(x)`` (a reference)."""
    if depth > MAX_DEPTH:
        return {"t": "rejected", "what": "nested too deeply"}
    t = type(x)
    if x is None or t in (bool, int, str):
        return {"t": "v", "v": x}
    if t is float:
        return {"t": "float", "v": repr(x)} if not math.isfinite(x) else {"t": "v", "v": x}
    if t in (list, tuple):
        if len(x) > MAX_ITEMS:
            return {"t": "rejected", "what": f"a {t.__name__} of {len(x)} items"}
        return {"t": t.__name__, "v": [encode(v, handle, depth + 1) for v in x]}
    if t is dict:
        if len(x) > MAX_ITEMS or not all(type(k) in (str, int) for k in x):
            return {"t": "rejected", "what": "a dict with keys other than strings and integers"}
        return {"t": "dict", "k": list(x), "v": [encode(v, handle, depth + 1) for v in x.values()]}
    torch = sys.modules.get("torch")
    if torch is not None and t is torch.Tensor:
        return _encode_tensor(torch, x)
    triton = sys.modules.get("triton")
    if triton is not None and t is getattr(triton, "Config", None):
        fields = {k: getattr(x, k, None) for k in ("num_warps", "num_stages", "num_ctas")}
        return {"t": "triton_config", "kwargs": encode(dict(x.kwargs), handle, depth + 1),
                "f": encode({k: v for k, v in fields.items() if type(v) is int}, handle, depth + 1)}
    np = sys.modules.get("numpy")
    if np is not None and (t is np.ndarray or (isinstance(x, np.generic) and t.__module__ == "numpy"
                                               and x.dtype.kind in "biufc")):
        return _encode_numpy(np, x, handle, depth)
    units = sys.modules.get("mlsys.units")
    if units is not None and t is units.ureg.Quantity:
        return {"t": "quantity", "m": encode(x.magnitude, handle, depth + 1), "u": str(x.units)}
    mod = getattr(t, "__module__", "")
    if torch is not None and (isinstance(x, torch.Tensor) or str(mod).startswith("torch")) and not callable(x):
        return {"t": "rejected", "what": f"{mod}.{t.__qualname__} (not an exact torch.Tensor)"}
    if mod in REBUILDABLE and getattr(sys.modules.get(mod), t.__name__, None) is t and not callable(x):
        fields = dict(object.__getattribute__(x, "__dict__")) if hasattr(x, "__dict__") else {}
        return {"t": "course", "mod": mod, "cls": t.__name__,
                "f": encode({k: v for k, v in fields.items() if type(k) is str}, handle, depth + 1)}
    return handle(x)


def _encode_tensor(torch: Any, x: Any) -> dict[str, Any]:
    """An exact tensor as its raw bytes (copied to the CPU, contiguous) with dtype, shape, device and zero padding."""
    cpu = x.detach().to("cpu").contiguous()
    raw = cpu.view(-1).view(torch.uint8).numpy().tobytes() if cpu.numel() else b""
    out = {"t": "tensor", "dtype": str(cpu.dtype).removeprefix("torch."), "shape": list(cpu.shape),
           "device": x.device.type, "blob": _blob(raw)}
    pad = x.__dict__.get(ZERO_PAD) if hasattr(x, "__dict__") else None
    if type(pad) is int and 0 < pad <= MAX_PAD:  # checks.in_zero_padding: rebuilt in zero-filled memory there too
        out["pad"] = pad
    return out


def _encode_numpy(np: Any, x: Any, handle: Callable[[Any], dict[str, Any]], depth: int) -> dict[str, Any]:
    """An exact numpy array as its raw bytes (numbers only: dtype kinds b, i, u, f, c), or a numpy scalar of a
    number's dtype."""
    if type(x) is np.ndarray:
        if x.dtype.kind not in "biufc":
            return {"t": "rejected", "what": f"an array of dtype {x.dtype}"}
        return {"t": "ndarray", "dtype": x.dtype.str, "shape": list(x.shape), "blob": _blob(np.ascontiguousarray(x).tobytes())}
    return {"t": "npscalar", "dtype": x.dtype.str, "v": encode(x.item(), handle, depth + 1)}


def _decode_triton_config(d: dict[str, Any], ref: Callable[[dict[str, Any]], Any], depth: int) -> Any:
    """A ``triton.Config`` rebuilt from numbers only (its kwargs, and num_warps, num_stages, num_ctas)."""
    import triton

    kwargs, fields = decode(d.get("kwargs"), ref, depth + 1), decode(d.get("f"), ref, depth + 1)
    if not isinstance(kwargs, dict) or not isinstance(fields, dict) or not all(
            type(v) in (int, bool, float) for v in [*kwargs.values(), *fields.values()]):
        return Rejected("a triton.Config with fields other than numbers")
    return triton.Config(kwargs, **{k: v for k, v in fields.items() if k in ("num_warps", "num_stages", "num_ctas")})


def decode(d: Any, ref: Callable[[dict[str, Any]], Any], depth: int = 0) -> Any:
    """The value that :func:`encode` described; references become ``ref(d)``. Calls no code of the sender."""
    if depth > MAX_DEPTH or not isinstance(d, dict):
        return Rejected("malformed")
    t = d.get("t")
    if t == "v":
        v = d.get("v")
        return v if v is None or type(v) in (bool, int, str, float) else Rejected("malformed")
    if t == "float":
        return float(d["v"]) if d.get("v") in ("nan", "inf", "-inf") else Rejected("malformed")
    if t in ("list", "tuple"):
        items = [decode(v, ref, depth + 1) for v in d.get("v", [])]
        return items if t == "list" else tuple(items)
    if t == "dict":
        keys = d.get("k", [])
        if not all(type(k) in (str, int) for k in keys):
            return Rejected("malformed")
        return dict(zip(keys, (decode(v, ref, depth + 1) for v in d.get("v", [])), strict=False))
    if t == "tensor":
        return _decode_tensor(d)
    if t == "triton_config":
        return _decode_triton_config(d, ref, depth)
    if t in ("ndarray", "npscalar"):
        return _decode_numpy(d, ref, depth)
    if t == "quantity":
        from mlsys.units import ureg

        m = decode(d["m"], ref, depth + 1)
        try:
            return ureg.Quantity(m, ureg.parse_units(str(d["u"])))
        except Exception as exc:  # noqa: BLE001 - a unit the course's registry does not know
            return Rejected(f"a quantity in unknown units {str(d['u'])[:40]!r} ({type(exc).__name__})")
    if t == "course":
        return _rebuild(str(d.get("mod")), str(d.get("cls")), decode(d.get("f"), ref, depth + 1))
    if t == "rejected":
        return Rejected(str(d.get("what", "?"))[:200])
    if t == "handle":
        return ref(d)
    return Rejected("malformed")


def _decode_tensor(d: dict[str, Any]) -> Any:
    """A tensor rebuilt from its raw bytes (a dtype of torch's, on the CPU or CUDA, zero-padded where asked);
    a tensor of another dtype or device is :class:`Rejected`."""
    import torch

    dtype = getattr(torch, str(d["dtype"]), None)
    if not isinstance(dtype, torch.dtype):
        return Rejected(f"a tensor of dtype {d['dtype']!r}")
    raw = bytearray(_read_blob(d["blob"]))
    shape = [int(s) for s in d["shape"]]
    flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    out = flat.view(dtype).reshape(shape) if raw else torch.empty(shape, dtype=dtype)
    device = d.get("device", "cpu")
    if device not in ("cpu", "cuda"):  # a "meta" tensor has a shape and no values: never a result
        return Rejected(f"a tensor on device {str(device)[:20]!r}")
    out = out.clone() if device == "cpu" else out.to(device)
    pad = d.get("pad")
    return zero_padded(out, pad) if type(pad) is int and 0 < pad <= MAX_PAD else out


def _decode_numpy(d: dict[str, Any], ref: Callable[[dict[str, Any]], Any], depth: int) -> Any:
    """A numpy array rebuilt from its raw bytes, or a numpy scalar; numbers only (dtype kinds b, i, u, f, c)."""
    import numpy as np

    if d.get("t") == "ndarray":
        dtype = np.dtype(str(d["dtype"]))
        if dtype.kind not in "biufc":
            return Rejected(f"an array of dtype {dtype}")
        return np.frombuffer(_read_blob(d["blob"]), dtype=dtype).reshape([int(s) for s in d["shape"]]).copy()
    dtype = np.dtype(str(d["dtype"]))
    v = decode(d["v"], ref, depth + 1)
    return dtype.type(v) if dtype.kind in "biufc" and type(v) in (bool, int, float, complex) else Rejected("malformed")


def _rebuild(mod: str, cls_name: str, fields: Any) -> Any:
    """An object of a course class, built by the grader's own constructor from plain fields."""
    import dataclasses
    import inspect

    if mod not in REBUILDABLE or not isinstance(fields, dict):
        return Rejected(f"an object of {mod}.{cls_name}")
    cls = getattr(importlib.import_module(mod), cls_name, None)
    if not isinstance(cls, type) or getattr(cls, "__module__", "") != mod:
        return Rejected(f"an object of {mod}.{cls_name}")
    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls) if f.init]
    else:
        names = [p for p in inspect.signature(cls).parameters if p != "self"]
    try:
        return cls(**{k: fields[k] for k in names if k in fields})
    except Exception as exc:  # noqa: BLE001 - fields that the course's constructor refuses
        return Rejected(f"a {cls_name} the course could not rebuild ({type(exc).__name__}: {str(exc)[:120]})")


class RemoteObject:
    """A learner object that stays in the worker; attributes are fetched as plain data."""

    def __init__(self, rpc: Any, ref: dict[str, Any]) -> None:
        object.__setattr__(self, "_rpc", rpc)
        object.__setattr__(self, "_ref", ref)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._rpc.getattr(self._ref, name)

    def __repr__(self) -> str:
        return f"<learner object of type {str(self._ref.get('type', '?'))[:60]}>"


class RemoteFunction(RemoteObject):
    """A learner function that stays in the worker: calls ship plain data both ways.

    ``ops`` collects the torch operations (``aten::mm``, ``c10d::allreduce_``, ...) that calls made
    through this handle dispatched, as the worker harness recorded them.
    """

    def __init__(self, rpc: Any, ref: dict[str, Any]) -> None:
        super().__init__(rpc, ref)
        object.__setattr__(self, "ops", set())
        object.__setattr__(self, "__name__", str(ref.get("name") or "function"))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._rpc.call(self, args, kwargs)

    def run_helper(self, helper: str, *args: Any, **kwargs: Any) -> Any:
        """``helper(this function, *args, **kwargs)`` run by the worker, one of the course's worker-side
        halves (:data:`mlsys.grader.learnerside.worker.HELPERS`); its result comes back as plain data and the ops it
        dispatched count for this function."""
        return self._rpc.call(self, args, kwargs, helper=helper)

    def __repr__(self) -> str:
        return f"<learner function {self.__name__}>"
