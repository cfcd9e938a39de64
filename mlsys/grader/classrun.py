"""Grading a class, the run: here, ``--jobs`` at a time on slots (a GPU and cores each), or as a Slurm job
array whose tasks (``teach task``) grade one submission each into the run's row store.

Moved out of :mod:`mlsys.grader.teach` (issue 48, "a size it can keep"); ``teach`` re-exports its names.
"""

from __future__ import annotations

import json
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mlsys.grader import nbgraderfork, sandbox, scratch, slurm
from mlsys.grader.classplan import Interrupted, Plan, Progress, _grade_guarded, _prepare, _StopFlag, _stored
from mlsys.grader.gradedrow import Row
from mlsys.grader.nbgraderrun import _kill_live, base_env
from mlsys.grader.rowstore import RowStore
from mlsys.grader.slots import Slot, make_slots, visible_gpus
from mlsys.grader.submission import Submission, _has_cuda, _Prepared, _RunSettings
from mlsys.runtime.paths import checkout


def run_local(plan_: Plan, prep: _Prepared, *, jobs: int = 1, timeout: float = 3600, extra: list[str] | None = None,
              feedback: bool = True, verbose: bool = True, slots: list[Slot] | None = None) -> dict[tuple[str, str], Row]:
    """Grade ``plan_.todo`` here, ``jobs`` at a time, one slot each; store each row as it finishes.

    Returns the rows that could not be stored (grader errors). Ctrl-C (or SIGTERM) ends every running
    grading with all it started, keeps every stored row, and raises :class:`Interrupted`.
    """
    from concurrent.futures import ThreadPoolExecutor

    store = RowStore(plan_.root)
    slots = slots or make_slots(jobs, gpus=_gpu_ids(prep.run), timed_on_gpu=prep.run.perf == "cuda")
    free = _queue_of(slots)
    stop = _StopFlag()
    unstored: dict[tuple[str, str], Row] = {}
    progress = Progress(len(plan_.todo), len(slots))
    counts = {"finished": 0, "failed": 0, "running": 0}
    lock = threading.Lock()
    work = prep.base.parent / "jobs"
    work.mkdir(exist_ok=True)

    def one(sub: Submission) -> None:
        if stop.is_set():
            return
        slot = free.get()
        with lock:
            counts["running"] += 1
        try:
            t0 = time.monotonic()
            row, keep = _grade_guarded(sub, prep, work, plan_.root, timeout=timeout, extra=extra or [],
                                       feedback=feedback, verbose=verbose and len(slots) == 1, slot=slot)
            if stop.is_set():  # killed by the interrupt: neither stored nor counted
                return
            took = time.monotonic() - t0
            if keep:
                store.put(sub.student, sub.lab, sub.key, _stored(row), seconds=took,
                          grader=plan_.settings.get("grader", ""))
            else:
                unstored[sub.student, sub.lab] = row
            with lock:
                progress.durations.append(took)
                counts["finished"] += 1
                counts["failed"] += row.status != "ok"
        finally:
            with lock:
                counts["running"] -= 1
            free.put(slot)

    pool = ThreadPoolExecutor(max_workers=len(slots))
    pending = {pool.submit(one, sub) for sub in plan_.todo}
    def show() -> None:
        with lock:
            progress.show(counts["finished"], counts["failed"], counts["running"])

    try:
        _wait_showing(pending, show if verbose and plan_.todo else None)
    except KeyboardInterrupt:
        raise _stopped(stop, pool, counts["finished"], len(plan_.todo)) from None
    pool.shutdown(wait=True)
    return unstored


def _stopped(stop: _StopFlag, pool: Any, finished: int, todo: int) -> Interrupted:
    """Ctrl-C (or SIGTERM) during a run: every running grading ended with all it started (no row of theirs
    stored), the pool shut down; the :class:`Interrupted` to raise, saying how many rows are kept."""
    stop.set()
    _kill_live()
    pool.shutdown(wait=True, cancel_futures=True)
    return Interrupted(f"interrupted: {finished} of {todo} graded in this run are kept; "
                       "run the same command again to grade the rest")


def _queue_of(slots: list[Slot]) -> queue.Queue:
    """The free slots, as a queue a grading takes one from and puts it back into."""
    free: queue.Queue = queue.Queue()
    for s in slots:
        free.put(s)
    return free


def _wait_showing(pending: set[Any], show: Callable[[], None] | None) -> None:
    """Wait for every future of ``pending`` (an error of one is raised here), calling ``show`` about once a
    second meanwhile."""
    from concurrent.futures import FIRST_COMPLETED, wait

    while pending:
        finished, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
        for f in finished:
            f.result()
        if show is not None:
            show()


def _gpu_ids(run: _RunSettings) -> list[str]:
    if not run.gpu and run.perf != "cuda":
        return []
    ids = visible_gpus()
    if not ids:
        try:
            import torch

            ids = [str(i) for i in range(torch.cuda.device_count())]
        except Exception:
            ids = []
    return ids


def _run_dir(root: Path) -> Path:
    d = root / ".grading" / "runs" / time.strftime("%Y%m%d-%H%M%S")
    n = 0
    while True:
        cand = d.with_name(d.name + (f"-{n}" if n else ""))
        try:
            cand.mkdir(parents=True)
            return cand
        except FileExistsError:
            n += 1


def run_slurm(plan_: Plan, options: slurm.SlurmOptions, *, needed: list[str], use_sandbox: bool, perf: str,
              limits: sandbox.Limits | None, timeout: float, extra: list[str], feedback: bool, batch: int = 1,
              verbose: bool = True, poll: float = 2.0, regrade: bool = False) -> dict[tuple[str, str], str]:
    """Grade ``plan_.todo`` as a Slurm job array; wait for it; return why each missing row is missing.

    The generated assignments and the sandbox's site are prepared once in the course folder
    (``.grading/runs/<time>/``, which every node must see at the same path, as it must the Python
    environment); each array task runs ``teach grade-task`` over ``batch`` submissions on its node and
    stores each row as it finishes. Ctrl-C cancels the array; stored rows are kept. ``regrade``: each task grades
    its submissions again even where a row with the same key is stored (one stored before this run began).
    """
    why = slurm.available()
    if why:
        raise slurm.SlurmUnavailable(f"--slurm: {why}")
    run_dir = _run_dir(plan_.root)
    prep = _prepare(plan_.root, needed, run_dir, use_sandbox=use_sandbox, perf=perf, limits=limits, gpu=False)
    shutil.rmtree(prep.run.scratch, ignore_errors=True)  # each task has its own, on its node
    batches = [plan_.todo[i:i + max(1, batch)] for i in range(0, len(plan_.todo), max(1, batch))]
    manifest = run_dir / "manifest.json"
    m = {
        "root": str(plan_.root), "base": str(prep.base), "site": str(prep.run.site), "mode": prep.run.mode,
        "perf": perf, "limits": asdict(prep.run.limits), "timeout": timeout, "extra": extra, "feedback": feedback,
        "regrade": bool(regrade), "grader": plan_.settings.get("grader", ""), "written_at": time.time(),
        "tasks": [[s.to_json() for s in b] for b in batches]}
    manifest.write_text(json.dumps(m, indent=1), encoding="utf-8")
    script = run_dir / "grade.sbatch"
    script.write_text(slurm.batch_script(
        [sys.executable, "-m", "mlsys.grader.teach", "grade-task", str(manifest)],
        env={"PYTHONPATH": str(checkout()), "PYTHONHASHSEED": "0"}, log_dir=run_dir, tasks=len(batches),
        name="mlsys-grade", options=options))
    job = slurm.submit(script, run_dir)
    if verbose:
        print(f"Slurm job array {job}: {len(batches)} task(s) of up to {max(1, batch)} submission(s); "
              f"logs in {run_dir}", flush=True)
    store = RowStore(plan_.root)
    progress = Progress(len(plan_.todo), options.max_running or len(batches), label=f"grading (Slurm job {job})")
    seen: set[tuple[str, str]] = set()
    try:
        while True:
            active = slurm.active_tasks(job)
            for s in plan_.todo:
                if (s.student, s.lab) not in seen and _stored_in_run(store, s, m):
                    seen.add((s.student, s.lab))
                    took = store.seconds(s.student, s.lab)
                    if took is not None:
                        progress.durations.append(took)
            if verbose:
                failed = sum(1 for s in plan_.todo if (s.student, s.lab) in seen
                             and (store.get(s.student, s.lab, s.key) or {}).get("status") != "ok")
                progress.show(len(seen), failed, sum(st == "RUNNING" for st in active.values()))
            if not active:
                break
            time.sleep(poll)
    except KeyboardInterrupt:
        slurm.cancel(job)
        raise Interrupted(f"interrupted: Slurm job {job} cancelled; {len(seen)} row(s) stored are kept; "
                          "run the same command again to grade the rest") from None
    return _missing_rows(job, batches, store, m, run_dir, verbose)


def _missing_rows(job: str, batches: list[list[Submission]], store: RowStore, m: dict[str, Any], run_dir: Path,
                  verbose: bool) -> dict[tuple[str, str], str]:
    """After the array ended: why each submission whose row its task did not store is missing (the task's Slurm
    state and the last line of its log), said on stderr too when ``verbose``."""
    missing: dict[tuple[str, str], str] = {}
    for i, b in enumerate(batches):
        lost = [s for s in b if not _stored_in_run(store, s, m)]
        if not lost:
            continue
        state = slurm.task_state(job, i)
        log = run_dir / f"task-{i}.log"
        tail = ""
        if log.is_file():
            lines = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
            tail = f"; its log ends: {lines[-1][:300]}" if lines else "; its log is empty"
        reason = f"Slurm task {job}_{i} ended {state} without this row{tail} (log {log}); run again to retry"
        if verbose:
            print(f"task {job}_{i} ({', '.join(f'{s.student}/{s.lab}' for s in lost)}): {state}{tail}",
                  file=sys.stderr, flush=True)
        for s in lost:
            missing[s.student, s.lab] = reason
    return missing


def grade_task(manifest: Path, index: int) -> int:
    """One Slurm array task: grade batch ``index`` of ``manifest`` on this node, storing each row.

    Rows already stored with the same key (an earlier, interrupted array) are skipped. Exit status 0
    when every row of the batch is stored, 1 otherwise (the last line of the log says why).
    """
    m = json.loads(Path(manifest).read_text(encoding="utf-8"))
    root = Path(m["root"])
    subs = [Submission.from_json(d) for d in m["tasks"][index]]
    store = RowStore(root)
    gpu = _has_cuda()
    ok = True
    with scratch.grading_folder("mlsys-grade-task-") as tmp, nbgraderfork.session(base_env()):
        scratch_dir = Path(tmp) / "scratch"
        scratch_dir.mkdir()
        run = _RunSettings(mode=m["mode"], site=Path(m["site"]), scratch=scratch_dir, perf=m["perf"], gpu=gpu,
                           limits=sandbox.Limits(**m["limits"]))
        prep = _Prepared(Path(m["base"]), run)
        work = Path(tmp) / "jobs"
        work.mkdir()
        for sub in subs:
            if _stored_in_run(store, sub, m):
                print(f"{sub.student}/{sub.lab}: already graded, kept", flush=True)
                continue
            t0 = time.monotonic()
            row, keep = _grade_guarded(sub, prep, work, root, timeout=m["timeout"], extra=m["extra"],
                                       feedback=m["feedback"], verbose=True)
            if keep:
                store.put(sub.student, sub.lab, sub.key, _stored(row), seconds=time.monotonic() - t0,
                          grader=m.get("grader", ""))
                print(f"{sub.student}/{sub.lab}: {row.status}, {row.summary}", flush=True)
            else:
                ok = False
                print(f"{sub.student}/{sub.lab}: {row.reason}", flush=True)
    return 0 if ok else 1


def _stored_in_run(store: RowStore, sub: Submission, manifest: dict[str, Any]) -> bool:
    """Whether ``sub`` needs no grading in this array task: a row with its key was stored after the run's manifest
    was written (by an earlier attempt of this same run). A row stored before the run does not count: every
    submission of the manifest is one the plan decided to grade (new, changed, ``--regrade``, or its outputs lost)."""
    rec = store.stored(sub.student, sub.lab)
    if rec is None or rec.get("key") != sub.key:
        return False
    return float(rec.get("stored_at") or 0) >= float(manifest.get("written_at") or 0)
