"""Performance credit decided by a process that never runs an answer cell (the verdict process).

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
    forbid = "matmul"                      # aten ops the function may not run ("none": any, vendor kernels too): "matmul" (mm, bmm, addmm, sdpa,
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
is replaced by the verdict of :func:`main`, run by ``make grade`` in the submission's sandbox. That
process (the *verdict process*) never executes an answer cell (``docs/GRADING_PERFORMANCE.md`` is
the trust model):

1. it starts two workers (:mod:`mlsys.course.perfworker`): a *baseline* worker that never sees an
   answer cell, and a *learner* worker that runs the answer cells. The baseline's first rounds are
   measured before any answer cell runs (the learner's worker gets its cells only then), and every later
   baseline round with the learner's processes paused; a baseline round whose worker was not runnable
   for :data:`RAN_SHARE` of it is measured again. Under ``make grade`` the learner's workers run in a
   sandbox of their own as another user (:mod:`mlsys.course.learnerbox`), paused by their cgroup's
   freezer: they share no uid, ``/tmp``, compiler cache or PID namespace with this process and its
   clean workers, which they can neither signal nor feed a file;
2. each checked call gets inputs drawn from seeds the verdict process chose (new storage, new
   values); the worker returns exact ``torch.Tensor`` results as raw bytes
   (:mod:`mlsys.course.perfwire`), which are compared with the verdict's own reference, every call;
3. a checked call records the aten ops and Triton launches it ran (forbidden library routines
   refuse); on a GPU every timed round is traced and vendor-library kernels refuse
   (:func:`kernel_refusal`); a time below the roofline floor from the lab's ``flops`` and ``bytes``
   and the GPU's measured roofs refuses (:func:`roofline_floor`);
4. rounds of ``repeats`` calls alternate between baseline and learner, timed by the verdict's clock
   from the request to the worker's "done" (sent after ``torch.cuda.synchronize()`` with a
   fingerprint of every output, checked later against its bytes); the share is the fastest baseline
   round over the fastest learner round, less the grader's own work, and a share below full credit
   is measured again before it stands (:func:`credit_of`);
5. on a GPU the learner's side of those rounds is not run by the learner's worker: it records one call
   (its aten ops and Triton kernels, :mod:`mlsys.course.replay`) and a *replay* worker that never saw an
   answer cell rebuilds it (kernels compiled again from their PTX) and runs every timed round, traced
   there (:data:`REPLAY_ENV`).

Extra perf.toml keys: ``kernels = "triton"`` (the trace must show a Triton kernel of the learner's),
``flops`` and ``bytes`` (expressions in the argument shapes and ``itemsize``, per call, for the
roofline floor), ``rounds`` (default 3), ``world`` (default 1: a collective run on that many ranks the
verdict starts itself, gloo on a CPU and NCCL on GPUs; its ``reference`` sees each argument stacked over
the ranks, e.g. ``x.sum(0)``; ``forbid = "collectives"`` refuses every torch.distributed op but sends,
receives and barriers, recorded in every rank in every call; ``bytes`` per rank gives a link floor
from the GPU's datasheet interconnect bandwidth).

``MLSYS_FAKE_TIMER=1`` (or ``fake=True``) selects a deterministic fake timer so CI exercises every
decision on a CPU: every round is reported as ``repeats`` x 1 ms, so an honest function earns full
credit and every refusal (all of them but the GPU trace and the roofline floor, which have tests of
their own) is still taken for real.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..runtime import pysource
from . import learnerbox, policy

__all__ = ["PerfCase", "answer_cells", "load_spec", "find_spec", "grade_case", "grade_performance", "run_job", "main",
           "FAKE_SECONDS", "VENDOR_KERNEL_MARKS",
           "forbidden_ops", "exchanged_point_to_point", "kernel_refusal", "traced_per_call", "coverage_refusal", "triton_kernel_names", "roofline_floor", "credit_of", "spread",
           "sure_of_full_credit", "FULL_CREDIT_MARGIN"]

REPLAY_ENV = "MLSYS_GRADER_REPLAY"
"""Where a one-rank case is timed by replaying the learner's recorded call in a clean worker
(:mod:`mlsys.course.replay`) rather than in the learner's own process: ``gpu`` (the default: on a GPU),
``always`` (on a CPU too: tests, for functions made of aten ops, since the Triton interpreter's kernels
run no aten op a plan could hold) or ``off`` (the learner's own process; only to measure what replay costs)."""


def _replay_here(cuda: bool, world: int) -> bool:
    mode = os.environ.get(REPLAY_ENV, "gpu")
    if mode not in ("gpu", "always", "off"):
        raise ValueError(f"{REPLAY_ENV} must be gpu, always or off, got {mode!r}")
    return world == 1 and (mode == "always" or (mode == "gpu" and cuda))

FAKE_SECONDS = 1e-3
"""What the fake timer reports for every timed callable (seconds per call)."""

# What each kind of exercise may dispatch lives in mlsys.course.policy (one table for the test cells and here).


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
    flops: str = ""
    bytes: str = ""
    kernels: str = "any"
    rounds: int = 3
    world: int = 1

    @classmethod
    def from_dict(cls, grade_id: str, d: dict[str, Any]) -> PerfCase:
        known = {"function", "points", "args", "quick_args", "dtype", "reference", "baseline", "forbid", "full_at",
                 "zero_at", "rtol", "atol", "repeats", "warmup", "baseline_expr", "fresh_args", "kwargs",
                 "flops", "bytes", "kernels", "rounds", "world"}
        missing = {"function", "points", "args", "dtype", "reference"} - set(d)
        if missing:
            raise ValueError(f"perf spec [{grade_id}]: missing keys {sorted(missing)}")
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"perf spec [{grade_id}]: unknown keys {sorted(unknown)}; expected some of {sorted(known)}")
        if d.get("baseline", "reference") not in ("reference", "copy"):
            raise ValueError(f"perf spec [{grade_id}]: baseline must be 'reference' or 'copy', got {d['baseline']!r}")
        if d.get("forbid", "matmul") not in ("matmul", "compute", "collectives", "none"):
            raise ValueError(f"perf spec [{grade_id}]: forbid must be 'matmul', 'compute', 'collectives' or 'none', "
                             f"got {d['forbid']!r}")
        if not isinstance(d.get("world", 1), int) or not 1 <= d.get("world", 1) <= 64:
            raise ValueError(f"perf spec [{grade_id}]: world must be a number of ranks from 1 to 64")
        if not float(d.get("full_at", 0.5)) > float(d.get("zero_at", 0.0)):
            raise ValueError(f"perf spec [{grade_id}]: expected full_at > zero_at")
        if not isinstance(d["args"], dict) or not d["args"]:
            raise ValueError(f"perf spec [{grade_id}]: args must be a table name -> shape, e.g. {{ x = [1024] }}")
        if "fresh_args" in d and (not isinstance(d["fresh_args"], dict) or list(d["fresh_args"]) != list(d["args"])):
            raise ValueError(f"perf spec [{grade_id}]: fresh_args must name the same arguments as args, in order")
        kw = d.get("kwargs", {})
        if not isinstance(kw, dict) or not all(isinstance(v, (bool, int, float, str)) for v in kw.values()):
            raise ValueError(f"perf spec [{grade_id}]: kwargs must be a table of plain values, e.g. {{ causal = true }}")
        if d.get("kernels", "any") not in ("any", "triton"):
            raise ValueError(f"perf spec [{grade_id}]: kernels must be 'any' or 'triton', got {d['kernels']!r}")
        if int(d.get("rounds", 3)) < 1 or int(d.get("repeats", 20)) < 1:
            raise ValueError(f"perf spec [{grade_id}]: rounds and repeats must be at least 1")
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
                   kwargs=dict(kw), flops=str(d.get("flops", "")), bytes=str(d.get("bytes", "")),
                   kernels=str(d.get("kernels", "any")), rounds=int(d.get("rounds", 3)), world=int(d.get("world", 1)))


def load_spec(path: Path | str) -> dict[str, PerfCase]:
    """Parse a ``perf.toml`` into {grade_id: PerfCase}; a malformed spec raises ``ValueError``."""
    import tomllib

    data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    return {gid: PerfCase.from_dict(gid, d) for gid, d in data.items()}


def find_spec(lab: str) -> Path | None:
    """``perf.toml`` for ``lab``: the working folder first (a released lab), then the course's labs folder, then
    the copy the installed package carries (``mlsys/_labs/<lab>/perf.toml``: Colab, a notebook alone)."""
    from importlib.util import find_spec as find_module

    from ..runtime.paths import labs_root

    packaged = find_module("mlsys._labs")
    shipped = [Path(d) / lab / "perf.toml" for d in (packaged.submodule_search_locations or [])] if packaged else []
    for p in (Path.cwd() / "perf.toml", labs_root() / "source" / lab / "perf.toml",
              labs_root() / "release" / lab / "perf.toml", *shipped):
        if p.is_file():
            return p
    return None


# ----------------------------------------------------------------------------------------------
# the decisions (pure functions of evidence: tested on their own)

VENDOR_KERNEL_MARKS = ("cublas", "cutlass", "gemm", "gemv", "xmma", "cudnn", "flash", "fmha", "nccl", "cusparse",
                       "sm90_", "sm80_", "sm100_", "ampere_", "hopper_", "volta_", "turing_", "magma", "mma_")
"""Substrings (lower case) of vendor-library kernel names: cuBLAS/cuBLASLt, CUTLASS, cuDNN,
FlashAttention, NCCL, cuSPARSELt. A kernel whose name holds one earns nothing, whoever launched it."""

TRACE_SLACK_S = 50e-6
"""Per-call time the kernel trace need not account for (launches, the wire): below it, tiny kernels
are all overhead and the trace-time cross-check says nothing."""

LIBRARY_ONLY_MARKS = ("cublas", "cutlass", "xmma", "cudnn", "nccl", "cusparse", "sm90_", "sm80_", "sm100_",
                      "ampere_", "hopper_", "volta_", "turing_", "magma")
"""Marks no hand-written kernel's name needs: a Triton kernel named with one is refused (it would pass
a library kernel of that name off as the learner's). ``gemm`` or ``flash`` are fine names for your own."""

ALWAYS_ALLOWED_KERNELS = ("memcpy", "memset")
"""Trace entries that are data movement, not compute (CUPTI names them "Memcpy HtoD", "Memset")."""


def forbidden_ops(forbid: str, ops: set[str] | list[str]) -> list[str]:
    """Ops of ``ops`` that a case forbidding ``"matmul"``, ``"compute"`` or ``"collectives"`` refuses, in the one
    spelling (``aten::mm``, ``c10d::allreduce_``): :func:`mlsys.course.policy.forbidden`."""
    return policy.forbidden("step" if forbid == "none" else forbid, ops)


def exchanged_point_to_point(ops: set[str] | list[str]) -> bool:
    """True when a rank's record holds a send or a receive of torch.distributed."""
    return any(policy.qualified(op) in policy.POINT_TO_POINT for op in ops)


def triton_kernel_names(cells: list[str]) -> set[str]:
    """Names of the functions the answer cells decorate with ``triton.jit`` (or ``jit``, or under
    ``triton.autotune``/``heuristics``), read from their source with ``ast``: nothing is executed."""
    import ast

    try:
        from IPython.core.inputtransformer2 import TransformerManager

        transform = TransformerManager().transform_cell
    except Exception:
        def transform(src: str) -> str:
            return src
    names: set[str] = set()
    for src in cells:
        try:
            tree = pysource.parse(transform(src))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for dec in node.decorator_list:
                    text = ast.unparse(dec)
                    if text in ("jit", "triton.jit") or text.startswith(("triton.jit(", "jit(", "triton.autotune",
                                                                          "triton.heuristics")):
                        names.add(node.name)
    return names


def kernel_refusal(forbid: str, kernels: dict[str, list[float]], harness: set[str], triton_names: set[str],
                   require_triton: bool, calls: int, measured_s: float) -> str:
    """The GPU decision from a kernel trace of one timed round ("" when it may stand).

    ``kernels``: {name: [count, microseconds]} of the round; ``harness``: names the trusted baseline
    worker's empty round traced (input generation, fingerprints); ``measured_s``: the verdict's time
    per call. Refused: a vendor-library kernel (with ``forbid="collectives"``, NCCL's send/receive kernel
    is the learner's own exchange, every other NCCL kernel a library collective); with ``forbid="compute"`` any kernel that is not the
    learner's Triton kernel or a copy; no kernel of the learner at all; a trace whose kernels account
    for under a quarter of the measured time beyond :data:`TRACE_SLACK_S` (work the trace did not see).
    """
    import re

    imitating = sorted(t for t in triton_names if any(m in t.lower() for m in LIBRARY_ONLY_MARKS))
    if imitating:
        return f"your Triton kernels are named like library kernels ({', '.join(imitating[:3])}): rename them"
    grader_named = sorted(t for t in triton_names if t.lower().startswith(GRADER_KERNEL_PREFIX))
    if grader_named:
        return f"your Triton kernels are named like the grader's own ({', '.join(grader_named[:3])}): rename them"
    own = {n: c for n, c in kernels.items() if n not in harness}
    mine = {n for n in own if any(re.fullmatch(re.escape(t) + r"(_[0-9A-Za-z]+)?", n) for t in triton_names)}
    vendor = sorted(n for n in own if forbid != "none" and n not in mine and any(m in n.lower() for m in VENDOR_KERNEL_MARKS)
                    and not (forbid == "collectives" and "sendrecv" in n.lower()))  # NCCL's point-to-point kernel
    if vendor:
        return f"vendor library kernels ran in the timed calls: {', '.join(v[:80] for v in vendor[:3])}"
    others = sorted(n for n in own if n not in mine and not n.lower().startswith(ALWAYS_ALLOWED_KERNELS))
    if forbid == "compute" and others:
        return f"kernels other than your Triton kernels ran in the timed calls: {', '.join(o[:80] for o in others[:3])}"
    if not own or (require_triton and not mine):
        return ("no kernel of yours ran in the timed calls (the trace holds "
                f"{', '.join(sorted(own)[:3]) or 'nothing but the grader'})")
    return coverage_refusal(traced_per_call(kernels, harness, calls), measured_s)


def traced_per_call(kernels: dict[str, list[float]], harness: set[str], calls: int) -> float:
    """Seconds of device time per call that a round's trace saw in kernels other than the harness's."""
    return sum(c[1] for n, c in kernels.items() if n not in harness) * 1e-6 / max(calls, 1)


GRADER_KERNEL_PREFIX = "_grader_"
"""Names of the grader's own Triton kernels (input fill, fingerprint: :mod:`mlsys.course.harnesskernels`)."""


def harness_refusal(kernels: dict[str, list[float]], harness: set[str], harness_us: float) -> str:
    """Refused when a learner's round shows less of the grader's own kernels (``harness``: the names the clean
    worker's overhead round traced: input generation, fingerprints) than that overhead round of the same calls
    (``harness_us``, its fewest microseconds): their time is subtracted from every round as the grader's, so a
    learner's process that skipped or shrank that work (a cheaper fingerprint, outputs computed from the
    seed) would gain it. Kernel durations come from the device, so a busy GPU makes them no shorter; half
    is the margin."""
    if harness_us <= 0:
        return ""
    mine = sum(c[1] for n, c in kernels.items() if n in harness)
    if mine < 0.5 * harness_us:
        return (f"the grader's own kernels (fresh inputs, fingerprints) took {mine:.4g} us in your round against "
                f"{harness_us:.4g} us in the clean worker's: the grader's work was skipped in your process")
    return ""


def coverage_refusal(traced_s: float, measured_s: float, noise_s: float = 0.0, untraced_base_s: float = 0.0) -> str:
    """Refused when the traced kernels account for under a quarter of the measured time per call beyond
    :data:`TRACE_SLACK_S` (work ran that the trace did not see). Decide it on the fastest round: hidden
    work costs time in every round, while noise (another process on the GPU, the host) only ever adds it,
    so one slow round must not refuse honest work (on an H200, 5 of 10 gradings of Lab 3's instructor
    element-wise kernel, 33 us on the device, were refused on a round measured at 190-250 us per call).
    ``noise_s``: how much the grader's own per-call overhead, subtracted from the measured time, varied
    between its rounds (60 us per call in that run, more than the kernel took): the slack grows by it.
    ``untraced_base_s``: per call, how much of the baseline's own measured time (its fastest round) its
    trace did not account for, in the clean worker that never ran learner code: time the machine adds
    to any work (other processes sharing the GPU, the host), not hidden work; the slack grows by it
    (three gradings sharing an H200 put a 33 us copy at 500 us per call on both sides)."""
    if traced_s < 0.25 * (measured_s - TRACE_SLACK_S - noise_s - max(untraced_base_s, 0.0)):
        return (f"the kernel trace accounts for {traced_s * 1e6:.3g} us of the {measured_s * 1e6:.3g} us measured per call: "
                "work ran that the trace did not see")
    return ""


def roofline_floor(flops: float, nbytes: float, roof: Any) -> float:
    """Seconds no call can beat: ``max(flops / peak, bytes / bandwidth)`` of a :class:`mlsys.roofline.Roof`."""
    from mlsys.roofline import time_lower_bound

    return float(time_lower_bound(flops, nbytes, roof).to("s").magnitude)


def credit_of(share: float, case: PerfCase) -> float:
    """Linear credit: 0 at ``zero_at``, 1 at ``full_at`` and above."""
    return min(1.0, max(0.0, (share - case.zero_at) / (case.full_at - case.zero_at)))


FULL_CREDIT_MARGIN = 1.25
"""How far past ``full_at`` the slowest learner round's share must be to stop after two rounds."""


def sure_of_full_credit(baseline_s: float, slowest_s: float, case: PerfCase) -> bool:
    """True when even the slowest learner round (``slowest_s`` per call) earns full credit against the
    fastest baseline with :data:`FULL_CREDIT_MARGIN` to spare: more rounds could not change the verdict
    unless the baseline itself ran that much faster, so grading stops early."""
    return slowest_s > 0 and baseline_s > 0 and baseline_s / slowest_s >= FULL_CREDIT_MARGIN * case.full_at


def spread(times: list[float]) -> float:
    """(max - min) / min of a list of round times: how far rounds of the same work fell apart."""
    return (max(times) - min(times)) / min(times) if times and min(times) > 0 else 0.0


# ----------------------------------------------------------------------------------------------
# workers: the learner's process, and a clean one for the baseline


ROUND_LIMIT_S = 300.0
"""Longest a worker may take to answer one round (its compilation and autotuning on first calls included)."""

SHARED_BYTES = learnerbox.SHARED_BYTES
"""Size of the shared region a worker writes a round's outputs into (sparse: pages exist once written)."""

RAN_SHARE = 0.5
"""Least share of a clean worker's round (from reading the request to its "done", by its own clock) that its threads must
have been runnable (running, or waiting for a core: :func:`mlsys.course.perfworker.runnable_s`). A round below
it was not run by the worker for most of its time (stopped, frozen): it is measured again. Waiting for a core
counts, so a busy machine never fails this check; on a GPU a synchronize spins or yields (CUDA's default
schedule for a few contexts), which counts as runnable too. With the fake timer it is recorded, not applied.
The worker measures it itself (the verdict's own clock would count the pipe's and its own wake-ups):
a clean worker's word is the grader's."""

STOPPED_S = 5e-3
"""...and the least time a round must have lost (not runnable) to count as not run: an honest cold round of a few
milliseconds can sleep on a page fault for a good share of itself (0.41 of a 6 ms round measured here, loaded),
while a stop long enough to matter (round 4: 8 ms in every 10) loses more than this in every round it hits."""


def did_not_run(share: float | None, wall_s: float) -> bool:
    """Whether a clean worker's round was not run by it (see :data:`RAN_SHARE` and :data:`STOPPED_S`)."""
    return share is not None and share < RAN_SHARE and (1.0 - share) * wall_s > STOPPED_S


class _RemoteBox:
    """A learner sandbox started by the grader's host (:mod:`mlsys.course.learnerbox`): paused by its cgroup."""

    def __init__(self, client: Any, box: int) -> None:
        self.client, self.box, self.stopped, self.dead = client, box, False, False

    def pause(self, stop: bool) -> None:
        if not self.dead and stop != self.stopped:
            self.client.pause(self.box, stop)
            self.stopped = stop

    def kill(self) -> None:
        if not self.dead:
            self.dead = True
            try:
                self.client.kill(self.box)
            except (OSError, ValueError, ConnectionError):
                pass


class _ProcWorker:
    """A worker process (:mod:`mlsys.course.perfworker`) spoken to through :mod:`mlsys.course.perfwire`:
    started here (a clean worker, or a learner worker where there is no sandbox), or, given ``ends``, the
    pipes of a learner worker the grader's host started in a sandbox of its own (``box``)."""

    def __init__(self, role: str, fake: bool, ends: tuple[int, int, int] | None = None, box: _RemoteBox | None = None) -> None:
        import subprocess

        self.role, self.box, self.proc, self.shm = role, box, None, None
        if ends is not None:
            self.w, self.r, region = ends
            try:
                import mmap

                if os.fstat(region).st_size == SHARED_BYTES:
                    self.shm = (region, mmap.mmap(region, SHARED_BYTES))
            except (OSError, ValueError):
                pass
            if self.shm is None:
                os.close(region)
        else:
            argv = [sys.executable, "-P", "-m", "mlsys.course.perfworker", role] + (["--fake"] if fake else [])
            region = learnerbox.shared_region()
            if region is not None:
                import mmap

                self.shm = (region, mmap.mmap(region, SHARED_BYTES))
                argv.append(f"--shm={region}:{SHARED_BYTES}")
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         start_new_session=True, pass_fds=(region,) if region is not None else ())
            self.w, self.r = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        try:  # larger pipes: outputs of tens of MiB cross in fewer, larger writes (Linux only; else as is)
            import fcntl

            for fd in (self.w, self.r):
                fcntl.fcntl(fd, 1031, 1 << 20)  # F_SETPIPE_SZ, up to /proc/sys/fs/pipe-max-size (1 MiB by default)
        except (ImportError, OSError):
            pass

    def send(self, msg: dict[str, Any], blobs: list[Any] = ()) -> None:
        from . import perfwire

        perfwire.send(self.w, msg, blobs)

    def recv(self, deadline: float) -> tuple[dict[str, Any], list[bytes]]:
        from . import perfwire

        return perfwire.recv(self.r, deadline)

    def pause(self, stop: bool) -> None:
        """Pause or resume the worker with everything it started, so the learner's processes sleep while
        the baseline is timed: its sandbox's cgroup frozen (a learner box), else SIGSTOP / SIGCONT of its session."""
        import signal

        if self.box is not None:
            self.box.pause(stop)
            return
        try:
            os.killpg(self.proc.pid, signal.SIGSTOP if stop else signal.SIGCONT)
        except OSError:
            pass

    def kill(self) -> None:
        """SIGKILL the worker's session without waiting (a CUDA context takes a moment to tear down: the
        verdict kills every worker first, then waits for them all in :meth:`close`)."""
        import signal

        if self.box is not None:
            self.box.kill()
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass

    def close(self) -> None:
        self.kill()
        if self.proc is not None:
            self.proc.wait()
        else:
            for fd in (self.w, self.r):
                try:
                    os.close(fd)
                except OSError:
                    pass
        if self.shm is not None:
            try:
                self.shm[1].close()
                os.close(self.shm[0])
            except (BufferError, OSError):
                pass
            self.shm = None


class _RankGroup:
    """``world`` workers of one role, one per rank of a process group, spoken to as one worker.

    A round's seeds are dealt out by call: call ``i`` of rank ``r`` gets ``seeds[i * world + r]``; the
    ranks' answers are merged back in that order (fingerprints, outputs, inputs), their op records kept
    rank by rank (``rank_ops``), their kernel traces summed. Each rank is its own process, started with
    :class:`_ProcWorker`; only this, the verdict process, sees all of them."""

    def __init__(self, role: str, fake: bool, world: int, ranks: list[_ProcWorker] | None = None) -> None:
        from ..runtime.launch import free_port

        self.world, self.calls = world, 0
        self.port = free_port()
        self.ranks = ranks or [_ProcWorker(role, fake) for _ in range(world)]

    def send(self, msg: dict[str, Any]) -> None:
        if msg.get("op") == "setup":
            for r, w in enumerate(self.ranks):
                w.send(dict(msg, dist={"rank": r, "world": self.world, "port": self.port,
                                       "timeout": float(msg.get("cell_timeout") or 120)}))
        elif msg.get("op") == "round":
            seeds = list(msg["seeds"])
            self.calls = len(seeds) // self.world
            for r, w in enumerate(self.ranks):
                w.send(dict(msg, seeds=seeds[r::self.world]))
        else:
            for w in self.ranks:
                w.send(msg)

    def _interleave(self, lists: list[list[Any]]) -> list[Any]:
        """Rank-major lists of per-call items -> call-major (call i of rank 0, of rank 1, ...)."""
        if not self.calls or any(len(x) % self.calls for x in lists):
            return [x for part in lists for x in part]  # malformed: left in rank order, the checks refuse it
        per = [len(x) // self.calls for x in lists]
        return [x for i in range(self.calls) for part, n in zip(lists, per, strict=True) for x in part[i * n:(i + 1) * n]]

    def recv(self, deadline: float) -> tuple[dict[str, Any], list[bytes]]:
        parts = [w.recv(deadline) for w in self.ranks]
        heads = [h for h, _ in parts]
        first = heads[0]
        if "tensors" in first:
            descs = [list(h.get("tensors") or []) for h in heads]
            blobs = [list(b) for _, b in parts]
            return {"tensors": self._interleave(descs)}, self._interleave(blobs)
        if "done" in first:
            return {"done": all(h.get("done") for h in heads),
                    "error": next((f"rank {r}: {h['error']}" for r, h in enumerate(heads) if h.get("error")), ""),
                    "fingerprints": self._interleave([list(h.get("fingerprints") or []) for h in heads]),
                    "ops": sorted({str(o) for h in heads for o in (h.get("ops") or [])}),
                    "rank_ops": [list(h.get("ops") or []) for h in heads],
                    **({"ran_share": min(float(h["ran_share"]) for h in heads)}
                       if all(isinstance(h.get("ran_share"), (int, float)) for h in heads) else {}),
                    **({"harness_gpu_s": max(float(h["harness_gpu_s"]) for h in heads)}
                       if all(isinstance(h.get("harness_gpu_s"), (int, float)) for h in heads) else {})}, []
        if "kernels" in first:
            if any(not isinstance(h.get("kernels"), dict) for h in heads):
                return {"kernels": None, "error": next((str(h.get("error")) for h in heads if h.get("error")), "")}, []
            total: dict[str, list[float]] = {}
            for h in heads:
                for name, (n, us) in h["kernels"].items():
                    c = total.setdefault(name, [0, 0.0])
                    c[0] += n
                    c[1] += us
            return {"kernels": total}, []
        if "armed" in first:
            return {"armed": all(h.get("armed") for h in heads),
                    "error": next((str(h["error"]) for h in heads if h.get("error")), "")}, []
        return {"device": first.get("device"), "cells_s": max(float(h.get("cells_s") or 0) for h in heads),
                "notes": [f"rank {r}: {n}" for r, h in enumerate(heads) for n in (h.get("notes") or [])]}, []

    def pause(self, stop: bool) -> None:
        for w in self.ranks:
            w.pause(stop)

    def kill(self) -> None:
        for w in self.ranks:
            w.kill()

    def close(self) -> None:
        for w in self.ranks:
            w.close()


def _workers(role: str, fake: bool, world: int, host: Any = None) -> Any:
    """One worker of ``role``, or a group of ``world`` ranks of it. With ``host`` (a
    :class:`mlsys.course.learnerbox.LearnerClient`), learner workers run in a sandbox of their own that the
    grader's host starts, as another user; clean workers always start here."""
    if host is not None and role == "learner":
        box_id, ends = host.start(world, fake)
        box = _RemoteBox(host, box_id)
        ranks = [_ProcWorker(role, fake, e, box) for e in ends]
        return ranks[0] if world == 1 else _RankGroup(role, fake, world, ranks)
    return _ProcWorker(role, fake) if world == 1 else _RankGroup(role, fake, world)


class _LocalWorker:
    """The same protocol in this process: only for the learner's preview in the notebook."""

    def __init__(self, namespace: dict[str, Any], device: str) -> None:
        self.namespace, self.device, self.pending = namespace, device, []

    def send(self, msg: dict[str, Any]) -> None:
        import torch

        from . import perfwire
        from .perfworker import _recorder, build_function, run_calls

        if msg.get("op") == "arm":
            self.pending.append(({"armed": False}, []))
            return
        head: dict[str, Any] = {"done": True, "fingerprints": [], "error": "", "ops": []}
        outs: list[Any] = []
        inputs: list[tuple] = []
        try:
            fn = build_function(torch, msg["fn"], self.namespace, self.device)
            seen: set[str] = set()
            outs, head["fingerprints"], inputs = run_calls(torch, fn, msg["shapes"], getattr(torch, msg["dtype"]),
                                                           msg["seeds"], self.device, dict(msg.get("kwargs") or {}),
                                                           _recorder(torch, seen) if msg.get("record_ops") else None,
                                                           None, bool(msg.get("same_storage")))
            head["ops"] = sorted(seen)
        except Exception as exc:
            head["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        self.pending.append((head, []))

        def wire(tensors: list[Any]) -> Any:  # copied when received: after the round's "done", as a worker does
            def later() -> tuple[dict[str, Any], list[bytes]]:
                pairs = [perfwire.tensor_bytes(t) for t in tensors]
                return {"tensors": [p[0] for p in pairs]}, [bytes(p[1]) for p in pairs]
            return later
        if msg.get("send_outputs") and not head["error"]:
            self.pending.append(wire(outs))
        if msg.get("send_inputs") and not head["error"]:
            self.pending.append(wire([t for args in inputs for t in args]))

    def recv(self, deadline: float) -> tuple[dict[str, Any], list[bytes]]:
        """The next answer; a round's outputs and inputs are copied to the host only now, outside the round's
        time (the verdict's clock stops at "done"; timing the copies made Lab 2's preview 0.0036 on an H200)."""
        item = self.pending.pop(0)
        return item() if callable(item) else item

    def pause(self, stop: bool) -> None:
        pass

    def close(self) -> None:
        pass


class _Refused(Exception):
    """A verdict of no credit, with the sentence that says why."""


@dataclass
class _Window:
    seconds: float
    fingerprints: list[tuple[float, float]]
    ops: list[str]
    outputs: list[Any] | None
    kernels: dict[str, list[float]] | None
    trace_error: str = ""
    inputs: list[Any] | None = None
    harness_s: float | None = None
    wall_s: float = 0.0
    rank_ops: list[list[str]] = field(default_factory=list)
    ran_share: float | None = None  # least share of the round a clean worker's process was runnable (RAN_SHARE)


class _Verdict:
    """The verdict process's state: its own torch, device, clock and seeds; no learner code, ever."""

    def __init__(self, fake: bool, deadline: float) -> None:
        import secrets
        import time

        import torch

        self.torch, self.fake, self.deadline = torch, fake, deadline
        self.clock = time.perf_counter
        self.cuda = torch.cuda.is_available() and not fake
        self.device = "cuda" if self.cuda else "cpu"
        self.trace = self.cuda  # a kernel trace of every timed round (the preview in a notebook takes none)
        self.rand = secrets.SystemRandom()

    def seeds(self, n: int) -> list[int]:
        """Fresh seeds from the operating system: no worker can predict the next call's values."""
        return [self.rand.randrange(1, 2**62) for _ in range(n)]

    def window(self, worker: Any, fn: dict[str, Any], case: PerfCase, shapes: list[list[int]], seeds: list[int],
               *, record_ops: bool = False, send_outputs: bool = False, send_inputs: bool = False,
               trace: bool = False, harness_time: bool = False, same_storage: bool = False) -> _Window:
        """One round of ``len(seeds)`` calls, timed by this process's clock from the request to the
        worker's "done" (which it sends after the device is idle and every fingerprint is taken).
        A round answers within :data:`ROUND_LIMIT_S` (a ring whose ranks wait for each other for ever, a
        hung call) or the worker is taken as stopped: no credit for the case, the next case gets a new one."""
        import time

        dl = min(self.deadline, time.monotonic() + ROUND_LIMIT_S)
        armed, trace_error = False, ""
        if trace:
            worker.send({"op": "arm"})
            head, _ = worker.recv(dl)
            armed, trace_error = bool(head.get("armed")), str(head.get("error", ""))
        msg = {"op": "round", "fn": fn, "shapes": shapes, "dtype": case.dtype, "seeds": seeds,
               "kwargs": case.kwargs if "name" in fn else {},  # the learner's function's keywords, not the baseline's
               "record_ops": record_ops, "send_outputs": send_outputs, "send_inputs": send_inputs,
               "harness_time": harness_time, "shm": getattr(worker, "shm", None) is not None,
               "same_storage": same_storage}
        t0 = self.clock()
        worker.send(msg)
        head, _ = worker.recv(dl)
        t1 = self.clock()
        if not head.get("done"):
            raise _Refused(f"the worker answered out of turn ({str(head)[:100]})")
        if head.get("error"):
            raise _Refused(f"{case.function} failed in a checked call: {head['error']}")
        outputs = self.outputs(worker, len(seeds), dl) if send_outputs else None
        inputs = None
        if send_inputs:
            from .perfwire import tensor_from_bytes

            desc, blobs = worker.recv(dl)
            inputs = [tensor_from_bytes(d, b) for d, b in zip(desc.get("tensors") or [], blobs, strict=True)]
        kernels = None
        if armed:
            k, _ = worker.recv(dl)
            kernels = k.get("kernels")
            trace_error = trace_error or str(k.get("error", ""))
        fps = head.get("fingerprints")
        if not isinstance(fps, list) or len(fps) != len(seeds) or not all(
                isinstance(x, list) and len(x) == 2 and all(type(y) in (int, float) for y in x) for x in fps):
            raise _Refused("the worker sent no fingerprint (sum, norm) for every call")
        seconds = len(seeds) // max(case.world, 1) * FAKE_SECONDS if self.fake else t1 - t0
        win = _Window(seconds, [(float(x[0]), float(x[1])) for x in fps], list(head.get("ops") or []), outputs,
                      kernels, trace_error, inputs)
        win.wall_s = t1 - t0
        share = head.get("ran_share")  # the least over ranks (a rank group sends the least)
        win.ran_share = float(share) if isinstance(share, (int, float)) and math.isfinite(share) else None
        rank_ops = head.get("rank_ops")
        win.rank_ops = ([[str(o) for o in ops] for ops in rank_ops if isinstance(ops, list)]
                        if isinstance(rank_ops, list) else [win.ops])
        h = head.get("harness_gpu_s")
        win.harness_s = float(h) if isinstance(h, (int, float)) and math.isfinite(h) and h >= 0 else None
        return win

    def outputs(self, worker: Any, n: int, dl: float) -> list[Any]:
        """A round's ``n`` outputs, from the shared region (the verdict's own copy) or from the pipe's raw bytes."""
        from .perfwire import tensor_from_bytes, tensor_from_shared

        desc, blobs = worker.recv(dl)
        shared = desc.get("shared_tensors")
        tensors = (shared if isinstance(shared, list) and getattr(worker, "shm", None) is not None
                   else desc.get("tensors")) or []
        if len(tensors) != n:
            raise _Refused(f"expected {n} outputs from the worker, got {len(tensors)}")
        if tensors is shared:
            return [tensor_from_shared(d, worker.shm[1], self.device) for d in tensors]
        return [tensor_from_bytes(d, b) for d, b in zip(tensors, blobs, strict=True)]

    def check_inputs(self, case: PerfCase, shapes: list[list[int]], seeds: list[int], win: _Window) -> None:
        """The inputs as the worker held them after the calls, against the ones rebuilt from the seeds."""
        from .perfworker import make_inputs

        dtype = getattr(self.torch, case.dtype)
        want = [t for s in seeds for t in make_inputs(self.torch, shapes, dtype, s, self.device)]
        got = win.inputs or []
        if len(got) != len(want) or not all(g.dtype == w.dtype and g.shape == w.shape
                                            and bool(self.torch.equal(g.to(self.device), w)) for g, w in zip(got, want, strict=False)):
            raise _Refused(f"{case.function} changed its input tensors")

    def check_outputs(self, case: PerfCase, ref_fn: Any, shapes: list[list[int]], seeds: list[int],
                      win: _Window, what: str) -> None:
        """Every output against this process's own reference on inputs rebuilt from the seeds, and every
        fingerprint against the output's bytes: a result computed after "done" does not match its
        fingerprint, a cached, stale, copied or lower-precision one does not match its reference."""
        from .perfworker import make_inputs

        torch = self.torch
        dtype = getattr(torch, case.dtype)
        assert win.outputs is not None
        ref = None
        for i, (seed, out, fp) in enumerate(zip(seeds, win.outputs, win.fingerprints, strict=True)):
            label = f"call {i + 1}" if case.world == 1 else f"call {i // case.world + 1} of rank {i % case.world}"
            if case.world == 1:
                ref = ref_fn(*make_inputs(torch, shapes, dtype, seed, self.device))
            elif i % case.world == 0:  # call i // world of every rank: the reference of the ranks' inputs together
                ref = ref_fn(*ranks_inputs(torch, shapes, dtype, seeds[i:i + case.world], self.device))
            if tuple(out.shape) != tuple(ref.shape) or out.dtype != ref.dtype:
                raise _Refused(f"{what}, {label}: expected a {str(ref.dtype)[6:]} tensor of shape "
                               f"{tuple(ref.shape)}, got {str(out.dtype)[6:]} {tuple(out.shape)}")
            got = out.to(self.device)
            a, e = got.double(), ref.double()
            ok = torch.isfinite(a) & ((a - e).abs() <= case.atol + case.rtol * e.abs())
            if not bool(ok.all()):
                bad = int((~ok).sum())
                idx = int((~ok).flatten().nonzero()[0])
                raise _Refused(f"{what}, {label}: {bad} of {ok.numel()} elements differ from the reference "
                               f"(first at flat index {idx}: {float(a.flatten()[idx])!r} vs "
                               f"{float(e.flatten()[idx])!r}, rtol={case.rtol:g}, atol={case.atol:g})")
            total = float(torch.sum(got, dtype=torch.float64))
            norm = float(torch.linalg.vector_norm(got, 2, dtype=torch.float64))
            scale = float(torch.sum(got.abs(), dtype=torch.float64)) if got.is_floating_point() else abs(total)
            if not (all(map(math.isfinite, fp)) and abs(fp[0] - total) <= 1e-6 * scale + 1e-6
                    and abs(fp[1] - norm) <= 1e-6 * norm + 1e-6):
                raise _Refused(f"{what}, {label}: the output sent differs from the one the worker "
                               f"fingerprinted when it said the call was done (sum, norm {fp!r} vs {(total, norm)!r})")


def ranks_inputs(torch: Any, shapes: list[list[int]], dtype: Any, seeds: list[int], device: str) -> tuple:
    """The inputs of one call in every rank (``seeds[r]`` is rank r's), each argument stacked over the ranks
    along a new first dimension: a collective's reference is an expression of these (e.g. ``x.sum(0)``)."""
    from .perfworker import make_inputs

    per_rank = [make_inputs(torch, shapes, dtype, s, device) for s in seeds]
    return tuple(torch.stack([args[a] for args in per_rank]) for a in range(len(shapes)))


def _shapes(case: PerfCase, small: bool) -> tuple[list[list[int]], list[list[int]]]:
    timing = case.quick_args if small else case.args
    fresh = case.quick_args if small else case.fresh_args
    return [list(s) for s in timing.values()], [list(s) for s in fresh.values()]


def _work(case: PerfCase, shapes: list[list[int]], itemsize: int) -> tuple[float, float] | None:
    """(FLOPs, compulsory bytes) of one call from the spec's ``flops`` and ``bytes`` expressions."""
    if not case.flops and not case.bytes:
        return None
    env = {n: s for n, s in zip(case.args, shapes, strict=True)} | {"itemsize": itemsize, "math": math}
    return (float(eval(case.flops or "0", {"__builtins__": {}}, env)),  # the teacher's spec
            float(eval(case.bytes or "0", {"__builtins__": {}}, env)))


def _measured_roof(torch: Any, dtype: str) -> Any:
    """The grading GPU's measured roof for ``dtype`` (mlsys.bench records), or None when none is recorded."""
    try:
        from mlsys.bench import records

        short = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}.get(dtype, dtype)
        slug = records.find(records.device_slug(torch.cuda.get_device_name()))
        if slug is None:
            return None
        rec = records.load(slug)
        use = short if rec.has(f"matmul_{short}") else (rec.matmul_dtypes() or [None])[0]
        return rec.roof(use) if use else None
    except Exception:
        return None


def _link_bandwidth(torch: Any) -> tuple[str, float] | None:
    """(label, byte/s) of this GPU's interconnect per direction from the datasheet (``mlsys.hardware``),
    or None where the GPU or its link is not on file. "NVIDIA H100 80GB HBM3" is looked up as
    "H100 80GB HBM3", then "H100 80GB", then "H100"."""
    try:
        from mlsys import hardware

        words = torch.cuda.get_device_name().replace("NVIDIA", "").split()
        for n in range(len(words), 0, -1):
            try:
                acc = hardware.get(" ".join(words[:n]))
            except KeyError:
                continue
            bw = acc.interconnect_bandwidth
            return None if bw is None else (f"{acc.name} datasheet link {bw.to('GB/s'):~P} per direction",
                                            float(bw.to("byte/s").magnitude))
    except Exception:
        return None
    return None


@dataclass
class _Prepared:
    case: PerfCase
    shapes: list[list[int]]
    fresh_shapes: list[list[int]]
    ref_fn: Any
    base_fn: dict[str, Any]
    empty_fn: dict[str, Any]
    base: list[float] = field(default_factory=list)
    over: list[float] = field(default_factory=list)
    harness: set[str] = field(default_factory=set)
    base_traced: list[float | None] = field(default_factory=list)  # per baseline round: traced s per call
    harness_us: float = 0.0  # the grader's own kernels in the clean overhead round (us, fewest seen)
    itemsize: int = 4
    trace_ok: bool = False
    ran: list[float] = field(default_factory=list)  # per baseline round: share of it the clean worker was runnable


def _prepare(v: _Verdict, base_worker: Any, case: PerfCase) -> _Prepared:
    """The reference, and the baseline measured in a worker that never saw an answer cell, while the
    learner's processes are stopped (:func:`run_job`): no learner code can slow these rounds down, and the
    baseline used is the fastest of them all (a slower one measured later, under interference, cannot raise it)."""
    from .perfworker import make_inputs

    torch = v.torch
    dtype = getattr(torch, case.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"perf spec [{case.grade_id}]: unknown dtype {case.dtype!r}")
    shapes, fresh_shapes = _shapes(case, small=not v.cuda)
    names = list(case.args)
    ref_fn = eval(f"lambda {', '.join(names)}: {case.reference}", {"torch": torch})  # the teacher's spec
    ref = ref_fn(*(make_inputs(torch, shapes, dtype, 1, v.device) if case.world == 1 else
                   ranks_inputs(torch, shapes, dtype, list(range(1, case.world + 1)), v.device)))
    base_fn = {"copy": True} if case.baseline == "copy" else {"expr": case.baseline_expr or case.reference, "args": names}
    empty_fn = {"empty": list(ref.shape), "dtype": str(ref.dtype).removeprefix("torch.")}
    prep = _Prepared(case, shapes, fresh_shapes, ref_fn, base_fn, empty_fn,
                     itemsize=torch.empty(0, dtype=dtype).element_size())
    for fn in (base_fn, empty_fn):  # warm-up: first calls pay for compilation and allocation
        v.window(base_worker, fn, case, shapes, v.seeds(2 * case.world))
    _baseline_round(v, base_worker, prep, trace=v.trace)  # traced once: the grader's own kernels, by name
    return prep


def _baseline_round(v: _Verdict, base_worker: Any, prep: _Prepared, trace: bool = False) -> None:
    """An overhead round and a baseline round in the clean worker. The overhead is the GPU time of the
    grader's own work in a round (input generation, fingerprints), timed with CUDA events by the
    clean worker: it is what that work adds to a round whose GPU is busy, so it is subtracted from the
    learner's rounds and the baseline's alike (the wall time of an empty round would be launch-bound
    and subtract too much). On a CPU it is the round's wall time."""
    case, k = prep.case, prep.case.repeats
    n, rec = k * case.world, case.world > 1  # collectives: every call of every round recorded, on both sides
    over = v.window(base_worker, prep.empty_fn, case, prep.shapes, v.seeds(n), trace=trace, harness_time=v.cuda)
    prep.over.append(over.harness_s if v.cuda and over.harness_s is not None else over.seconds)
    if over.kernels is not None:
        prep.harness |= set(over.kernels)
        prep.trace_ok = True  # the clean worker can trace here: a learner's worker that cannot is refused
        us = sum(c[1] for c in over.kernels.values())  # all of it is the grader's own work
        prep.harness_us = us if prep.harness_us <= 0 else min(prep.harness_us, us)
    # traced as the learner's rounds are, so the trace's own cost falls on both sides of the share
    base = _clean_window(v, base_worker, prep, n, trace, rec)
    prep.base.append(base.seconds)
    prep.base_traced.append(None if base.kernels is None else traced_per_call(base.kernels, prep.harness, k))


def _clean_window(v: _Verdict, base_worker: Any, prep: _Prepared, n: int, trace: bool, rec: bool, tries: int = 3) -> _Window:
    """A baseline round the clean worker ran: one whose process was runnable for less than :data:`RAN_SHARE` of
    the round (stopped or frozen from outside) is measured again, and after ``tries`` such rounds the case
    is refused (the grader's own measurement cannot be trusted). With the fake timer (CI) the share is recorded
    only: no time is measured there."""
    for _ in range(tries):
        base = v.window(base_worker, prep.base_fn, prep.case, prep.shapes, v.seeds(n), trace=trace, record_ops=rec)
        if base.ran_share is not None:
            prep.ran.append(round(base.ran_share, 3))
        # On a GPU a worker waiting on the device need not be runnable (a blocking wait, a step that syncs per
        # head): measured on an H200 (2026-12-02), Lab 6's honest baseline was runnable 35-47% of its rounds. There the
        # share is recorded, not applied; the learner cannot stop the clean worker anyway (another uid and
        # sandbox, its own cgroup frozen), which is the boundary this check only backs up on a CPU.
        if v.fake or v.cuda or not did_not_run(base.ran_share, base.wall_s):
            return base
    raise _Refused(f"the grader's baseline worker did not run during {tries} of its rounds (runnable for "
                   f"{min(prep.ran[-tries:]):.0%} of a round at most): something stopped it, so no share can be measured")


def _ops_refusal(v: _Verdict, case: PerfCase, w: _Window, where: str) -> None:
    """Refuse a window of the learner's calls whose recorded ops run a forbidden library routine or (on a CPU)
    neither an aten computation nor a Triton kernel. Applied to every window the learner's worker runs, not
    only the first (round 4: later calls on reused tensors reached a library unseen)."""
    aten = {op for op in w.ops if not op.startswith("triton:")}
    launched = {op for op in w.ops if op.startswith("triton:")}
    if not v.cuda and not launched and not forbidden_ops("compute", aten):
        raise _Refused(f"neither an aten computation nor a Triton kernel ran in {where} of {case.function} "
                       f"(aten: {', '.join(sorted(aten)) or 'nothing'}): the work was done outside torch and Triton "
                       "(a library reached without aten, such as NumPy or CuPy), or the recording was switched off")
    bad = forbidden_ops(case.forbid, aten)
    if bad:
        raise _Refused(f"{case.function} runs library routines this exercise asks you to write yourself "
                       f"({', '.join(bad)}, in {where})")


def _collective_refusal(case: PerfCase, w: _Window, where: str) -> None:
    """For a case run on several ranks: every rank's record of dispatched ops, in every recorded call.
    A library collective (``c10d::allreduce_``, ...) in any rank refuses; so does a rank whose record
    holds no send or receive at all (the exchange happened outside torch.distributed, or the recording
    was switched off)."""
    if case.world == 1:
        return
    if len(w.rank_ops) != case.world:
        raise _Refused(f"expected a record of the ops of each of the {case.world} ranks in {where}, got {len(w.rank_ops)}")
    for r, ops in enumerate(w.rank_ops):
        bad = forbidden_ops(case.forbid, ops)
        if bad:
            raise _Refused(f"{case.function} runs library collectives this exercise asks you to write yourself, "
                           f"in rank {r} during {where} ({', '.join(bad)})")
        if case.forbid == "collectives" and not exchanged_point_to_point(ops):
            raise _Refused(f"rank {r} sent and received nothing through torch.distributed during {where} "
                           f"(recorded: {', '.join(sorted(ops)[:8]) or 'nothing'}): the data moved some other way, "
                           "or the recording was switched off")


def _verdict(case: PerfCase, credit: float | None, reason: str, lines: list[str],
             evidence: dict[str, Any] | None = None) -> dict[str, Any]:
    """The case's :class:`mlsys.course.verdict.Verdict`, in its wire form."""
    from .verdict import Verdict

    return Verdict(case.grade_id, case.points, credit, reason, tuple(lines), evidence or {}).to_dict()


def _replayed(v: _Verdict, learner: Any, replayer: Any, prep: _Prepared, ev: dict[str, Any]) -> dict[str, Any]:
    """Record one call of the learner's function in its worker, rebuild it in the replay worker, and return
    the function the timed rounds run there (:mod:`mlsys.course.replay`). Refuses a call that cannot be
    recorded or rebuilt, a recorded call whose result is wrong, and a plan that runs forbidden ops or (for
    ``kernels = "triton"``) no Triton kernel."""
    import time

    from .perfwire import tensor_from_bytes
    from .replay import plan_kernels, plan_ops

    case = prep.case
    t0 = time.monotonic()
    seeds = v.seeds(1)
    learner.send({"op": "record", "fn": {"name": case.function}, "shapes": prep.shapes, "dtype": case.dtype,
                  "seed": seeds[0], "kwargs": case.kwargs})
    head, blobs = learner.recv(min(v.deadline, time.monotonic() + ROUND_LIMIT_S))
    learner.pause(True)  # until the case ends (grade_case resumes it): the replay and its rounds run without it
    plan, tensors = head.get("plan"), head.get("tensors") or []
    if head.get("error") or not isinstance(plan, dict) or not tensors or len(tensors) != len(blobs):
        raise _Refused(f"{case.function} could not be recorded for replay: {head.get('error') or 'no plan'}")
    out = tensor_from_bytes(tensors[0], blobs[0])
    torch = v.torch
    fp = (float(torch.sum(out, dtype=torch.float64)), float(torch.linalg.vector_norm(out, 2, dtype=torch.float64)))
    v.check_outputs(case, prep.ref_fn, prep.shapes, seeds, _Window(0.0, [fp], [], [out], None),
                    f"{case.function} (the call recorded for replay)")
    ops, kernels = plan_ops(plan), plan_kernels(plan)
    bad = forbidden_ops(case.forbid, ops)
    if bad:
        raise _Refused(f"{case.function} runs library routines this exercise asks you to write yourself "
                       f"({', '.join(bad)})")
    if case.kernels == "triton" and not kernels:
        raise _Refused(f"{case.function} launched no Triton kernel (aten ops only: {', '.join(ops[:8]) or 'none'})")
    t1 = time.monotonic()
    replayer.send({"op": "load", "plan": plan, "tensors": tensors[1:], "shapes": prep.shapes, "dtype": case.dtype},
                  blobs[1:])
    head, _ = replayer.recv(min(v.deadline, time.monotonic() + ROUND_LIMIT_S))
    if not head.get("loaded"):
        raise _Refused(f"{case.function}'s GPU work could not be rebuilt outside your process: {head.get('error')}")
    timed_fn = {"replay": head["loaded"]}
    t2 = time.monotonic()
    seeds = v.seeds(2)  # the replay checked before it is timed: a plan that does not reproduce the call says so here
    w = v.window(replayer, timed_fn, case, prep.shapes, seeds, send_outputs=True)
    try:
        v.check_outputs(case, prep.ref_fn, prep.shapes, seeds, w, f"the replay of {case.function}'s recorded call")
    except _Refused as exc:
        raise _Refused(f"{exc}. The call was right when recorded, so its GPU work is not all in what it recorded "
                       "(work done outside torch and Triton, launches that depend on the input values, or a "
                       "result kept from an earlier call)") from None
    # one untimed round as the timed ones will be: the replay worker's memory pool grows to a round's size
    # and its first rounds stop paying for it (on an H100 the first case's rounds of a 45 us kernel ran
    # 0.55-0.68 ms per call against 0.48-0.52 for the cases after it, tests/gpu_runs run 11)
    v.window(replayer, timed_fn, case, prep.shapes, v.seeds(case.repeats))
    ev["replay"] = {"kernels": kernels, "ops": ops, "steps": len(plan.get("steps") or []),
                    "record_s": round(t1 - t0, 3), "load_s": round(t2 - t1, 3), "check_s": round(time.monotonic() - t2, 3)}
    return timed_fn


def grade_case(v: _Verdict, base_worker: Any, learner: Any, prep: _Prepared, triton_names: set[str],
               remeasure: bool = True, replayer: Any = None) -> dict[str, Any]:
    """Judge one case: checked calls, interleaved timed rounds, the decisions; returns a verdict dict.

    With a ``replayer`` (a GPU, one rank) the timed rounds run in it: the learner's call is recorded once and
    replayed there (:func:`_replayed`), so the time and the kernel trace come from a process the learner's
    code never reached; without one they run in the learner's worker."""
    case = prep.case
    k = case.repeats
    fn = {"name": case.function}
    ev: dict[str, Any] = {"device": v.device, "calls_per_round": k}
    import time

    t_case = time.monotonic()
    walls: list[list[float]] = []  # per round: baseline side, learner's round, its checks (wall seconds)
    world = case.world
    try:
        seeds = v.seeds(2 * world)
        w = v.window(learner, fn, case, prep.shapes, seeds, record_ops=True, send_outputs=True, send_inputs=world == 1)
        v.check_outputs(case, prep.ref_fn, prep.shapes, seeds, w, f"{case.function} (checked call)")
        if world == 1:  # a collective works in place: its input is its output
            v.check_inputs(case, prep.shapes, seeds, w)
        _collective_refusal(case, w, "the checked calls")
        _ops_refusal(v, case, w, "the checked call")
        ev["ops"] = w.ops
        seeds = v.seeds(2 * world)
        w = v.window(learner, fn, case, prep.fresh_shapes, seeds, send_outputs=True, record_ops=True)
        _collective_refusal(case, w, "the calls on fresh shapes")
        v.check_outputs(case, prep.ref_fn, prep.fresh_shapes, seeds, w, f"{case.function} on fresh shapes")
        _ops_refusal(v, case, w, "the calls on fresh shapes")
        if world == 1:  # new values in the storage of the call before: a result kept by address is stale
            seeds = v.seeds(3)
            w = v.window(learner, fn, case, prep.shapes, seeds, send_outputs=True, same_storage=True, record_ops=True)
            v.check_outputs(case, prep.ref_fn, prep.shapes, seeds, w,
                            f"{case.function} (new values in the same input tensors)")
            _ops_refusal(v, case, w, "the calls on reused input tensors")
        ev["checked_calls_wall_s"] = round(time.monotonic() - t_case, 3)
        timed, timed_fn = learner, fn
        if replayer is not None and world == 1:
            timed, timed_fn = replayer, _replayed(v, learner, replayer, prep, ev)
            # from here the learner's processes are not needed until the next case: stopped, so nothing they
            # leave running (torch.compile's worker pool starting up, a thread) takes the CPU from the replay
        mine: list[float] = []
        traced: list[float] = []  # per round: device seconds per call the trace saw
        kernels_seen: dict[str, list[float]] = {}
        rounds = case.rounds
        r = 0
        while r < rounds:
            t0 = time.monotonic()
            learner.pause(True)
            try:
                _baseline_round(v, base_worker, prep, trace=v.trace and prep.trace_ok)
            finally:
                learner.pause(timed is not learner)  # replayed rounds: the learner's processes sleep through them
            t1 = time.monotonic()
            seeds = v.seeds(k * world)
            on_cpu = timed is learner and not v.cuda  # every call recorded: no kernel trace judges them here
            w = v.window(timed, timed_fn, case, prep.shapes, seeds, send_outputs=True, trace=v.trace,
                         record_ops=world > 1 or on_cpu)
            _collective_refusal(case, w, f"timed round {r + 1}")
            if on_cpu:
                _ops_refusal(v, case, w, f"timed round {r + 1}")
            t2 = time.monotonic()
            v.check_outputs(case, prep.ref_fn, prep.shapes, seeds, w, f"{case.function} (timed round {r + 1})")
            walls.append([round(t1 - t0, 3), round(t2 - t1, 3), round(time.monotonic() - t2, 3)])
            mine.append(w.seconds)
            over = 0.0 if v.fake else min(prep.over)
            ev["trace"] = "taken" if v.trace and prep.trace_ok else "unavailable on this machine"
            if v.trace and prep.trace_ok:
                if w.kernels is None:
                    raise _Refused(f"no kernel trace of the timed calls ({w.trace_error or 'the worker sent none'})")
                for name, (n, us) in w.kernels.items():
                    c = kernels_seen.setdefault(name, [0, 0.0])
                    c[0] += n
                    c[1] += us
                why = kernel_refusal(case.forbid, w.kernels, prep.harness, triton_names, case.kernels == "triton",
                                     k, 0.0)  # what ran, round by round; how much of the time it covers: below
                why = why or harness_refusal(w.kernels, prep.harness, prep.harness_us)
                if why:
                    raise _Refused(why)
                traced.append(traced_per_call(w.kernels, prep.harness, k))
            r += 1
            b_s = (min(prep.base) - over) / k
            if r == rounds and remeasure and rounds == case.rounds:
                m_s = (min(mine) - over) / k
                if m_s > 0 and credit_of(b_s / m_s, case) < 1.0:
                    rounds += case.rounds  # a verdict below full credit is measured again before it stands
            elif r >= 2 and rounds == case.rounds and not v.fake and sure_of_full_credit(b_s, (max(mine) - over) / k, case):
                ev["stopped_early"] = f"after {r} rounds: full credit even at the slowest round, with room to spare"
                break  # fewer rounds when every round, the slowest too, earns full credit with a margin
        over = 0.0 if v.fake else min(prep.over)
        base_s = (min(prep.base) - over) / k
        mine_s = (min(mine) - over) / k
        ev["baseline_ran_share"] = prep.ran
        ev.update(rounds_wall_s=walls, case_wall_s=round(time.monotonic() - t_case, 3), learner_rounds_s=mine, baseline_rounds_s=prep.base, overhead_rounds_s=prep.over,
                  learner_spread=spread(mine), baseline_spread=spread(prep.base), remeasured=rounds > case.rounds,
                  kernels={n[:200]: c for n, c in sorted(kernels_seen.items(), key=lambda x: -x[1][1])[:8]})
        if traced:
            noise = 0.0 if v.fake else (max(prep.over) - min(prep.over)) / k
            untraced = [(b - over) / k - t for b, t in zip(prep.base, prep.base_traced, strict=True) if t is not None]
            ev["baseline_untraced_s"] = min(untraced) if untraced else None
            why = coverage_refusal(statistics.median(traced), mine_s, noise, min(untraced) if untraced else 0.0)
            if why:
                raise _Refused(why)
        if not (mine_s > 0 and math.isfinite(mine_s)):
            raise _Refused(f"the measured time per call ({mine_s!r} s after the grader's own overhead) is not positive")
        floor_line = ""
        work = _work(case, prep.shapes, prep.itemsize)
        if v.cuda and work is not None and case.world > 1:  # a collective: its bytes over the GPU's link
            link = _link_bandwidth(v.torch)
            if link is None:
                floor_line = "; no datasheet link bandwidth for this GPU (no link floor)"
            else:
                floor = work[1] / link[1]
                ev["link_floor_s"] = floor
                floor_line = f"; link floor {floor * 1e3:.4g} ms ({link[0]})"
                if mine_s < 0.9 * floor:
                    raise _Refused(f"{case.function} took {mine_s * 1e3:.4g} ms per call, below the {floor * 1e3:.4g} ms "
                                   f"its {work[1]:.3g} bytes per rank take at {link[0]}: no real exchange runs that fast")
        elif v.cuda and work is not None:
            roof = _measured_roof(v.torch, case.dtype)
            if roof is not None:
                floor = roofline_floor(work[0], work[1], roof)
                ev["roofline_floor_s"] = floor
                floor_line = f"; roofline floor {floor * 1e3:.4g} ms ({roof.label})"
                if mine_s < 0.9 * floor:
                    raise _Refused(f"{case.function} took {mine_s * 1e3:.4g} ms per call, below the roofline bound "
                                   f"of {floor * 1e3:.4g} ms ({work[0]:.3g} FLOP, {work[1]:.3g} byte against "
                                   f"{roof.label}): no real work runs that fast")
            else:
                floor_line = "; no measured roofs for this GPU (no roofline floor)"
    except _Refused as exc:
        return _verdict(case, 0.0, f"refused: {exc}", [], ev)
    finally:
        learner.pause(False)
    share = base_s / mine_s
    credit = credit_of(share, case)
    what = "a copy of its inputs" if case.baseline == "copy" else (case.baseline_expr or case.reference)
    timer = "fake timer (CI)" if v.fake else f"verdict clock on {v.device}"
    lines = [f"{case.function}: {mine_s * 1e3:.4g} ms, baseline ({what}): {base_s * 1e3:.4g} ms, share {share:.3g} "
             f"(full credit at {case.full_at:g}, none at {case.zero_at:g}) -> credit {credit:.2f} [{timer}; "
             f"{len(mine)} rounds of {k} checked calls, spread {spread(mine):.1%} / baseline {spread(prep.base):.1%}"
             f"{', re-measured' if ev.get('remeasured') else ''}{floor_line}]"]
    return _verdict(case, credit, "", lines, ev)

def answer_cells(nb: dict[str, Any]) -> list[str]:
    """Sources of every code cell of ``nb`` that is not an autograded test cell (what the learner controls)."""
    from ..runtime.notebook import cell_source, is_autograded

    return [cell_source({"source": cell.get("source", "")}) for cell in nb.get("cells", [])
            if cell.get("cell_type") == "code" and not is_autograded(cell.get("metadata", {}).get("nbgrader"))]


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """``{"cases": {gid: spec-dict}, "cells": [sources], "fake": bool}`` -> verdicts by grade id.

    This process never executes an answer cell: the cells go to a learner worker, the baseline to a
    worker that never sees them, and every decision is taken here from what comes back.
    """
    import time

    from ..runtime.device import fake_timer

    fake = bool(job.get("fake")) or fake_timer()
    cases = [PerfCase.from_dict(gid, d) for gid, d in job["cases"].items()]
    world, too_few = _world(cases, fake)
    if too_few is not None:
        return too_few
    cells = list(job.get("cells", []))
    start = time.monotonic()
    deadline = start + float(job.get("deadline_s") or 1800)
    phases: dict[str, float] = {}

    def lap(what: str) -> None:  # where a grading's wall time goes (kept in the result, for the teacher)
        phases[what] = round(time.monotonic() - start - sum(x for k, x in phases.items() if not k.endswith("_own_s")), 3)
    workers: list[Any] = []
    verdicts: dict[str, Any] = {}
    notes: list[str] = []
    host = _learner_host(job)
    setup = {"op": "setup", "cells": cells, "fake": fake, "cell_timeout": float(job.get("cell_timeout") or 600)}
    try:
        # The baseline's first rounds are measured before any answer cell runs (the trust model): the
        # learner's worker starts (torch's import) and is paused at once; its cells are sent only after
        # every case's baseline is prepared. The clean workers' start-ups overlap this process's.
        base = _workers("baseline", fake, world)
        workers.append(base)
        base.send({"op": "setup", "cells": [], "fake": fake})
        learner = _workers("learner", fake, world, host)
        workers.append(learner)
        learner.pause(True)
        v = _Verdict(fake, deadline)
        replayer = None
        if _replay_here(v.cuda, world):
            replayer = _workers("replay", fake, 1)
            workers.append(replayer)
            replayer.send({"op": "setup", "cells": [], "fake": fake})
        lap("verdict_start")
        base.recv(deadline)
        lap("baseline_worker_start")
        prepared = _prepare_all(v, base, cases, verdicts)
        lap("baseline_prepare")
        notes = _run_cells(learner, setup, deadline, lap, phases)
        names = triton_kernel_names(cells)
        if replayer is not None:
            replayer.recv(deadline)
        for gid, prep in prepared.items():
            try:
                verdicts[gid] = grade_case(v, base, learner, prep, names, replayer=replayer)
                lap(f"case:{gid}")
            except Exception as exc:  # a dead or garbled worker: no credit, say why
                verdicts[gid] = _verdict(prep.case, 0.0, f"refused: the worker stopped answering "
                                         f"({type(exc).__name__}: {str(exc)[:200]})", [])
                learner, replayer = _restart(learner, replayer, workers, setup, fake, world, host, deadline)
    finally:
        for w in workers:  # all at once: their CUDA contexts tear down in parallel
            w.kill()
        for w in workers:
            w.close()
    return {"verdicts": verdicts, "notes": notes, "fake": fake, "phases_s": phases}


def _world(cases: list[PerfCase], fake: bool) -> tuple[int, dict[str, Any] | None]:
    """(the cases' number of ranks, None), or with a result that grades none of them where this machine has
    too few GPUs for the ranks (a measurement on too few would say nothing: not graded, rather than zero)."""
    worlds = {c.world for c in cases}
    if len(worlds) > 1:
        raise ValueError(f"a perf.toml's cases must all run on the same number of ranks, got {sorted(worlds)}")
    world = worlds.pop() if worlds else 1
    if world > 1 and not fake:
        import torch

        if torch.cuda.device_count() < world:
            from .grading import NOT_GRADED

            line = f"{NOT_GRADED} (this part needs {world} GPUs; this machine has {torch.cuda.device_count()})"
            return world, {"verdicts": {c.grade_id: _verdict(c, None, "", [line]) for c in cases}, "notes": [],
                           "fake": fake, "phases_s": {}}
    return world, None


def _run_cells(learner: Any, setup: dict[str, Any], deadline: float, lap: Any, phases: dict[str, float]) -> list[str]:
    """The answer cells run in the learner's worker (resumed for them); returns its notes (errors of the cells)."""
    learner.pause(False)
    learner.send(setup)
    head, _ = learner.recv(deadline)
    lap("learner_cells")
    if isinstance(head.get("cells_s"), (int, float)):
        phases["learner_cells_own_s"] = round(float(head["cells_s"]), 3)
    return [str(n) for n in head.get("notes", [])][:50]


def _prepare_all(v: _Verdict, base: Any, cases: list[PerfCase], verdicts: dict[str, Any]) -> dict[str, _Prepared]:
    """Every case's reference and first baseline rounds; a case the grader cannot prepare gets its verdict here."""
    prepared = {}
    for c in cases:
        try:
            prepared[c.grade_id] = _prepare(v, base, c)
        except Exception as exc:  # the grader's own failure: no credit, say why
            verdicts[c.grade_id] = _verdict(c, 0.0, f"refused: grading failed: {type(exc).__name__}: {exc}", [])
    return prepared


def _learner_host(job: dict[str, Any]) -> Any:
    """The grader host's socket for starting learner sandboxes (:mod:`mlsys.course.learnerbox`), where the
    verdict runs in a sandbox of its own; None elsewhere (learner workers then start here)."""
    fd = job.get("learner_host_fd")
    if not isinstance(fd, int) or fd < 0:
        return None
    return learnerbox.LearnerClient(fd)


def _restart(learner: Any, replayer: Any, workers: list[Any], setup: dict[str, Any], fake: bool, world: int,
             host: Any, deadline: float) -> tuple[Any, Any]:
    """A new learner worker (and replay worker: a replayed kernel may have broken its CUDA context) after one
    stopped answering; the next case gets them."""
    learner.close()
    learner = _workers("learner", fake, world, host)
    workers.append(learner)
    learner.send(setup)
    if replayer is not None:
        replayer.close()
        replayer = _workers("replay", fake, 1)
        workers.append(replayer)
        replayer.send({"op": "setup", "cells": [], "fake": fake})
        replayer.recv(deadline)
    learner.recv(deadline)
    return learner, replayer


def main() -> int:
    """``python -P -m mlsys.course.trusted`` < job JSON: one result line ``<nonce> {...}`` on the original stdout."""
    from .cellrunner import _private_stdout

    job = json.loads(sys.stdin.read())
    out = _private_stdout()  # also makes this process non-dumpable: its workers cannot reach into it
    try:
        result = run_job(job)
    except BaseException as exc:  # reported, never raised into the grader
        result = {"fatal": f"{type(exc).__name__}: {exc}"}
    out.write(f"{job['nonce']} {json.dumps(result)}\n")
    out.flush()
    os._exit(0)



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
    if case.world > 1:  # ranks the grader starts itself: nothing to preview in this one process
        print(f"{case.function}: measured by the teacher's grader on {case.world} ranks it starts itself "
              f"({'NCCL on GPUs' if has_cuda() else 'gloo under the fake timer'}), against "
              f"{case.baseline_expr or case.reference}; full credit at {case.full_at:g} of its speed, none at "
              f"{case.zero_at:g}. Nothing is timed in this notebook.")
        return Points.not_measured(case.points)
    if namespace is None:
        import __main__

        namespace = vars(__main__)
    import time

    if fake:
        os.environ["TRITON_INTERPRET"] = "1"
    v = _Verdict(fake, time.monotonic() + 3600)
    v.trace = False  # the preview's numbers are the notebook's own
    worker = _LocalWorker(namespace, v.device)
    case = replace(case, rounds=1)
    try:
        prep = _prepare(v, worker, case)
        verdict = grade_case(v, worker, worker, prep, set(), remeasure=False)
    except _Refused as exc:
        verdict = _verdict(case, 0.0, f"refused: {exc}", [])
    for line in verdict["lines"]:
        print(line)
    if verdict["reason"]:
        print(verdict["reason"])
    print("(a preview: the grader measures again in a fresh process that runs only your answer cells)")
    return Points(float(verdict["score"] or 0.0), case.points, "a preview")


if __name__ == "__main__":
    sys.exit(main())
