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

    from mlsys.grader.decide.trusted import grade_performance
    grade_performance("lab2_tiled_matmul", "perf_matmul")

In the learner's notebook that call is a *preview* (same checks, in the notebook's own process; no
GPU: it prints :data:`mlsys.labkit.grading.NOT_GRADED`). When the teacher grades, the cell's output
is replaced by the verdict of :func:`main`, run by ``make grade`` in the submission's sandbox. That
process (the *verdict process*) never executes an answer cell (``docs/GRADING_PERFORMANCE.md`` is
the trust model):

1. it starts two workers (:mod:`mlsys.grader.clean.perfworker`): a *baseline* worker that never sees an
   answer cell, and a *learner* worker that runs the answer cells. The baseline's first rounds are
   measured before any answer cell runs (the learner's worker gets its cells only then), and every later
   baseline round with the learner's processes paused; a baseline round whose worker was not runnable
   for :data:`RAN_SHARE` of it is measured again. Under ``make grade`` the learner's workers run in a
   sandbox of their own as another user (:mod:`mlsys.grader.learnerbox`), paused by their cgroup's
   freezer: they share no uid, ``/tmp``, compiler cache or PID namespace with this process and its
   clean workers, which they can neither signal nor feed a file;
2. each checked call gets inputs drawn from seeds the verdict process chose (new storage, new
   values); the worker returns exact ``torch.Tensor`` results as raw bytes
   (:mod:`mlsys.grader.clean.perfwire`), which are compared with the verdict's own reference, every call;
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
   (its aten ops and Triton kernels, :mod:`mlsys.grader.clean.replay`) and a *replay* worker that never saw an
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
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from mlsys.grader import learnerbox

# What moved out of this module (issue 48, "a size it can keep"), importable from here as before: the public
# names are in __all__, the private ones (tests and the learner's preview use them) are kept by the noqa.
from mlsys.grader.decide.perfboxes import (  # noqa: F401
    ROUND_LIMIT_S,
    SHARED_BYTES,
    _LocalWorker,
    _ProcWorker,
    _RankGroup,
    _RemoteBox,
    _workers,
)
from mlsys.grader.decide.perfrounds import (  # noqa: F401
    FAKE_SECONDS,
    _baseline_round,
    _clean_window,
    _collective_refusal,
    _coverage_check,
    _link_bandwidth,
    _measured_roof,
    _ops_refusal,
    _prepare,
    _Prepared,
    _Refused,
    _replayed,
    _shapes,
    _uncovered,
    _Verdict,
    _verdict,
    _Window,
    _work,
    ranks_inputs,
)
from mlsys.grader.decide.perfrules import (
    ALWAYS_ALLOWED_KERNELS,
    FULL_CREDIT_MARGIN,
    GRADER_KERNEL_PREFIX,
    LIBRARY_ONLY_MARKS,
    RAN_SHARE,
    STOPPED_S,
    TRACE_SLACK_S,
    VENDOR_KERNEL_MARKS,
    coverage_refusal,
    credit_of,
    did_not_run,
    exchanged_point_to_point,
    forbidden_ops,
    harness_refusal,
    kernel_refusal,
    roofline_floor,
    spread,
    sure_of_full_credit,
    traced_per_call,
    triton_kernel_names,
)
from mlsys.grader.decide.perfspec import PerfCase, find_spec, load_spec

__all__ = ["PerfCase", "answer_cells", "load_spec", "find_spec", "grade_case", "grade_performance", "run_job", "main",
           "FAKE_SECONDS", "VENDOR_KERNEL_MARKS",
           "forbidden_ops", "exchanged_point_to_point", "kernel_refusal", "traced_per_call", "coverage_refusal", "triton_kernel_names", "roofline_floor", "credit_of", "spread",
           "sure_of_full_credit", "FULL_CREDIT_MARGIN",
           "harness_refusal", "did_not_run", "ranks_inputs", "ALWAYS_ALLOWED_KERNELS", "GRADER_KERNEL_PREFIX",
           "LIBRARY_ONLY_MARKS", "RAN_SHARE", "STOPPED_S", "TRACE_SLACK_S", "ROUND_LIMIT_S", "SHARED_BYTES"]

REPLAY_ENV = "MLSYS_GRADER_REPLAY"
"""Where a one-rank case is timed by replaying the learner's recorded call in a clean worker
(:mod:`mlsys.grader.clean.replay`) rather than in the learner's own process: ``gpu`` (the default: on a GPU),
``always`` (on a CPU too: tests, for functions made of aten ops, since the Triton interpreter's kernels
run no aten op a plan could hold) or ``off`` (the learner's own process; only to measure what replay costs)."""


def _replay_here(cuda: bool, world: int) -> bool:
    mode = os.environ.get(REPLAY_ENV, "gpu")
    if mode not in ("gpu", "always", "off"):
        raise ValueError(f"{REPLAY_ENV} must be gpu, always or off, got {mode!r}")
    return world == 1 and (mode == "always" or (mode == "gpu" and cuda))

# What each kind of exercise may dispatch lives in mlsys.labkit.policy (one table for the test cells and here).





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
    try:
        _checked_calls(v, learner, fn, prep, ev)
        ev["checked_calls_wall_s"] = round(time.monotonic() - t_case, 3)
        timed, timed_fn = learner, fn
        if replayer is not None and case.world == 1:
            timed, timed_fn = replayer, _replayed(v, learner, replayer, prep, ev)
            # from here the learner's processes are not needed until the next case: stopped, so nothing they
            # leave running (torch.compile's worker pool starting up, a thread) takes the CPU from the replay
        mine, traced, kernels_seen, rounds = _timed_rounds(v, base_worker, learner, timed, timed_fn, prep,
                                                           triton_names, remeasure, ev, walls)
        if remeasure and _uncovered(v, prep, traced, mine):  # measured again before the refusal stands
            more = _timed_rounds(v, base_worker, learner, timed, timed_fn, prep, triton_names, False, ev, walls)
            mine, traced, rounds = mine + more[0], traced + more[1], rounds + more[3]
            for name, (n, us) in more[2].items():
                c = kernels_seen.setdefault(name, [0, 0.0])
                c[0], c[1] = c[0] + n, c[1] + us
            ev["remeasured_for_coverage"] = True
        over = 0.0 if v.fake else min(prep.over)
        base_s = (min(prep.base) - over) / k
        mine_s = (min(mine) - over) / k
        ev["baseline_ran_share"] = prep.ran
        ev.update(rounds_wall_s=walls, case_wall_s=round(time.monotonic() - t_case, 3), learner_rounds_s=mine, baseline_rounds_s=prep.base, overhead_rounds_s=prep.over,
                  learner_spread=spread(mine), baseline_spread=spread(prep.base), remeasured=rounds > case.rounds,
                  kernels={n[:200]: c for n, c in sorted(kernels_seen.items(), key=lambda x: -x[1][1])[:8]})
        _coverage_check(v, prep, traced, mine_s, ev)
        if not (mine_s > 0 and math.isfinite(mine_s)):
            raise _Refused(f"the measured time per call ({mine_s!r} s after the grader's own overhead) is not positive")
        floor_line = _floor_check(v, case, prep, mine_s, ev)
    except _Refused as exc:
        return _verdict(case, 0.0, f"refused: {exc}", [], ev)
    finally:
        learner.pause(False)
    credit, line = _credit_line(v, prep, base_s, mine_s, mine, floor_line, ev)
    return _verdict(case, credit, "", [line], ev)


def _checked_calls(v: _Verdict, learner: Any, fn: dict[str, Any], prep: _Prepared, ev: dict[str, Any]) -> None:
    """The calls checked before any is timed, in the learner's worker with their ops recorded: the case's
    shapes (inputs left as they were, one rank), fresh shapes, and (one rank) new values in the storage of the
    call before, so a result kept by address is stale. Raises :class:`_Refused` on a wrong output or a
    forbidden op or collective; records the first call's ops in ``ev``."""
    case, world = prep.case, prep.case.world
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


def _timed_rounds(v: _Verdict, base_worker: Any, learner: Any, timed: Any, timed_fn: Any, prep: _Prepared,
                  triton_names: set[str], remeasure: bool, ev: dict[str, Any],
                  walls: list[list[float]]) -> tuple[list[float], list[float], dict[str, list[float]], int]:
    """The timed rounds, each a baseline round (the learner paused) then a window of ``case.repeats`` calls in
    ``timed`` (the learner's worker, or the replayer), checked and judged by its kernel trace. A verdict below
    full credit after ``case.rounds`` rounds is measured again as many rounds more (``remeasure``); from the
    second round, rounds stop once even the slowest earns full credit with a margin. Returns each round's
    seconds, the traced device seconds per call of each round, the kernels seen (calls, us) and the rounds
    planned."""
    import time

    case, world, k = prep.case, prep.case.world, prep.case.repeats
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
            traced.append(_judge_trace(w, prep, triton_names, kernels_seen))
        r += 1
        b_s = (min(prep.base) - over) / k
        if r == rounds and remeasure and rounds == case.rounds:
            m_s = (min(mine) - over) / k
            if m_s > 0 and credit_of(b_s / m_s, case) < 1.0:
                rounds += case.rounds  # a verdict below full credit is measured again before it stands
        elif r >= 2 and rounds == case.rounds and not v.fake and sure_of_full_credit(b_s, (max(mine) - over) / k, case):
            ev["stopped_early"] = f"after {r} rounds: full credit even at the slowest round, with room to spare"
            break  # fewer rounds when every round, the slowest too, earns full credit with a margin
    return mine, traced, kernels_seen, rounds


def _judge_trace(w: _Window, prep: _Prepared, triton_names: set[str], kernels_seen: dict[str, list[float]]) -> float:
    """One timed round's kernel trace judged: which kernels ran (added to ``kernels_seen``: calls, us), and the
    grader's own harness kernels' time. Raises :class:`_Refused` on a missing trace or a refused kernel;
    returns the traced device seconds per call (how much of the time it covers is judged after the rounds)."""
    case, k = prep.case, prep.case.repeats
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
    return traced_per_call(w.kernels, prep.harness, k)


def _floor_check(v: _Verdict, case: PerfCase, prep: _Prepared, mine_s: float, ev: dict[str, Any]) -> str:
    """On a GPU, refuse a time per call below what the work can take: a collective's bytes over the GPU's
    datasheet link, other work's FLOP and bytes against the measured roofline (0.9 of either floor).
    Returns the verdict line's note on the floor (empty on a CPU)."""
    work = _work(case, prep.shapes, prep.itemsize)
    if v.cuda and work is not None and case.world > 1:  # a collective: its bytes over the GPU's link
        link = _link_bandwidth(v.torch)
        if link is None:
            return "; no datasheet link bandwidth for this GPU (no link floor)"
        floor = work[1] / link[1]
        ev["link_floor_s"] = floor
        if mine_s < 0.9 * floor:
            raise _Refused(f"{case.function} took {mine_s * 1e3:.4g} ms per call, below the {floor * 1e3:.4g} ms "
                           f"its {work[1]:.3g} bytes per rank take at {link[0]}: no real exchange runs that fast")
        return f"; link floor {floor * 1e3:.4g} ms ({link[0]})"
    if v.cuda and work is not None:
        roof = _measured_roof(v.torch, case.dtype)
        if roof is None:
            return "; no measured roofs for this GPU (no roofline floor)"
        floor = roofline_floor(work[0], work[1], roof)
        ev["roofline_floor_s"] = floor
        if mine_s < 0.9 * floor:
            raise _Refused(f"{case.function} took {mine_s * 1e3:.4g} ms per call, below the roofline bound "
                           f"of {floor * 1e3:.4g} ms ({work[0]:.3g} FLOP, {work[1]:.3g} byte against "
                           f"{roof.label}): no real work runs that fast")
        return f"; roofline floor {floor * 1e3:.4g} ms ({roof.label})"
    return ""


def _credit_line(v: _Verdict, prep: _Prepared, base_s: float, mine_s: float, mine: list[float], floor_line: str,
                 ev: dict[str, Any]) -> tuple[float, str]:
    """The credit of the learner's share of the baseline's time, and the verdict's line that says how it
    was reached (times, share, thresholds, timer, rounds, spreads, re-measurement, floor)."""
    case, k = prep.case, prep.case.repeats
    share = base_s / mine_s
    credit = credit_of(share, case)
    what = "a copy of its inputs" if case.baseline == "copy" else (case.baseline_expr or case.reference)
    timer = "fake timer (CI)" if v.fake else f"verdict clock on {v.device}"
    line = (f"{case.function}: {mine_s * 1e3:.4g} ms, baseline ({what}): {base_s * 1e3:.4g} ms, share {share:.3g} "
            f"(full credit at {case.full_at:g}, none at {case.zero_at:g}) -> credit {credit:.2f} [{timer}; "
            f"{len(mine)} rounds of {k} checked calls, spread {spread(mine):.1%} / baseline {spread(prep.base):.1%}"
            f"{', re-measured' if ev.get('remeasured') else ''}{floor_line}]")
    return credit, line


def answer_cells(nb: dict[str, Any]) -> list[str]:
    """Sources of every code cell of ``nb`` that is not an autograded test cell (what the learner controls)."""
    from mlsys.runtime.notebook import cell_source, is_autograded

    return [cell_source({"source": cell.get("source", "")}) for cell in nb.get("cells", [])
            if cell.get("cell_type") == "code" and not is_autograded(cell.get("metadata", {}).get("nbgrader"))]


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """``{"cases": {gid: spec-dict}, "cells": [sources], "fake": bool}`` -> verdicts by grade id.

    This process never executes an answer cell: the cells go to a learner worker, the baseline to a
    worker that never sees them, and every decision is taken here from what comes back.
    """
    import time

    from mlsys.runtime.device import fake_timer

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
        base, learner, v, replayer = _start_workers(fake, world, host, deadline, workers)
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


def _start_workers(fake: bool, world: int, host: Any, deadline: float, workers: list[Any]) -> tuple[Any, Any, _Verdict, Any]:
    """The baseline worker, the learner's worker (paused at once), this process's verdict state and, where a
    one-rank case is replayed (:data:`REPLAY_ENV`), the replay worker; each worker is appended to ``workers``
    as it starts, so that the caller ends every one that started.

    The baseline's first rounds are measured before any answer cell runs (the trust model): the learner's
    worker starts (torch's import) and is paused at once; its cells are sent only after every case's baseline
    is prepared. On a CPU with the fake timer the clean workers are forks of this process after its ``import torch``
    (:func:`mlsys.grader.clean.workerfork.may_fork`); elsewhere their start-ups overlap this process's."""
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
    return base, learner, v, replayer


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
            from mlsys.labkit.grading import NOT_GRADED

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
    """The grader host's socket for starting learner sandboxes (:mod:`mlsys.grader.learnerbox`), where the
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
    """``python -P -m mlsys.grader.decide.trusted`` < job JSON: one result line ``<nonce> {...}`` on the original stdout."""
    from mlsys.runtime.processes import private_stdout

    job = json.loads(sys.stdin.read())
    out = private_stdout()  # also makes this process non-dumpable: its workers cannot reach into it
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
    a :class:`mlsys.labkit.grading.Points`: a bare number for nbgrader, a sentence in the notebook).

    Without CUDA (and no fake timer) prints :data:`mlsys.labkit.grading.NOT_GRADED` and returns 0.0.
    The teacher's grader ignores what this prints and re-measures in a fresh process (see above).
    """
    from mlsys.labkit.grading import NOT_GRADED, Points
    from mlsys.runtime.device import fake_timer, has_cuda

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
