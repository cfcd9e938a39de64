"""What a learner's call put on the GPU, recorded in the learner's process and replayed in a clean one.

On a GPU the verdict process (:mod:`mlsys.grader.decide.trusted`) does not time the learner's function in the
learner's process, where every clock, trace and record can be rewritten by an answer cell. Instead:

1. the learner's worker calls the function once on inputs from the verdict's seeds and records, in
   order, every aten op it dispatched (a ``TorchDispatchMode``) and every Triton kernel it launched
   (the compiled kernel's PTX and metadata, its grid and its arguments), as plain data: a *plan*
   (:func:`record_call`);
2. a replay worker, which has never executed an answer cell, rebuilds the plan (:class:`Replay`):
   each kernel is compiled again from its PTX with Triton's own ``ptxas`` (so no binary of the
   learner's, such as a kernel lifted from a vendor library, is ever loaded) and each aten op is called
   by its name;
3. the timed rounds run the replay on inputs that are new for every call, in the replay worker, traced
   there: what ran on the GPU is known from a process the learner's code never reached, and the time is
   the time of exactly that work.

Nothing in the plan can make the replay do more than run aten ops and the learner's own kernels: a plan
is JSON (no pickles, no code), ops outside the ``aten`` namespace and ops that reach files are refused,
and every output of the replay is checked against the verdict's reference. A plan that leaves out part
of the work (a library called outside aten, such as CuPy; a cached result; a hidden side stream; a
forged record) replays to a wrong result and is refused; a plan that adds work only costs its author
time. A function whose launches depend on its input *values* (not their shapes) replays wrongly too:
that is said in the refusal.

Plan format (version :data:`PLAN_VERSION`)::

    {"version": 1, "inputs": n, "values": total, "output": idx,
     "externals": [{"value": idx, "dtype": "float32", "shape": [...], "blob": i}],
     "kernels": [{"name": str, "metadata": json-text, "signature": {param: type}, "ptx": text}],
     "steps": [{"aten": "empty", "overload": "memory_format", "args": [...], "kwargs": {...}, "out": [idx...]},
               {"launch": k, "grid": [x, y, z], "args": [...]}]}

An encoded argument is a JSON scalar, a list, or one of ``{"t": idx}`` (a tensor value),
``{"dtype": name}``, ``{"device": name}``, ``{"layout": name}``, ``{"memory_format": name}``,
``{"float": "inf"}`` and, in a launch, ``{"desc": {field: arg}}`` (a host TMA descriptor,
``triton.tools.tensor_descriptor.TensorDescriptor``). Externals are tensors the call used but did not make
(module-level constants): their bytes travel with the plan, at most :data:`MAX_EXTERNAL_BYTES` in all.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["PLAN_VERSION", "MAX_EXTERNAL_BYTES", "ReplayError", "record_call", "Replay", "plan_ops", "plan_kernels"]

PLAN_VERSION = 1

MAX_EXTERNAL_BYTES = 64 << 20
"""Bytes of tensors a call may use without making them (a constant table, a workspace): beyond, refused."""

REFUSED_ATEN = ("file", "save", "load")
"""Substrings of aten op names a replay never calls (``aten::from_file`` reads a file)."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,200}$")


class ReplayError(Exception):
    """The call cannot be recorded or the plan cannot be replayed; the message says why, for the learner."""


# ---------------------------------------------------------------------------------------------------------
# recording (in the learner's worker: everything here is evidence, checked by replaying it)


class _Values:
    """The tensors of one recorded call, numbered in the order they appear (the inputs first)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.ids: dict[int, int] = {}
        self.keep: list[Any] = []  # held until the call ends, so no id() is reused
        self.externals: list[dict[str, Any]] = []
        self.blobs: list[bytes] = []
        self.external_bytes = 0

    def add(self, t: Any) -> int:
        idx = len(self.keep)
        self.ids[id(t)] = idx
        self.keep.append(t)
        return idx

    def ref(self, t: Any) -> int:
        idx = self.ids.get(id(t))
        return self.external(t) if idx is None else idx

    def external(self, t: Any) -> int:
        """A tensor the call did not make: its values travel with the plan."""
        from mlsys.grader.clean.perfwire import DTYPES, tensor_bytes

        dtype = str(t.dtype).removeprefix("torch.")
        if dtype not in DTYPES:
            raise ReplayError(f"the call used a {dtype} tensor it did not make; only {', '.join(DTYPES)} can be replayed")
        self.external_bytes += t.numel() * t.element_size()
        if self.external_bytes > MAX_EXTERNAL_BYTES:
            raise ReplayError(f"the call used more than {MAX_EXTERNAL_BYTES >> 20} MiB of tensors it did not make "
                              "(made before the call and kept): make them inside the function")
        desc, blob = tensor_bytes(t.detach().contiguous())
        idx = self.add(t)
        self.externals.append({"value": idx, "dtype": dtype, "shape": list(t.shape), "blob": len(self.blobs),
                               "nbytes": desc["nbytes"]})
        self.blobs.append(blob)
        return idx


def _encode(torch: Any, vals: _Values, x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return {"t": vals.ref(x)}
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else {"float": repr(x)}
    if isinstance(x, (list, tuple)):
        return [_encode(torch, vals, y) for y in x]
    for kind, cls in (("dtype", torch.dtype), ("layout", torch.layout), ("memory_format", torch.memory_format)):
        if isinstance(x, cls):
            return {kind: str(x).removeprefix("torch.")}
    if isinstance(x, torch.device):
        return {"device": str(x)}
    if _is_descriptor(x):
        import dataclasses

        return {"desc": {f.name: _encode(torch, vals, getattr(x, f.name)) for f in dataclasses.fields(x)}}
    raise ReplayError(f"the call passed a {type(x).__module__}.{type(x).__qualname__} to an op or kernel; "
                      "only tensors, numbers, strings, dtypes, devices and TMA descriptors can be replayed")


def _is_descriptor(x: Any) -> bool:
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except Exception:
        return False
    return type(x) is TensorDescriptor


def _flat(x: Any) -> list[Any]:
    """The leaves of an op's result in order (tensors and the rest)."""
    if isinstance(x, (list, tuple)):
        return [leaf for y in x for leaf in _flat(y)]
    return [x]


def _kernel_entry(ck: Any) -> dict[str, Any]:
    """What a replay needs of a compiled Triton kernel: its PTX, Triton's metadata file and its signature."""
    from pathlib import Path

    meta = next((Path(p) for name, p in ck.metadata_group.items() if name.endswith(".json")), None)
    if meta is None or "ptx" not in ck.asm:
        raise ReplayError(f"Triton kernel {ck.name}: no PTX or metadata to replay it from")
    signature = getattr(getattr(ck, "src", None), "signature", None)
    if not isinstance(signature, dict):
        raise ReplayError(f"Triton kernel {ck.name}: no signature")
    return {"name": str(ck.name), "metadata": meta.read_text(), "signature": {str(k): str(v) for k, v in signature.items()},
            "ptx": str(ck.asm["ptx"])}


def record_call(torch: Any, fn: Any, args: tuple, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any], list[bytes]]:
    """Call ``fn(*args, **kwargs)`` once and record its plan: (result, plan, external blobs).

    Raises :class:`ReplayError` for what cannot be replayed (an argument of another type, a result the call
    did not make), and whatever the call itself raises."""
    from triton.compiler.compiler import CompiledKernel

    vals = _Values(torch)
    for a in args:
        vals.add(a)
    steps: list[dict[str, Any]] = []
    kernels: list[dict[str, Any]] = []
    kernel_index: dict[int, int] = {}
    state = {"busy": False}

    run_prop = CompiledKernel.__dict__["run"]

    def recording_run(ck: Any) -> Any:
        real = run_prop.__get__(ck, CompiledKernel)

        def launch(gx: int, gy: int, gz: int, stream: Any, function: Any, packed: Any, meta: Any,
                   enter: Any, exit_: Any, *kargs: Any) -> Any:
            if not state["busy"]:
                state["busy"] = True
                try:
                    k = kernel_index.get(id(ck))
                    if k is None:
                        k = kernel_index[id(ck)] = len(kernels)
                        kernels.append(_kernel_entry(ck))
                    types = list(kernels[k]["signature"].values())
                    enc = [None if i < len(types) and types[i] == "constexpr" else _encode(torch, vals, a)
                           for i, a in enumerate(kargs)]
                    steps.append({"launch": k, "grid": [int(gx), int(gy), int(gz)], "args": enc})
                finally:
                    state["busy"] = False
            return real(gx, gy, gz, stream, function, packed, meta, enter, exit_, *kargs)
        return launch

    CompiledKernel.run = property(recording_run)
    try:
        with _recording_mode(torch, vals, steps, state):
            out = fn(*args, **kwargs)
        state["busy"] = True
        if not isinstance(out, torch.Tensor):
            raise ReplayError(f"the function returned a {type(out).__qualname__}, not a tensor")
        idx = vals.ids.get(id(out))
        if idx is None:
            raise ReplayError("the function returned a tensor that neither came in nor was made by the recorded call")
    finally:
        CompiledKernel.run = run_prop
    plan = {"version": PLAN_VERSION, "inputs": len(args), "values": len(vals.keep), "output": idx,
            "externals": vals.externals, "kernels": kernels, "steps": steps}
    return out, plan, vals.blobs


def _recording_mode(torch: Any, vals: Any, steps: list[dict[str, Any]], state: dict[str, bool]) -> Any:
    """A dispatch mode that appends each aten op the call runs to ``steps`` (its name, overload, encoded arguments
    and outputs), except those run while ``state["busy"]`` (the recorder's own work, a kernel launch's)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if state["busy"]:
                return out
            ns, _, name = func._schema.name.partition("::")
            state["busy"] = True
            try:
                step = {"aten": name if ns == "aten" else f"{ns}::{name}", "overload": func._overloadname,
                        "args": _encode(torch, vals, list(args)), "kwargs": {k: _encode(torch, vals, v) for k, v in kwargs.items()}}
                step["out"] = [vals.add(t) if isinstance(t, torch.Tensor) else None for t in _flat(out)]
                steps.append(step)
            finally:
                state["busy"] = False
            return out

    return Record()


def plan_ops(plan: dict[str, Any]) -> list[str]:
    """The aten op names a plan runs (``mm``, ``empty``, ...), in order, without repeats."""
    seen: list[str] = []
    for s in plan.get("steps", []):
        if "aten" in s and s["aten"] not in seen:
            seen.append(str(s["aten"]))
    return seen


def plan_kernels(plan: dict[str, Any]) -> list[str]:
    """The names of the Triton kernels a plan launches."""
    return [str(k.get("name")) for k in plan.get("kernels", [])]


# ---------------------------------------------------------------------------------------------------------
# replay (in a worker that never ran an answer cell: nothing here trusts the plan)


def _ptxas(ptx: str, capability: int, fp_fusion: bool) -> bytes:
    """The cubin of ``ptx`` by Triton's own ptxas (the flags Triton's NVIDIA backend uses)."""
    import os
    import subprocess
    import tempfile

    from triton.backends.nvidia import compiler as nv

    arch = nv.sm_arch_from_capability(capability)
    with tempfile.TemporaryDirectory(prefix="mlsys-replay-") as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w", encoding="utf-8") as f:
            f.write(ptx)
        cmd = [nv.get_ptxas(capability).path, "-lineinfo", *([] if fp_fusion else ["--fmad=false"]),
               f"--gpu-name={arch}", src, "-o", out]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired as exc:
            raise ReplayError("ptxas ran past 120 s on a kernel's PTX") from exc
        if r.returncode != 0:
            raise ReplayError(f"ptxas refused a kernel's PTX: {r.stderr.strip()[:300]}")
        with open(out, "rb") as f:
            return f.read()


class _Kernel:
    """One of the plan's kernels, compiled here from its PTX and loaded through Triton's own launcher."""

    def __init__(self, entry: dict[str, Any], capability: int, workdir: str) -> None:
        import os
        from types import SimpleNamespace

        from triton.compiler.compiler import CompiledKernel

        try:
            meta = json.loads(entry["metadata"])
            name, ptx, sig = meta["name"], str(entry["ptx"]), dict(entry["signature"])
            target = meta["target"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ReplayError(f"a kernel entry of the plan is malformed ({type(exc).__name__}: {exc})") from exc
        if not (isinstance(name, str) and _NAME.match(name)) or not all(isinstance(v, str) for v in sig.values()):
            raise ReplayError("a kernel entry of the plan has a malformed name or signature")
        if target != {"backend": "cuda", "arch": capability, "warp_size": 32}:
            raise ReplayError(f"kernel {name} was compiled for {target}, not this GPU (cuda, {capability}, 32)")
        if not re.search(rf"\.entry\s+{re.escape(name)}\s*\(", ptx):
            raise ReplayError(f"kernel {name}: its PTX has no entry of that name")
        cubin = _ptxas(ptx, capability, bool(meta.get("enable_fp_fusion", True)))
        os.makedirs(workdir, exist_ok=True)
        paths = {f"{name}.json": os.path.join(workdir, f"{name}.json"), f"{name}.cubin": os.path.join(workdir, f"{name}.cubin")}
        with open(paths[f"{name}.json"], "w", encoding="utf-8") as f:
            f.write(entry["metadata"])
        with open(paths[f"{name}.cubin"], "wb") as f:
            f.write(cubin)
        src = SimpleNamespace(signature=sig, constants={}, fn=SimpleNamespace(arg_names=list(sig)))
        try:
            self.ck = CompiledKernel(src, paths, "replay")
            self.run = self.ck.run  # loads the module; raises for a kernel this GPU cannot hold
        except Exception as exc:
            raise ReplayError(f"kernel {name} could not be loaded: {type(exc).__name__}: {str(exc)[:200]}") from exc
        self.name = name


class Replay:
    """A plan made callable: ``Replay(torch, plan, blobs)(*inputs)`` runs its steps on ``inputs`` and returns
    the output tensor. Built once per plan (kernels compiled and loaded), then called for every timed call."""

    def __init__(self, torch: Any, plan: dict[str, Any], blobs: list[bytes], device: str = "cuda") -> None:
        import tempfile

        self.torch, self.device = torch, device
        if not isinstance(plan, dict) or plan.get("version") != PLAN_VERSION:
            raise ReplayError(f"not a plan of version {PLAN_VERSION}")
        try:
            self.n_inputs, self.n_values, self.output = int(plan["inputs"]), int(plan["values"]), int(plan["output"])
            steps, externals, kernels = list(plan["steps"]), list(plan["externals"]), list(plan["kernels"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ReplayError(f"the plan is malformed ({type(exc).__name__}: {exc})") from exc
        if not 0 <= self.output < self.n_values or not 0 <= self.n_inputs <= self.n_values <= 1_000_000:
            raise ReplayError("the plan's value numbers are out of range")
        self.externals = [(self._index(e.get("value")), self._external(e, blobs)) for e in externals]
        self.kernels: list[_Kernel] = []
        if kernels:
            import triton

            capability = self._capability()
            triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=device))
            self._workdir = tempfile.TemporaryDirectory(prefix="mlsys-replay-")
            self.kernels = [_Kernel(k, capability, f"{self._workdir.name}/{i}") for i, k in enumerate(kernels)]
        self.steps = [self._compile(s) for s in steps]

    def _capability(self) -> int:
        major, minor = self.torch.cuda.get_device_capability()
        return major * 10 + minor

    def _index(self, i: Any) -> int:
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < self.n_values:
            raise ReplayError(f"the plan names value {i!r}, outside 0..{self.n_values - 1}")
        return i

    def _external(self, e: dict[str, Any], blobs: list[bytes]) -> Any:
        from mlsys.grader.clean.perfwire import tensor_from_bytes

        try:
            blob = blobs[int(e["blob"])]
            t = tensor_from_bytes({"dtype": e["dtype"], "shape": e["shape"], "nbytes": len(blob)}, blob)
        except Exception as exc:
            raise ReplayError(f"an external tensor of the plan is malformed ({type(exc).__name__}: {exc})") from exc
        return t.to(self.device)

    def _getter(self, x: Any) -> Any:
        """A function of the value table that rebuilds the encoded argument ``x``."""
        torch = self.torch
        if isinstance(x, list):
            parts = [self._getter(y) for y in x]
            return lambda vals: [p(vals) for p in parts]
        if isinstance(x, dict):
            if set(x) == {"t"}:
                i = self._index(x["t"])
                return lambda vals: vals[i]
            if set(x) == {"float"} and x["float"] in ("inf", "-inf", "nan"):
                f = float(x["float"])
                return lambda vals: f
            if set(x) == {"device"} and isinstance(x["device"], str) and re.match(r"^(cuda|cpu)(:\d+)?$", x["device"]):
                dev = torch.device(x["device"])
                return lambda vals: dev
            for kind, cls in (("dtype", torch.dtype), ("layout", torch.layout), ("memory_format", torch.memory_format)):
                if set(x) == {kind}:
                    obj = getattr(torch, str(x[kind]), None) if _NAME.match(str(x[kind])) else None
                    if not isinstance(obj, cls):
                        raise ReplayError(f"the plan names an unknown {kind} {x[kind]!r}")
                    return lambda vals, obj=obj: obj
            if set(x) == {"desc"} and isinstance(x["desc"], dict):
                from triton.tools.tensor_descriptor import TensorDescriptor

                fields = {k: self._getter(v) for k, v in x["desc"].items() if _NAME.match(str(k))}
                return lambda vals: TensorDescriptor(**{k: g(vals) for k, g in fields.items()})
            raise ReplayError(f"the plan holds an argument this replay does not know: {str(x)[:80]}")
        if x is None or isinstance(x, (bool, int, float, str)):
            return lambda vals: x
        raise ReplayError(f"the plan holds an argument of type {type(x).__name__}")

    def _compile(self, s: dict[str, Any]) -> Any:
        torch = self.torch
        if not isinstance(s, dict):
            raise ReplayError("a step of the plan is not an object")
        if "launch" in s:
            k = s["launch"]
            if not isinstance(k, int) or not 0 <= k < len(self.kernels):
                raise ReplayError(f"a launch names kernel {k!r}, which the plan does not hold")
            grid = s.get("grid")
            if not (isinstance(grid, list) and len(grid) == 3 and all(type(g) is int and 0 <= g < 2**31 for g in grid)):
                raise ReplayError(f"a launch of {self.kernels[k].name} has a malformed grid {grid!r}")
            kernel, args = self.kernels[k], self._getter(list(s.get("args") or []))
            from triton.runtime.driver import driver

            def launch(vals: list[Any]) -> None:
                stream = driver.active.get_current_stream(driver.active.get_current_device())
                kernel.run(grid[0], grid[1], grid[2], stream, kernel.ck.function, kernel.ck.packed_metadata,
                           None, None, None, *args(vals))
            return launch
        name, overload = str(s.get("aten", "")), str(s.get("overload", "default"))
        if not _NAME.match(name) or not _NAME.match(overload):
            raise ReplayError(f"the plan calls {name!r}, which is no aten op (only aten ops are replayed)")
        if any(bad in name for bad in REFUSED_ATEN):
            raise ReplayError(f"the plan calls aten::{name}, which a replay never runs")
        try:
            op = getattr(getattr(torch.ops.aten, name), overload)
        except (AttributeError, RuntimeError) as exc:
            raise ReplayError(f"aten::{name}.{overload} does not exist here") from exc
        args, kwargs = self._getter(list(s.get("args") or [])), {k: self._getter(v) for k, v in (s.get("kwargs") or {}).items()}
        outs = [None if o is None else self._index(o) for o in (s.get("out") or [])]

        def call(vals: list[Any]) -> None:
            res = _flat(op(*args(vals), **{k: g(vals) for k, g in kwargs.items()}))
            for i, t in zip(outs, res, strict=False):
                if i is not None:
                    vals[i] = t
        return call

    def __call__(self, *inputs: Any) -> Any:
        if len(inputs) != self.n_inputs:
            raise ReplayError(f"the plan takes {self.n_inputs} inputs, got {len(inputs)}")
        vals: list[Any] = [None] * self.n_values
        vals[:self.n_inputs] = inputs
        for i, t in self.externals:
            vals[i] = t
        for step in self.steps:
            step(vals)
        out = vals[self.output]
        if out is None:
            raise ReplayError("the plan's output was never made")
        return out
