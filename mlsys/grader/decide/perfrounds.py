"""One case's evidence, gathered by the verdict process (:mod:`mlsys.grader.decide.trusted`): its state
(:class:`_Verdict`: own torch, clock and seeds), the clean baseline's preparation, timed windows of
rounds, the checked calls' op and collective refusals, and the replay of a recorded call.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from mlsys.grader.decide.perfboxes import ROUND_LIMIT_S
from mlsys.grader.decide.perfrules import (
    coverage_refusal,
    did_not_run,
    exchanged_point_to_point,
    forbidden_ops,
    traced_per_call,
)
from mlsys.grader.decide.perfspec import PerfCase

FAKE_SECONDS = 1e-3
"""What the fake timer reports for every timed callable (seconds per call)."""


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
               "same_storage": same_storage, "flush_l2": self.cuda}  # every GPU round: the read sweep, both sides
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
            from mlsys.grader.clean.perfwire import tensor_from_bytes

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
        from mlsys.grader.clean.perfwire import tensor_from_bytes, tensor_from_shared

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
        from mlsys.grader.clean.perfworker import make_inputs

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
        from mlsys.grader.clean.perfworker import make_inputs

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
    from mlsys.grader.clean.perfworker import make_inputs

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
    from mlsys.grader.clean.perfworker import make_inputs

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
    """The case's :class:`mlsys.grader.decide.verdict.Verdict`, in its wire form."""
    from mlsys.grader.decide.verdict import Verdict

    return Verdict(case.grade_id, case.points, credit, reason, tuple(lines), evidence or {}).to_dict()


def _replayed(v: _Verdict, learner: Any, replayer: Any, prep: _Prepared, ev: dict[str, Any]) -> dict[str, Any]:
    """Record one call of the learner's function in its worker, rebuild it in the replay worker, and return
    the function the timed rounds run there (:mod:`mlsys.grader.clean.replay`). Refuses a call that cannot be
    recorded or rebuilt, a recorded call whose result is wrong, and a plan that runs forbidden ops or (for
    ``kernels = "triton"``) no Triton kernel."""
    import time

    from mlsys.grader.clean.perfwire import tensor_from_bytes
    from mlsys.grader.clean.replay import plan_kernels, plan_ops

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


def _uncovered(v: _Verdict, prep: _Prepared, traced: list[float], mine: list[float]) -> bool:
    """Whether :func:`_coverage_check` would refuse the rounds so far (their fastest, after the grader's own
    overhead). Such a refusal is measured again, as many rounds more, before it stands: on an H100 (2026-12-02)
    the honest ``double`` of the tiny lab (a 41 us add traced) was refused in 2 of 5 gradings on a fastest
    round of 1.3-1.5 ms per call, while the same cell earned full credit in the others; hidden work costs
    time in every round, so more rounds can only clear a figure that noise made."""
    if not traced or v.fake:
        return False
    mine_s = (min(mine) - min(prep.over)) / prep.case.repeats
    try:
        _coverage_check(v, prep, traced, mine_s, {})
    except _Refused:
        return True
    return False


def _coverage_check(v: _Verdict, prep: _Prepared, traced: list[float], mine_s: float, ev: dict[str, Any]) -> None:
    """Refuse a time per call that the kernel trace does not account for (:func:`coverage_refusal`), the
    baseline's own untraced time allowed, and as noise how much the overhead rounds varied and how much the
    baseline's untraced time varied between its rounds (a clean worker that never ran learner code: what the
    machine does to any round). On an H200 (2026-12-02) the tiny lab's 64 MiB ``double`` carried 0.9-1.2 ms per
    call of untraced time in the baseline's three rounds and 1.0-1.4 ms in the honest learner's; a refusal on
    that spread alone was noise. Nothing is judged without a trace."""
    if not traced:
        return
    k = prep.case.repeats
    over = 0.0 if v.fake else min(prep.over)
    untraced = [(b - over) / k - t for b, t in zip(prep.base, prep.base_traced, strict=True) if t is not None]
    noise = 0.0 if v.fake else (max(prep.over) - min(prep.over)) / k + (max(untraced) - min(untraced) if untraced else 0.0)
    ev["baseline_untraced_s"] = min(untraced) if untraced else None
    why = coverage_refusal(statistics.median(traced), mine_s, noise, min(untraced) if untraced else 0.0)
    if why:
        raise _Refused(why)
