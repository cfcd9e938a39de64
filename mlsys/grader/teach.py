"""Teacher commands: make the student versions of the labs and grade submissions.

``python -m mlsys.grader.teach release``        labs/source/<lab>/ -> labs/release/<lab>/ (nbgrader generate_assignment)
``python -m mlsys.grader.teach check-release``  exit 1 if a committed release differs from what release makes now
``python -m mlsys.grader.teach grade``          labs/submitted/<student>/<lab>/<lab>.ipynb -> labs/grades.csv,
                                         labs/autograded/..., labs/feedback/.../<lab>.html
                                         (``--jobs N``: N at a time; ``--slurm``: a Slurm job array)

nbgrader always runs in a scratch copy of the course root (``labs/nbgrader_config.py`` and the
sources), so submitted files are only ever read. Student code runs only in a bubblewrap sandbox, one
per submission (:mod:`mlsys.grader.sandbox`, :mod:`mlsys.grader.sandboxed_execute`): the instructor
notebooks, the gradebook, the repository, other students and the network are out of its reach,
and ``mlsys`` is installed into it as a package built once per run. Cells stream back as they
finish, so an endless loop, a crash or a flood of output costs the cells it reached, never the run
or the cells graded before. Performance cells are scored by trusted code in a fresh sandbox
(:mod:`mlsys.grader.decide.trusted`). A static audit (:mod:`mlsys.grader.decide.audit`) adds flags for the teacher.

Every (student, lab) gets one CSV row: correctness points, performance points (or "not graded (no
GPU)"), points left for manual grading, a one-line summary that the feedback page repeats, flags,
and, where grading failed or stopped early, why. Grading some labs rewrites only those labs' rows.
``--no-sandbox`` runs student code unconfined, with a loud warning: only for trusted submissions.

``grade`` is three stages. :func:`plan` reads ``submitted/`` into the submissions to grade (each
keyed by a checksum of its files, its lab's instructor version and the settings) and rows decided
without grading; :func:`run_local` (``--jobs N``: N at a time, one slot of GPU and cores each,
:mod:`mlsys.grader.slots`) or :func:`run_slurm` (``--slurm``: a job array whose tasks run
``grade-task``, :mod:`mlsys.grader.slurm`) grades them, each row stored atomically as it finishes
(:mod:`mlsys.grader.rowstore`); :func:`report` gathers the stored rows into the CSV. A stored row with
the same key is never graded again, so an interrupted run resumes where it stopped. The key includes
the grader's digest (:func:`mlsys.grader.rowstore.grader_digest`), and a row whose graded notebook is
gone or whose feedback page shows a hidden test (written by another tool) is graded again.

One gradebook: ``release`` registers each lab in nbgrader's ``labs/gradebook.db``, and :func:`report`
records every graded row there (:mod:`mlsys.grader.gradebook`) and takes back the scores a teacher
entered in formgrader (``manual_score``). ``nbgrader export`` writes ``labs/nbgrader_grades.csv``
(``labs/nbgrader_config.py``), never this report; the two agree on each submission's total.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from mlsys.grader import sandbox, slurm

# What moved out of this module (issue 48, "a size it can keep"), importable from here as before.
from mlsys.grader.classgrading import (  # noqa: F401
    _grader,
    _settings_key,
    _sync_gradebook,
    _take_teacher_scores,
    grade,
    report,
)
from mlsys.grader.classplan import (  # noqa: F401
    Interrupted,
    Plan,
    Progress,
    _grade_guarded,
    _pending,
    _prepare,
    _StopFlag,
    _stored,
    _why_grade_again,
    plan,
)
from mlsys.grader.classrun import (  # noqa: F401
    _gpu_ids,
    _run_dir,
    _stored_in_run,
    grade_task,
    run_local,
    run_slurm,
)
from mlsys.grader.gradedrow import (  # noqa: F401
    _FORMULA_START,
    CSV_FIELDS,
    Row,
    _csv_cell,
    _csv_value,
    _failed,
    _finish,
    _pts,
    _reset,
    _zero,
    summarize,
    write_csv,
)
from mlsys.grader.nbgraderrun import (  # noqa: F401
    _LIVE,
    _LIVE_LOCK,
    _generate,
    _kill_live,
    _run,
    _scratch_course,
    register,
)
from mlsys.grader.release import (  # noqa: F401
    _build_releases,
    _dump,
    _normalise,
    check_release,
    known_labs,
    lab_names,
    release,
)
from mlsys.grader.submission import (  # noqa: F401
    MAX_OUTPUT_CHARS,
    Submission,
    _annotate_feedback,
    _grade_cells,
    _grade_one,
    _has_cuda,
    _nbgrader_id,
    _no_links,
    _normalise_cells,
    _one_line,
    _perf_cases,
    _perf_mode,
    _Prepared,
    _reason,
    _replace_tree,
    _report_notes,
    _RunSettings,
    _sha,
    _stranger_flags,
    _text,
    _trim_outputs,
    _validate_submission,
    printable_name,
    score_notebook,
)
from mlsys.runtime.paths import labs_root

__all__ = ["labs_root", "lab_names", "release", "check_release", "grade", "plan", "run_local", "run_slurm", "report",
           "grade_task", "score_notebook", "Row", "Submission", "Plan", "Progress", "Interrupted", "main"]


# ----------------------------------------------------------------------------------------------
# running nbgrader


# ----------------------------------------------------------------------------------------------
# release


# ----------------------------------------------------------------------------------------------
# grading


# ----------------------------------------------------------------------------------------------
# grading a class: plan (what to grade) / run (here, N at a time, or as a Slurm job array) / report


# ---------------------------------------------------------------------------------------------- Slurm


# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["similarity"]:  # `teach similarity LAB`: copied-work report (mlsys.grader.similarity, own options)
        from mlsys.grader.similarity import main as similarity_main
        return similarity_main(args[1:])
    p = _parser()
    a = p.parse_args(argv)
    if a.cmd in ("release", "check-release"):
        try:
            return _release_command(a.cmd, a.labs or None)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if a.cmd == "grade-task":
        return _grade_task_command(a.manifest, a.index)
    return _grade_command(p, a)


def _parser() -> argparse.ArgumentParser:
    """The command line: release, check-release, grade (here or as a Slurm array) and grade-task."""
    p = argparse.ArgumentParser(prog="python -m mlsys.grader.teach", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("release", help="generate labs/release/<lab>/ from labs/source/<lab>/")
    r.add_argument("labs", nargs="*", help="labs to release (default: all)")
    c = sub.add_parser("check-release", help="exit 1 if committed releases differ from a fresh `release`")
    c.add_argument("labs", nargs="*")
    g = sub.add_parser("grade", help="autograde labs/submitted/<student>/<lab>/ into labs/grades.csv")
    g.add_argument("labs", nargs="*", help="labs to grade (default: every lab found in submitted/)")
    g.add_argument("--root", type=Path, help="the nbgrader course root (default: labs/ of this checkout)")
    g.add_argument("--submitted", type=Path, help="folder of <student>/<lab>/<lab>.ipynb (default labs/submitted)")
    g.add_argument("--csv", type=Path, help="where to write the report (default labs/grades.csv)")
    g.add_argument("--timeout", type=float, default=3600, help="seconds allowed for one submission (default 3600)")
    g.add_argument("--cell-timeout", type=int, help="seconds per cell (default: nbgrader_config.py, 600)")
    g.add_argument("--no-feedback", action="store_true", help="skip the HTML feedback")
    g.add_argument("--jobs", type=int, default=1,
                   help="submissions graded at a time on this machine, each with a GPU of its own (pinned with "
                        "CUDA_VISIBLE_DEVICES) and an equal share of the CPU cores (default 1)")
    g.add_argument("--regrade", action="store_true",
                   help="grade again even submissions whose stored row matches (same files, lab and settings)")
    g.add_argument("--no-sandbox", action="store_true",
                   help="run student code WITHOUT the bubblewrap sandbox (logged loudly; trusted submissions only)")
    g.add_argument("--perf", choices=["cuda", "fake", "off"],
                   help="performance cells: time on CUDA, use the fake timer (CI), or report not graded "
                        "(default: cuda where present, fake if MLSYS_FAKE_TIMER=1, else off)")
    s = g.add_argument_group("Slurm", "grade as a job array on a Slurm cluster (the course folder and the Python "
                                      "environment must be on a filesystem every node sees, at the same path)")
    s.add_argument("--slurm", action="store_true", help="submit the grading as a Slurm job array and wait for it")
    s.add_argument("--partition", help="sbatch --partition")
    s.add_argument("--gres", help="sbatch --gres, e.g. gpu:1 (one GPU per task; performance is then timed on it)")
    s.add_argument("--time", help="sbatch --time per task, e.g. 30:00")
    s.add_argument("--cpus-per-task", type=int, help="sbatch --cpus-per-task")
    s.add_argument("--max-running", type=int, help="at most this many tasks at once (the array's %%N throttle)")
    s.add_argument("--batch", type=int, default=1, help="submissions per array task (default 1)")
    s.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                   help="a further sbatch option, e.g. --sbatch-arg=--account=cs598 (repeatable)")
    t = sub.add_parser("grade-task", help="(run by Slurm) grade one array task's submissions of a manifest")
    t.add_argument("manifest", type=Path)
    t.add_argument("index", type=int)
    return p


def _grade_task_command(manifest: Path, index: int) -> int:
    """``grade-task`` (run by Slurm): one array task's submissions; its time limit ends the grading cleanly."""
    signal.signal(signal.SIGTERM, _interrupt)  # Slurm's time limit: end the running grading cleanly
    try:
        return grade_task(manifest, index)
    except KeyboardInterrupt:
        _kill_live()
        print("task stopped (time limit or scancel); rows stored so far are kept", flush=True)
        return 1


def _grade_command(p: argparse.ArgumentParser, a: argparse.Namespace) -> int:
    """``grade``: the class graded (here or as a Slurm array) with SIGTERM and SIGINT stopping it like Ctrl-C;
    0 when every row is decided, 1 when some are pending, 2 on a setup error, 130 when interrupted."""
    options = None
    if a.slurm:
        options = slurm.SlurmOptions(partition=a.partition, gres=a.gres, time=a.time, cpus_per_task=a.cpus_per_task,
                                     max_running=a.max_running, extra=tuple(a.sbatch_arg))
    elif any(v is not None for v in (a.partition, a.gres, a.time, a.cpus_per_task, a.max_running)) or a.sbatch_arg:
        p.error("--partition, --gres, --time, --cpus-per-task, --max-running and --sbatch-arg need --slurm")
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a batch system's stop: like Ctrl-C
    # Ctrl-C stops cleanly even where the shell that started us ignores SIGINT (a job started with `&` or nohup:
    # Python then keeps the ignored disposition and installs no KeyboardInterrupt of its own)
    previous_int = signal.signal(signal.SIGINT, _interrupt)
    out_csv = a.csv or (a.root or labs_root()) / "grades.csv"
    try:
        rows = grade(a.root, submitted=a.submitted, out_csv=a.csv, timeout=a.timeout, cell_timeout=a.cell_timeout,
                     labs=a.labs or None, feedback=not a.no_feedback, jobs=a.jobs, use_sandbox=not a.no_sandbox,
                     perf=a.perf, regrade=a.regrade, slurm_options=options, batch=a.batch)
    except (sandbox.SandboxUnavailable, slurm.SlurmUnavailable, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        print(f"\n{exc}; report so far: {out_csv}", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    failed = sum(r.status == "failed" for r in rows)
    pending = sum(r.status == "pending" for r in rows)
    print(f"graded {len(rows)} submission(s), {failed} with problems"
          f"{f', {pending} not graded yet (run again to retry)' if pending else ''}; report: {out_csv}")
    return 1 if pending else 0


def _release_command(cmd: str, labs: list[str] | None) -> int:
    """``release`` (write and list the files) or ``check-release`` (say what was checked, or each difference)."""
    if cmd == "release":
        for path in release(labs):
            print(f"wrote {path}")
        return 0
    root = labs_root()
    checked = known_labs(root, labs)
    problems = check_release(checked, root)
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        print("run `make release` and commit labs/release/", file=sys.stderr)
        return 1
    print(f"check-release: {len(checked)} lab(s) checked ({', '.join(checked)}): every file of "
          f"{root / 'release'} is what `make release` generates from {root / 'source'} now")
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
