"""Grading a class, end to end (``teach grade``): plan, run (here or on Slurm), the report (grades.csv), the
gradebook kept in step, formgrader's scores of the written answers taken back.

Moved out of :mod:`mlsys.grader.teach` (issue 48, "a size it can keep"); ``teach`` re-exports its names.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

from mlsys.grader import gradebook, nbgraderfork, sandbox, scratch, slurm
from mlsys.grader.classplan import Interrupted, Plan, _pending, _prepare, plan
from mlsys.grader.classrun import _gpu_ids, run_local, run_slurm
from mlsys.grader.gradedrow import Row, _pts, summarize, write_csv
from mlsys.grader.nbgraderrun import _kill_live, base_env, register
from mlsys.grader.release import known_labs
from mlsys.grader.rowstore import RowStore, grader_digest
from mlsys.grader.slots import make_slots
from mlsys.grader.submission import _has_cuda, _perf_mode, _RunSettings, _sha
from mlsys.runtime.paths import labs_root


def report(plan_: Plan, out_csv: Path, *, unstored: dict[tuple[str, str], Row] | None = None,
           missing: dict[tuple[str, str], str] | None = None) -> list[Row]:
    """Gather the rows of ``plan_`` (stored, unstored, or pending with why) into ``out_csv``.

    Rows of labs this plan does not grade are kept as they were; the plan's labs are replaced whole.
    """
    store = RowStore(plan_.root)
    unstored, missing = unstored or {}, missing or {}
    rows = list(plan_.problems)
    for sub in plan_.done + plan_.todo:
        d = store.get(sub.student, sub.lab, sub.key)
        if d is not None:
            rows.append(Row(**d))
        elif (sub.student, sub.lab) in unstored:
            rows.append(unstored[sub.student, sub.lab])
        else:
            rows.append(_pending(sub, missing.get((sub.student, sub.lab),
                                                  "not graded yet (the run was interrupted); run the same "
                                                  "command again to grade it")))
    rows.sort(key=lambda r: (r.student, r.lab))
    try:
        _sync_gradebook(plan_, rows)
    except Exception as exc:  # the CSV is written whatever happens to the gradebook
        print(f"warning: the course gradebook {plan_.root / 'gradebook.db'} was not updated "
              f"({type(exc).__name__}: {exc}); grades.csv has the autograded scores", file=sys.stderr)
    write_csv(rows, out_csv, keep_other_labs=True)
    return rows


def _sync_gradebook(plan_: Plan, rows: list[Row]) -> None:
    """One gradebook (:mod:`mlsys.grader.gradebook`): record every graded row of ``plan_`` that the course
    gradebook lacks or that this run graded (each lab registered first, where ``make release`` did not), then
    take the scores a teacher entered in formgrader into the rows: written answers as ``manual_score``, an
    override of an autograded cell in place of its score; ``total_score`` and the summary follow."""
    root = plan_.root
    fresh = {(s.student, s.lab) for s in plan_.todo}
    for lab in sorted({r.lab for r in rows if r.status == "ok"}):
        mine = [r for r in rows if r.lab == lab and r.status == "ok"
                and (root / "autograded" / r.student / lab / f"{lab}.ipynb").is_file()]
        if not mine:
            continue
        if not gradebook.has_assignment(root, lab):
            warnings = register(root, [lab])
            for line in warnings:
                print(f"warning: {line}", file=sys.stderr)
            if warnings:
                continue
        known = gradebook.cell_scores(root, lab)
        for r in mine:
            if (r.student, lab) in fresh or r.student not in known:
                gradebook.record(root, r.student, lab, root / "autograded" / r.student / lab / f"{lab}.ipynb")
        scores = gradebook.cell_scores(root, lab)
        for r in mine:
            _take_teacher_scores(r, scores.get(r.student, []))


def _take_teacher_scores(row: Row, cells: list[gradebook.CellScore]) -> None:
    """Fold the gradebook's teacher-entered scores of one submission into ``row`` (see :func:`_sync_gradebook`)."""
    written = [c for c in cells if c.written]
    graded = [c for c in written if c.manual is not None]
    row.manual_score = sum(c.manual for c in graded) if graded else ""  # type: ignore[misc]
    for c in cells:  # a teacher's override of an autograded cell: nbgrader's score is the manual one
        if not c.written and c.manual is not None and c.auto is not None and c.manual != c.auto:
            delta = c.manual - c.auto
            if c.grade_id.startswith("perf_") and row.performance == "graded":
                row.performance_score = float(row.performance_score or 0) + delta
            elif not c.grade_id.startswith("perf_"):
                row.correctness_score += delta
    perf = float(row.performance_score or 0) if row.performance == "graded" else 0.0
    row.total_score = row.correctness_score + perf + float(row.manual_score or 0)
    row.summary = summarize(row)
    if graded and len(graded) < len(written):
        pending = sum(c.max for c in written if c.manual is None)
        row.summary += f" graded so far ({_pts(pending)} points pending)"


@functools.lru_cache(maxsize=8)
def _grader(config: Path) -> str:
    return grader_digest(config)


def _settings_key(*, perf: str, use_sandbox: bool, timeout: float, cell_timeout: int | None,
                  feedback: bool, root: Path | None = None) -> dict[str, Any]:
    """What a stored row's key holds besides the submission and its lab: these settings and the grader's
    digest (:func:`mlsys.grader.rowstore.grader_digest` of the course's nbgrader_config.py)."""
    # normalised, so that `--timeout 300` (CLI, a float) and timeout=300 (Python, an int) are one key
    return {"perf": perf, "sandbox": bool(use_sandbox), "timeout": float(timeout),
            "cell_timeout": None if cell_timeout is None else int(cell_timeout), "feedback": bool(feedback),
            "grader": _grader((root or labs_root()) / "nbgrader_config.py")}


def grade(root: Path | None = None, *, submitted: Path | None = None, out_csv: Path | None = None,
          timeout: float = 3600, cell_timeout: int | None = None, labs: list[str] | None = None,
          feedback: bool = True, jobs: int = 1, verbose: bool = True, use_sandbox: bool = True,
          perf: str | None = None, limits: sandbox.Limits | None = None, regrade: bool = False,
          slurm_options: slurm.SlurmOptions | None = None, batch: int = 1) -> list[Row]:
    """Autograde every ``submitted/<student>/<lab>/<lab>.ipynb``; update the CSV; return the rows.

    ``timeout`` bounds one submission's whole run (seconds; cells run before it keep their points);
    ``cell_timeout`` overrides the per-cell limit from nbgrader_config.py; ``jobs`` submissions are
    graded at a time, each pinned to a GPU of its own and a share of the CPU cores
    (:mod:`mlsys.grader.slots`). ``slurm_options`` grades on a Slurm cluster instead, as a job array
    of ``batch`` submissions per task (:func:`run_slurm`). ``use_sandbox=False`` runs student code
    unconfined (logged loudly). ``perf`` is "cuda", "fake" (deterministic fake timer, for CI) or
    "off"; default: "cuda" where CUDA is present (on Slurm: where ``--gres`` asks for a GPU), "fake"
    if ``MLSYS_FAKE_TIMER=1``, else "off". Results go to ``autograded/`` and ``feedback/`` under
    ``root`` and to ``out_csv`` (default ``root/grades.csv``), where rows of labs not graded in this
    run are kept. A submission graded before with the same files, instructor version and settings is
    not graded again (``regrade`` forces it). Raises :class:`mlsys.grader.sandbox.SandboxUnavailable`
    when bubblewrap cannot run and ``use_sandbox`` is true, :class:`Interrupted` on Ctrl-C.
    """
    root = (root or labs_root()).resolve()
    out_csv = out_csv or root / "grades.csv"
    perf, settings = _checked_settings(root, use_sandbox=use_sandbox, slurm_options=slurm_options, perf=perf,
                                       timeout=timeout, cell_timeout=cell_timeout, feedback=feedback, labs=labs,
                                       submitted=submitted)
    p = plan(root, submitted=submitted, labs=labs, settings=settings, regrade=regrade)
    if verbose:
        _say_plan(p)
    extra = [f"--Execute.timeout={int(cell_timeout)}"] if cell_timeout else []
    unstored: dict[tuple[str, str], Row] = {}
    missing: dict[tuple[str, str], str] = {}
    before = _handed_in(p)
    needed = sorted({s.lab for s in p.todo})
    try:
        if p.todo and slurm_options is not None:
            missing = run_slurm(p, slurm_options, needed=needed, use_sandbox=use_sandbox, perf=perf, limits=limits,
                                timeout=timeout, extra=extra, feedback=feedback, batch=batch, verbose=verbose,
                                regrade=regrade)
        elif p.todo:
            with scratch.grading_folder("mlsys-grade-") as tmp, nbgraderfork.session(base_env()):
                gpu = _has_cuda()
                slots = make_slots(jobs, gpus=_gpu_ids(_RunSettings("none", Path(tmp), Path(tmp), perf, gpu)),
                                   timed_on_gpu=perf == "cuda")
                prep = _prepare(root, needed, Path(tmp), use_sandbox=use_sandbox, perf=perf, limits=limits, gpu=gpu)
                unstored = run_local(p, prep, timeout=timeout, extra=extra, feedback=feedback, verbose=verbose,
                                     slots=slots)
    except KeyboardInterrupt:  # while preparing, before any grading started
        _kill_live()
        report(p, out_csv, unstored=unstored)
        raise Interrupted("interrupted before grading started; run the same command again") from None
    except Interrupted:
        report(p, out_csv, unstored=unstored)
        raise
    after = {q: _sha(q) for q in before if q.is_file()}
    if after != before:  # a safety net: grading must never change what students handed in
        raise RuntimeError("a submitted file changed during grading; this is a bug in mlsys.grader.teach")
    return report(p, out_csv, unstored=unstored, missing=missing)


def _checked_settings(root: Path, *, use_sandbox: bool, slurm_options: slurm.SlurmOptions | None, perf: str | None,
                      timeout: float, cell_timeout: int | None, feedback: bool, labs: list[str] | None,
                      submitted: Path | None) -> tuple[str, dict[str, Any]]:
    """Before a run: the sandbox checked (or its absence said loudly), the performance mode decided (on Slurm: a
    GPU where ``--gres`` asks for one), the labs and the submitted folder checked; returns the mode and the
    settings every row's key holds."""
    if use_sandbox:
        sandbox.check()
    else:
        print(sandbox.NO_SANDBOX_WARNING, file=sys.stderr, flush=True)
    if slurm_options is not None and perf is None and os.environ.get("MLSYS_FAKE_TIMER") != "1":
        perf = "cuda" if "gpu" in (slurm_options.gres or "") else "off"
    perf = _perf_mode(perf)
    settings = _settings_key(perf=perf, use_sandbox=use_sandbox, timeout=timeout, cell_timeout=cell_timeout,
                             feedback=feedback, root=root)
    if labs:
        known_labs(root, labs)
    if submitted is not None and not Path(submitted).is_dir():
        raise ValueError(f"--submitted {submitted}: no such folder (expected <student>/<lab>/<lab>.ipynb in it)")
    return perf, settings


def _say_plan(p: Plan) -> None:
    """How many submissions a run grades, keeps and cannot grade, and why stored rows are graded again."""
    print(f"{len(p.todo)} submission(s) to grade, {len(p.done)} unchanged since they were graded (kept), "
          f"{len(p.problems)} that cannot be graded", flush=True)
    for why, n in sorted(p.again.items()):
        print(f"  {n} graded again: {why}", flush=True)


def _handed_in(p: Plan) -> dict[Path, str]:
    """A digest of every file the run's submissions hold (links left out): grading must never change one."""
    return {q: _sha(q) for s in p.todo for f in s.files() for q in ([f] if f.is_file() else f.rglob("*"))
            if q.is_file() and not q.is_symlink()}
