"""A performance worker: the process that runs the calls the verdict process asks for.

``python -P -m mlsys.grader.clean.perfworker learner|baseline [--fake]`` is started by :mod:`mlsys.grader.decide.trusted`
(the verdict process) and speaks :mod:`mlsys.grader.clean.perfwire` on its standard input and output.
A *learner* worker executes the submission's answer cells and then runs the learner's function; a
*baseline* worker never sees an answer cell and runs the teacher's baseline expression. Both run the
same round loop (:func:`run_calls`), so the two are timed the same way, through the same wire.

Nothing a worker says is taken on trust: the verdict process times every round with its own clock,
regenerates every input from the seeds it chose, checks every output from its raw bytes and every
fingerprint against those bytes. In a learner worker all of this module is in the learner's reach;
what it reports (ops dispatched, kernels traced) is evidence to cross-check, not proof.

Messages (headers; see the verdict process for what it does with the answers):

- ``{"op": "setup", "cells": [...], "cell_timeout": s, "fake": bool}`` -> ``{"device", "notes"}``
- ``{"op": "arm"}`` -> ``{"armed": bool}`` (starts a kernel trace on a GPU, outside the timed window)
- ``{"op": "round", "fn": {...}, "shapes": [[...]], "dtype": "float16", "seeds": [...], "kwargs": {},
  "record_ops": bool, "send_outputs": bool, "send_inputs": bool, "same_storage": bool}`` -> ``{"done": true, "fingerprints": [...],
  "error": str, "ops": [...]}``, then (if asked) one message with every output's bytes, one with every
  input's bytes after the calls, then (if armed) one with
  the kernel trace ``{"kernels": {name: [count, microseconds]}}``
- ``{"op": "record", "fn": {"name"}, "shapes", "dtype", "seed", "kwargs"}`` (learner) -> ``{"plan": {...},
  "error": str, "tensors": [output, externals...]}`` and their bytes: one call recorded for replay
  (:func:`mlsys.grader.clean.replay.record_call`)
- ``{"op": "load", "plan": {...}, "tensors": [externals...]}`` (replay) -> ``{"loaded": token, "error": str}``: the
  plan built here (:class:`mlsys.grader.clean.replay.Replay`); ``{"replay": token}`` is then a function a round can time
- ``{"op": "exit"}``

A *replay* worker is a baseline worker by another name: it never sees an answer cell, and runs the plans the
verdict process hands it, so what a timed round on a GPU runs and traces is known from outside the learner's reach.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from mlsys.grader.clean import perfwire
from mlsys.labkit import policy
from mlsys.runtime.processes import set_dumpable

__all__ = ["make_inputs", "run_calls", "fingerprint", "exec_cells", "join_group", "op_name", "C10D_NAMESPACES", "main"]


HARNESS_ENV = "MLSYS_GRADER_HARNESS"
"""``light``: the grader's per-call work on a GPU is :mod:`mlsys.grader.clean.harnesskernels` (one Triton pass each
for the inputs and the fingerprint); anything else: torch's ops (Philox normals, float64 sum and norm).
The verdict process and its workers read it alike (the workers inherit its environment); a worker that
draws its inputs another way gets outputs the verdict's reference refuses.

Not the default: on an H200 the light harness cut the grader's device time per call about fivefold (Lab 3's
softmax: 430 us of fingerprint to under 40), but then a round of a 33 us kernel is bound by the host's
Python launches (100-300 us per call on the lent machine's CPU, varying from round to round), and Lab 3's
element-wise kernel earned full credit in 6 gradings of 10 (against 10 of 10 with torch's ops, whose
device work keeps the GPU the bottleneck): the verdict runs 5 and 6 of 2026-11-26 (git history of tests/gpu_runs)."""


def light_harness(device: str) -> bool:
    """Whether this process does the grader's per-call GPU work with :mod:`mlsys.grader.clean.harnesskernels`."""
    return device == "cuda" and os.environ.get(HARNESS_ENV, "") == "light"


def make_inputs(torch: Any, shapes: list[list[int]], dtype: Any, seed: int, device: str) -> tuple:
    """The inputs of one call from ``seed``: standard normal values (Philox), one kernel per input on a GPU
    (drawn in ``dtype`` itself), float32 then cast on a CPU; with the light harness (:data:`HARNESS_ENV`) one
    memory-bound Triton kernel per input (:func:`mlsys.grader.clean.harnesskernels.fresh_inputs`: uniform values
    of unit variance from a keyed hash of the index).

    The verdict process calls this with the same seed to rebuild the inputs it never received.
    """
    if light_harness(device):
        from mlsys.grader.clean import harnesskernels

        return harnesskernels.fresh_inputs(torch, shapes, dtype, int(seed))
    gen = torch.Generator(device=device).manual_seed(int(seed))
    if device == "cuda":
        return tuple(torch.empty(*s, device=device, dtype=dtype).normal_(generator=gen) for s in shapes)
    return tuple(torch.randn(*s, generator=gen, device=device, dtype=torch.float32).to(dtype) for s in shapes)


def build_function(torch: Any, spec: dict[str, Any], namespace: dict[str, Any] | None, device: str,
                   replays: dict[str, Any] | None = None) -> Any:
    """The callable a round times: the learner's (``{"name"}``), the teacher's expression
    (``{"expr", "args"}``), a copy of the inputs (``{"copy": true}``), an empty output (``{"empty": shape}``)
    or a loaded plan (``{"replay": token}``, replay workers only)."""
    if "replay" in spec:
        fn = (replays or {}).get(str(spec["replay"]))
        if fn is None:
            raise LookupError(f"no plan {spec['replay']!r} is loaded in this worker")
        return fn
    if "name" in spec:
        fn = (namespace or {}).get(spec["name"])
        if fn is None or not callable(fn):
            raise LookupError(f"no function {spec['name']}() is defined by the answer cells")
        return fn
    if spec.get("copy"):
        def copy(*args: Any) -> Any:
            outs = [torch.empty_like(a) for a in args]
            for o, a in zip(outs, args, strict=True):
                o.copy_(a)
            return outs[0]
        return copy
    if "empty" in spec:
        shape, dt = list(spec["empty"]), getattr(torch, spec.get("dtype", "float32"))
        return lambda *args: torch.empty(shape, dtype=dt, device=device)
    return eval(f"lambda {', '.join(spec['args'])}: {spec['expr']}", {"torch": torch})  # the teacher's spec


def run_calls(torch: Any, fn: Any, shapes: list[list[int]], dtype: Any, seeds: list[int], device: str,
              kwargs: dict[str, Any], record: Any = None, harness_time: list[float] | None = None,
              same_storage: bool = False, flush_l2: bool = False) -> tuple[list[Any], list[float], list[tuple]]:
    """One round: for each seed, fresh inputs (new storage, new values), one call, an exact-type check
    and a float64 fingerprint (:func:`fingerprint`) taken on the device; then the whole device is idle.
    Every call's inputs stay alive to the end of the round, so no two calls share an address.

    ``same_storage``: every call after the first gets its new values written into the first call's input
    tensors instead (the same addresses, shapes and strides, other values): a result cached by address is
    then stale, and wrong. The inputs returned are then the first call's tensors, holding the last values.

    With the light harness (:data:`HARNESS_ENV`) each call's fingerprint is one Triton pass that leaves
    float64 (sum, sum of squares) partials on the device (:func:`mlsys.grader.clean.harnesskernels.fingerprint_partials`); all of them are
    brought to the host in one copy once the device is idle, and summed there.

    ``flush_l2`` (a GPU): after each call's inputs are written, the L2 is swept by *reading* a buffer larger
    than it (:func:`l2_sweep`), so the call reads its inputs from DRAM and finds no dirty line of the input
    writes to write back in its own time (issue 43: a write-flush put +20% on a 14 us GEMV). The sweep is the
    grader's own work: it lies between the events that time input generation, so it is subtracted with it.

    Returns (outputs, fingerprints, inputs). Raises TypeError for a result that is not exactly ``torch.Tensor``.
    """
    outs, prints, inputs, marks = [], [], [], []
    cuda = device == "cuda"
    light = light_harness(device)
    timed = harness_time is not None and cuda
    if light:
        from mlsys.grader.clean import harnesskernels
    sweep = l2_sweep(device) if flush_l2 and cuda else (lambda: None)

    def mark() -> Any:
        if not timed:
            return None
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e
    for seed in seeds:
        m0 = mark()
        args = _call_inputs(torch, shapes, dtype, seed, device, inputs[0] if same_storage and inputs else None)
        sweep()
        m1 = mark()
        inputs.append(args)
        out = fn(*args, **kwargs) if record is None else record(fn, args, kwargs)
        if type(out) is not torch.Tensor:
            raise TypeError(f"the function returned a {type(out).__module__}.{type(out).__qualname__}; "
                            "expected exactly a torch.Tensor")
        outs.append(out)
        m2 = mark()
        prints.append(harnesskernels.fingerprint_partials(torch, out) if light else fingerprint(torch, out))
        marks.append((m0, m1, m2, mark()))
    if cuda:
        torch.cuda.synchronize()  # every stream of this process, until the device is idle
    pairs = harnesskernels.reduce_partials(torch, prints) if light else [[float(x) for x in p.tolist()] for p in prints]
    if timed:  # the GPU time of input generation and fingerprints alone (the grader's own work)
        harness_time.append(sum(a.elapsed_time(b) + c.elapsed_time(d) for a, b, c, d in marks) * 1e-3)
    return outs, pairs, inputs


def _call_inputs(torch: Any, shapes: list[list[int]], dtype: Any, seed: int, device: str, first: tuple | None) -> tuple:
    """One call's inputs drawn from ``seed``: new tensors, or (``first``: the round's first call's tensors) the new
    values written into those, so the addresses stay and only the values change."""
    args = make_inputs(torch, shapes, dtype, seed, device)
    if first is None:
        return args
    for old, new in zip(first, args, strict=True):
        old.copy_(new)
    return first


def l2_sweep(device: str) -> Any:
    """The read-only L2 flush of the course's timer (:func:`mlsys.bench.timing.l2_flusher`, mode ``"read"``:
    a sum over ``max(2 x L2, 256 MiB)``), for the current CUDA device; built once per process. One concept,
    one place: the grader's rounds clear the L2 as every recorded experiment does."""
    if device != "cuda":
        raise ValueError(f"the L2 sweep is for a CUDA device, got {device!r}")
    from mlsys.bench.timing import l2_flusher

    return l2_flusher(mode="read")


def fingerprint(torch: Any, out: Any) -> Any:
    """(sum, 2-norm) of ``out`` in float64, on its device, as one 2-element tensor (on a GPU the worker takes
    the same pair in one pass, :mod:`mlsys.grader.clean.harnesskernels`).

    The sum alone can be known without the output (a softmax's rows each sum to 1; the sum of ``a @ b``
    is ``a``'s column sums dotted with ``b``'s row sums, O(n^2) work); the 2-norm cannot be had for
    less than computing the output (``||a @ b||`` needs ``a^T a``, itself a matmul), so a worker that
    claims "done" before its outputs exist cannot give this pair."""
    o = out.detach()
    return torch.stack((torch.sum(o, dtype=torch.float64), torch.linalg.vector_norm(o, 2, dtype=torch.float64)))


_LAUNCHES: list[set[str] | None] = [None]
"""Where Triton interpreter launches are written while a checked call is recorded (CPU only)."""


def _count_triton_launches() -> None:
    """Under ``TRITON_INTERPRET=1``, note each kernel launch (``triton:<name>``) in the recording set."""
    try:
        from triton.runtime import interpreter
    except Exception:
        return
    original = interpreter.GridExecutor.__call__

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _LAUNCHES[0] is not None:
            _LAUNCHES[0].add("triton:" + str(getattr(getattr(self, "fn", None), "__name__", "?")))
        return original(self, *args, **kwargs)
    interpreter.GridExecutor.__call__ = call


C10D_NAMESPACES = policy.C10D_NAMESPACES
"""Operator namespaces of torch.distributed: their ops are recorded as ``namespace:name``."""


def op_name(schema_name: str) -> str:
    """``aten::mm`` -> ``mm``; ``c10d::allreduce_`` -> ``c10d::allreduce_`` (a collective keeps its namespace, in
    the one spelling of :mod:`mlsys.labkit.policy`, so a dispatched all-reduce is never mistaken for, or hidden
    behind, an aten op of the same name)."""
    ns, _, name = schema_name.rpartition("::")
    return f"{ns}::{name}" if ns in C10D_NAMESPACES else name


def _recorder(torch: Any, seen: set[str]) -> Any:
    """Call ``fn`` while recording every aten op it dispatches (torch.compile disabled) and every
    Triton launch under the interpreter."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            seen.add(op_name(func._schema.name))
            return func(*args, **(kwargs or {}))

    def record(fn: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        # torch.compile off, so compiled code shows its ops. Importing dynamo costs seconds: where nothing
        # imported it yet, the environment switch makes it start disabled if the call imports it.
        loaded = sys.modules.get("torch._dynamo.config")
        old = loaded.disable if loaded is not None else None
        old_env = os.environ.get("TORCHDYNAMO_DISABLE")
        if loaded is not None:
            loaded.disable = True
        os.environ["TORCHDYNAMO_DISABLE"] = "1"
        _LAUNCHES[0] = seen
        try:
            with Recorder():
                return fn(*args, **kwargs)
        finally:
            _LAUNCHES[0] = None
            if old_env is None:
                os.environ.pop("TORCHDYNAMO_DISABLE", None)
            else:
                os.environ["TORCHDYNAMO_DISABLE"] = old_env
            now = sys.modules.get("torch._dynamo.config")
            if now is not None:
                now.disable = bool(old) if loaded is not None else old_env == "1"
    return record


class _CellTimeout(BaseException):
    """An answer cell ran past its time limit."""


def exec_cells(cells: list[str], namespace: dict[str, Any], cell_timeout: float = 600.0) -> list[str]:
    """Run answer-cell sources in ``namespace`` (IPython syntax translated); errors are noted, not fatal."""
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


def join_group(torch: Any, spec: dict[str, Any], device: str) -> None:
    """Join this worker's process group: ``{"rank", "world", "port"}`` (gloo on a CPU, NCCL on GPU ``rank``).

    Called after the answer cells ran, so a group they made is replaced by the grader's."""
    from datetime import timedelta

    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    rank, world = int(spec["rank"]), int(spec["world"])
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # sandboxes often cannot resolve their hostname
    for key, value in {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}.items():
        os.environ.setdefault(key, value)
    kw: dict[str, Any] = {}
    if device == "cuda":
        torch.cuda.set_device(rank)
        kw["device_id"] = torch.device("cuda", rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{int(spec['port'])}",
                            rank=rank, world_size=world, timeout=timedelta(seconds=float(spec.get("timeout", 120))), **kw)


def _kernel_summary(prof: Any) -> dict[str, list[float]]:
    """{kernel name: [count, total device microseconds]} of the GPU activity in a finished trace."""
    out: dict[str, list[float]] = {}
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            us = float(e.time_range.elapsed_us())
            c = out.setdefault(e.name, [0, 0.0])
            c[0] += 1
            c[1] += us
    return out


def _warm_up(torch: Any) -> None:
    """Pay a clean worker's one-time costs before anything is timed or waited for: the CUDA context, the
    kernels of the grader's own per-call work, and the profiler's first start and first report (about 5 s
    on an H100 in a new process, verdict run 10 of 2026-11-27, in the git history of tests/gpu_runs)."""
    from torch.profiler import ProfilerActivity, profile

    x = make_inputs(torch, [[1024]], torch.float32, 1, "cuda")[0]
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fingerprint(torch, x)
            torch.cuda.synchronize()
        _kernel_summary(prof)
    except Exception:  # no profiler here: the rounds report that themselves
        fingerprint(torch, x)
    torch.cuda.synchronize()


def _record(torch: Any, wfd: int, msg: dict[str, Any], namespace: dict[str, Any], device: str) -> None:
    """One call of the learner's function on the verdict's seed, recorded as a plan; the output and the
    plan's external tensors follow as raw bytes."""
    from mlsys.grader.clean.replay import record_call

    try:
        fn = build_function(torch, msg["fn"], namespace, device)
        args = make_inputs(torch, msg["shapes"], getattr(torch, msg["dtype"]), int(msg["seed"]), device)
        out, plan, blobs = record_call(torch, fn, args, dict(msg.get("kwargs") or {}))
        if type(out) is not torch.Tensor:
            raise TypeError(f"the function returned a {type(out).__qualname__}; expected exactly a torch.Tensor")
        if device == "cuda":
            torch.cuda.synchronize()
        desc, raw = perfwire.tensor_bytes(out)
    except BaseException as exc:
        perfwire.send(wfd, {"plan": None, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
        return
    ext = [{k: e[k] for k in ("dtype", "shape", "nbytes")} for e in plan["externals"]]
    perfwire.send(wfd, {"plan": plan, "error": "", "tensors": [desc, *ext]}, [raw, *blobs])


def _load(torch: Any, wfd: int, msg: dict[str, Any], blobs: list[Any], replays: dict[str, Any], device: str) -> None:
    """Build a plan sent by the verdict process into a callable (kernels compiled here from their PTX)."""
    from mlsys.grader.clean.replay import Replay

    try:
        token = f"plan{len(replays)}"
        replay = Replay(torch, msg["plan"], [bytes(b) for b in blobs], device)
        if msg.get("shapes"):  # one call: the first launch of each kernel and the first allocations, untimed
            replay(*make_inputs(torch, msg["shapes"], getattr(torch, msg["dtype"]), 1, device))
            if device == "cuda":
                torch.cuda.synchronize()
        replays[token] = replay
        perfwire.send(wfd, {"loaded": token, "error": ""})
    except BaseException as exc:
        perfwire.send(wfd, {"loaded": None, "error": f"{type(exc).__name__}: {str(exc)[:400]}"})


def runnable_s() -> float | None:
    """Seconds this process's busiest thread has been running or waiting for a core, or None where the kernel does
    not say. Time stopped, frozen or asleep is not in it; time lost to a busy machine is. The busiest thread, not
    the sum: torch's worker threads would add up to more than the wall time and hide a stop.

    Waiting is ``schedstat``'s second field (run-queue delay, accounted each time a thread gets a core); running
    is its first, except for this thread, whose exact CPU time is read (the field is brought up to date for a
    running thread only at scheduler ticks, too coarse for a round of a few milliseconds)."""
    me, best, found = str(threading.get_native_id()), 0.0, False
    for stat in Path("/proc/self/task").glob("*/schedstat"):
        try:
            fields = stat.read_text().split()
            run = time.thread_time_ns() if stat.parent.name == me else int(fields[0])
            best, found = max(best, (run + int(fields[1])) / 1e9), True
        except (OSError, ValueError, IndexError):
            continue
    return best if found else None


def main(role: str) -> int:
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # prints from answer cells go nowhere, not into the wire
    shm = _shared_region()
    if role in ("baseline", "replay"):
        set_dumpable(False)  # where the learner worker shares its uid (no sandbox), it cannot reach into the baseline
    if "--fake" in sys.argv:
        os.environ["TRITON_INTERPRET"] = "1"
    from mlsys.runtime.device import setup

    setup()  # before torch and triton are imported, while the verdict process prepares
    import torch

    if os.environ.get("TRITON_INTERPRET") == "1":
        _count_triton_launches()
    elif role == "learner" and torch.cuda.is_available():
        torch.zeros(1, device="cuda")  # the CUDA context, before any answer cell and while the baseline is measured
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    device = "cpu"
    prof = None
    replays: dict[str, Any] = {}
    while True:
        msg, blobs = perfwire.recv(rfd)
        op = msg.get("op")
        if op == "exit":
            os._exit(0)
        if op == "setup":
            device = _setup(torch, wfd, msg, namespace, role)
        elif op == "record" and role == "learner":
            _record(torch, wfd, msg, namespace, device)
        elif op == "load" and role == "replay":
            _load(torch, wfd, msg, blobs, replays, device)
        elif op == "arm":
            prof = _arm(wfd, device) if device == "cuda" else prof
            if device != "cuda":
                perfwire.send(wfd, {"armed": False})
        elif op == "round":
            _round(torch, wfd, msg, namespace, device, replays, shm, prof)
            prof = None
        else:
            perfwire.send(wfd, {"error": f"unknown op {op!r}"})


def _shared_region() -> Any:
    """The region the verdict process shares for outputs (``--shm=FD:BYTES``), mapped; None without one, or where
    the sandbox's address-space cap leaves no room for it (CPU runs: outputs then cross the pipe)."""
    shm = None
    for arg in sys.argv:
        if arg.startswith("--shm="):
            import mmap

            fd, size = (int(x) for x in arg.removeprefix("--shm=").split(":"))
            try:
                shm = mmap.mmap(fd, size)
            except OSError:  # no room under the sandbox's address-space cap (CPU runs): outputs cross the pipe
                shm = None
    return shm


def _setup(torch: Any, wfd: int, msg: dict[str, Any], namespace: dict[str, Any], role: str) -> str:
    """The ``setup`` op: the device chosen (a clean worker on a GPU warms it up), the cells run into ``namespace``
    and, for ranks, the process group joined; replies with the device, the cells' notes and their seconds."""
    device = "cuda" if torch.cuda.is_available() and not msg.get("fake") else "cpu"
    if device == "cuda" and role != "learner":
        _warm_up(torch)  # while the verdict process starts (baseline) or the cells run (replay)
    t0 = time.monotonic()
    notes = exec_cells(list(msg.get("cells", [])), namespace, float(msg.get("cell_timeout") or 600))
    if msg.get("dist"):
        try:
            join_group(torch, msg["dist"], device)
        except Exception as exc:  # reported: the verdict refuses the case with it
            notes.append(f"could not join the process group: {type(exc).__name__}: {str(exc)[:200]}")
    perfwire.send(wfd, {"device": device, "notes": notes, "cells_s": time.monotonic() - t0})
    return device


def _arm(wfd: int, device: str) -> Any:
    """The ``arm`` op on a GPU: a CUDA kernel profiler started for the next round; replies whether it started
    (with the error when it did not: no trace, no credit). Returns the profiler, or None."""
    try:
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CUDA])
        prof.__enter__()
    except Exception as exc:  # reported: no trace, no credit
        perfwire.send(wfd, {"armed": False, "error": f"{type(exc).__name__}: {exc}"})
        return None
    perfwire.send(wfd, {"armed": True})
    return prof


def _round(torch: Any, wfd: int, msg: dict[str, Any], namespace: dict[str, Any], device: str,
           replays: dict[str, Any], shm: Any, prof: Any) -> None:
    """The ``round`` op: the calls run and fingerprinted (their ops recorded where asked), the share of the round
    this worker was runnable, then the outputs, the inputs and the armed profiler's kernel summary sent back."""
    seen: set[str] = set()
    head: dict[str, Any] = {"done": True, "fingerprints": [], "error": ""}
    ran0, t_ran = runnable_s(), time.monotonic()  # from the request read to "done": the verdict's own waits
    # for a core (between its clock and its write) are not the worker's, and a busy 2-core machine has many
    outs: list[Any] = []
    inputs: list[tuple] = []
    try:
        fn = build_function(torch, msg["fn"], namespace, device, replays)
        kwargs = dict(msg.get("kwargs") or {})
        harness: list[float] = []
        outs, head["fingerprints"], inputs = run_calls(
            torch, fn, msg["shapes"], getattr(torch, msg["dtype"]), msg["seeds"], device, kwargs,
            _recorder(torch, seen) if msg.get("record_ops") else None,
            harness if msg.get("harness_time") else None, bool(msg.get("same_storage")), bool(msg.get("flush_l2")))
        if harness:
            head["harness_gpu_s"] = harness[0]
    except BaseException as exc:
        head["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        outs = []
    head["ops"] = sorted(seen)
    ran1, t_end = runnable_s(), time.monotonic()
    if ran0 is not None and ran1 is not None and t_end > t_ran:  # read by the verdict from clean workers only
        head["ran_share"] = (ran1 - ran0) / (t_end - t_ran)
    perfwire.send(wfd, head)
    if msg.get("send_outputs") and not head["error"]:
        shared = perfwire.tensors_to_shared(outs, shm) if shm is not None and msg.get("shm") else None
        if shared is not None:
            perfwire.send(wfd, {"shared_tensors": shared})
        else:
            descs, blobs = zip(*(perfwire.tensor_bytes(o) for o in outs), strict=True) if outs else ((), ())
            perfwire.send(wfd, {"tensors": list(descs)}, list(blobs))
    if msg.get("send_inputs") and not head["error"]:
        flat = [t for args in inputs for t in args]
        descs, blobs = zip(*(perfwire.tensor_bytes(t) for t in flat), strict=True) if flat else ((), ())
        perfwire.send(wfd, {"tensors": list(descs)}, list(blobs))
    if prof is not None:
        try:
            prof.__exit__(None, None, None)
            perfwire.send(wfd, {"kernels": _kernel_summary(prof)})
        except Exception as exc:
            perfwire.send(wfd, {"kernels": None, "error": f"{type(exc).__name__}: {exc}"})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "learner"))
