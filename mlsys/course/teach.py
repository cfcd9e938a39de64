"""Teacher commands: make the student versions of the labs and grade submissions.

``python -m mlsys.course.teach release``        labs/source/<lab>/ -> labs/release/<lab>/ (nbgrader generate_assignment)
``python -m mlsys.course.teach check-release``  exit 1 if a committed release differs from what release makes now
``python -m mlsys.course.teach grade``          labs/submitted/<student>/<lab>/<lab>.ipynb -> labs/grades.csv,
                                         labs/autograded/..., labs/feedback/.../<lab>.html
                                         (``--jobs N``: N at a time; ``--slurm``: a Slurm job array)

nbgrader always runs in a scratch copy of the course root (``labs/nbgrader_config.py`` and the
sources), so submitted files are only ever read. Student code runs only in a bubblewrap sandbox, one
per submission (:mod:`mlsys.course.sandbox`, :mod:`mlsys.course.sandboxed_execute`): the instructor
notebooks, the gradebook, the repository, other students and the network are out of its reach,
and ``mlsys`` is installed into it as a package built once per run. Cells stream back as they
finish, so an endless loop, a crash or a flood of output costs the cells it reached, never the run
or the cells graded before. Performance cells are scored by trusted code in a fresh sandbox
(:mod:`mlsys.course.trusted`). A static audit (:mod:`mlsys.course.audit`) adds flags for the teacher.

Every (student, lab) gets one CSV row: correctness points, performance points (or "not graded (no
GPU)"), points left for manual grading, a one-line summary that the feedback page repeats, flags,
and, where grading failed or stopped early, why. Grading some labs rewrites only those labs' rows.
``--no-sandbox`` runs student code unconfined, with a loud warning: only for trusted submissions.

``grade`` is three stages. :func:`plan` reads ``submitted/`` into the submissions to grade (each
keyed by a checksum of its files, its lab's instructor version and the settings) and rows decided
without grading; :func:`run_local` (``--jobs N``: N at a time, one slot of GPU and cores each,
:mod:`mlsys.course.slots`) or :func:`run_slurm` (``--slurm``: a job array whose tasks run
``grade-task``, :mod:`mlsys.course.slurm`) grades them, each row stored atomically as it finishes
(:mod:`mlsys.course.rowstore`); :func:`report` gathers the stored rows into the CSV. A stored row with
the same key is never graded again, so an interrupted run resumes where it stopped. The key includes
the grader's digest (:func:`mlsys.course.rowstore.grader_digest`), and a row whose graded notebook is
gone or whose feedback page shows a hidden test (written by another tool) is graded again.

One gradebook: ``release`` registers each lab in nbgrader's ``labs/gradebook.db``, and :func:`report`
records every graded row there (:mod:`mlsys.course.gradebook`) and takes back the scores a teacher
entered in formgrader (``manual_score``). ``nbgrader export`` writes ``labs/nbgrader_grades.csv``
(``labs/nbgrader_config.py``), never this report; the two agree on each submission's total.
"""

from __future__ import annotations

import argparse
import csv
import functools
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..runtime.paths import checkout, labs_root
from ..runtime.processes import kill_tree
from . import audit, feedback_marks, gradebook, sandbox, sanitize, slurm
from .grading import NOT_GRADED
from .rowstore import RowStore, grader_digest, submission_key
from .slots import Slot, make_slots, visible_gpus

__all__ = ["labs_root", "lab_names", "release", "check_release", "grade", "plan", "run_local", "run_slurm", "report",
           "grade_task", "score_notebook", "Row", "Submission", "Plan", "Progress", "Interrupted", "main"]

MAX_OUTPUT_CHARS = 20_000  # per output, in the returned autograded/feedback notebooks
CSV_FIELDS = [
    "student", "lab", "status", "correctness_score", "correctness_max", "performance_score", "performance_max",
    "performance", "manual_max", "manual_score", "total_score", "reason", "summary", "flags",
]


def lab_names(root: Path | None = None) -> list[str]:
    """Labs with an instructor notebook ``source/<lab>/<lab>.ipynb``, sorted."""
    src = (root or labs_root()) / "source"
    return sorted(p.name for p in src.iterdir() if (p / f"{p.name}.ipynb").is_file()) if src.is_dir() else []


# ----------------------------------------------------------------------------------------------
# running nbgrader


_LIVE: set[int] = set()  # nbgrader processes running now (killed, with everything below them, on Ctrl-C)
_LIVE_LOCK = threading.Lock()


def _run(args: list[str], cwd: Path, timeout: float, log: Path,
         env: dict[str, str] | None = None, slot: Slot | None = None) -> tuple[int | None, str]:
    """Run ``python -m nbgrader ARGS`` in its own process group; (returncode or None on timeout, log tail).

    ``slot`` pins it (and the sandboxes it starts) to that slot's CPU cores and GPU.
    """
    env = dict(os.environ, PYTHONHASHSEED="0", MPLBACKEND="Agg", PYDEVD_DISABLE_FILE_VALIDATION="1", **(env or {}))
    if slot is not None:
        env.update(slot.env())
    # the grader's own mlsys (nbgrader_config.py imports its sandboxed executor) whatever the working folder
    pkg_parent = str(checkout())
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    # nbgrader runs the `alembic` script of its own environment: put that environment's bin first
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    argv = [*(slot.prefix() if slot is not None else []), sys.executable, "-m", "nbgrader", *args]
    with open(log, "ab") as fh:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        with _LIVE_LOCK:
            _LIVE.add(proc.pid)
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            kill_tree(proc.pid)
            proc.wait()
            with _LIVE_LOCK:
                _LIVE.discard(proc.pid)
    with open(log, "rb") as fh:
        fh.seek(max(0, log.stat().st_size - 20_000))
        return rc, fh.read().decode("utf-8", "replace")


def _kill_live() -> None:
    """End every nbgrader process this run started and everything below it (an interrupted run)."""
    with _LIVE_LOCK:
        pids = list(_LIVE)
    for pid in pids:
        kill_tree(pid)


def _scratch_course(root: Path, labs: list[str], tmp: Path) -> Path:
    course = tmp / "course"
    (course / "source").mkdir(parents=True)
    shutil.copy2(root / "nbgrader_config.py", course / "nbgrader_config.py")
    for lab in labs:
        # a run of the notebook leaves outputs beside it (Lab 6's profiles, *_trace.json): never part of a release
        shutil.copytree(root / "source" / lab, course / "source" / lab,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*_trace.json"))
    return course


def _generate(course: Path, lab: str, timeout: float = 300, db: str | None = None) -> None:
    """``nbgrader generate_assignment`` in the scratch ``course``, registering the lab in ``db`` (default: the
    scratch course's own gradebook)."""
    rc, out = _run(["generate_assignment", lab, "--force", "--db", db or f"sqlite:///{course / 'gradebook.db'}"],
                   course, timeout, course / f"generate_{lab}.log")
    if rc != 0:
        raise RuntimeError(f"nbgrader generate_assignment {lab} failed (exit {rc}):\n{out[-4000:]}")


def register(root: Path, labs: list[str]) -> list[str]:
    """Register ``labs`` in the course gradebook ``root/gradebook.db`` (nbgrader's assignment, notebook and
    cells), so that formgrader's Autograde button and ``nbgrader autograde`` work on labs released by
    ``make release``. Returns a warning per lab that could not be registered (e.g. its cells changed after
    submissions were recorded: nbgrader keeps the gradebook as it is then)."""
    warnings = []
    with tempfile.TemporaryDirectory(prefix="mlsys-register-") as tmp:
        course = _scratch_course(root, labs, Path(tmp))
        for lab in labs:
            try:
                _generate(course, lab, db=gradebook.db_url(root))
            except RuntimeError as exc:
                last = [ln for ln in str(exc).splitlines() if ln.strip()][-1:] or [""]
                warnings.append(f"{lab} is not registered in {root / 'gradebook.db'}: {last[0][:300]}")
    return warnings


# ----------------------------------------------------------------------------------------------
# release


def _normalise(nb: dict[str, Any]) -> dict[str, Any]:
    """Drop what changes from run to run, so a release is reproducible byte for byte."""
    nb.get("metadata", {}).pop("widgets", None)
    for cell in nb.get("cells", []):
        cell.get("metadata", {}).pop("execution", None)
        if cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return nb


def _dump(nb: dict[str, Any]) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _build_releases(root: Path, labs: list[str], tmp: Path, *,
                    warnings: list[str] | None = None) -> dict[str, dict[str, bytes]]:
    """Each lab's release files as ``make release`` writes them. With ``warnings`` (a list to append to), each lab
    is also registered in the course gradebook (:func:`register`); a lab that cannot be is released all the same,
    with a warning."""
    course = _scratch_course(root, labs, tmp)
    out: dict[str, dict[str, bytes]] = {}
    for lab in labs:
        try:
            _generate(course, lab, db=None if warnings is None else gradebook.db_url(root))
        except RuntimeError as exc:
            if warnings is None:
                raise
            last = [ln for ln in str(exc).splitlines() if ln.strip()][-1:] or [""]
            warnings.append(f"{lab} is not registered in {root / 'gradebook.db'}: {last[0][:300]}")
            _generate(course, lab)
        files: dict[str, bytes] = {}
        rel = course / "release" / lab
        for p in sorted(rel.rglob("*")):
            if not p.is_file():
                continue
            data = p.read_bytes()
            if p.suffix == ".ipynb":
                data = _dump(_normalise(json.loads(data))).encode()
            files[str(p.relative_to(rel))] = data
        out[lab] = files
    return out


def known_labs(root: Path, labs: list[str] | None) -> list[str]:
    """``labs`` (default: every lab of ``root/source``), each checked: a name that is not a lab is a ValueError
    naming the labs there are."""
    known = lab_names(root)
    if not known:
        raise ValueError(f"no lab found in {root / 'source'} (expected source/<lab>/<lab>.ipynb)")
    unknown = [lab for lab in labs or [] if lab not in known]
    if unknown:
        raise ValueError(f"unknown lab{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                         f"the labs are {', '.join(known)}")
    return list(labs or known)


def release(labs: list[str] | None = None, root: Path | None = None) -> list[Path]:
    """Write ``release/<lab>/`` for each lab (all labs by default) and register each in the course gradebook
    (:func:`register`); returns the files written."""
    root = root or labs_root()
    labs = known_labs(root, labs)
    written = []
    warnings: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mlsys-release-") as tmp:
        for lab, files in _build_releases(root, labs, Path(tmp), warnings=warnings).items():
            dest = root / "release" / lab
            if dest.exists():
                shutil.rmtree(dest)
            for rel, data in files.items():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                (dest / rel).write_bytes(data)
                written.append(dest / rel)
    for line in warnings:
        print(f"warning: {line}", file=sys.stderr)
    return written


def check_release(labs: list[str] | None = None, root: Path | None = None) -> list[str]:
    """Differences between the committed releases and freshly generated ones (empty when in sync)."""
    root = root or labs_root()
    labs = known_labs(root, labs)
    problems = [f"{d} has no instructor version {root / 'source' / d.name / (d.name + '.ipynb')} (its source is missing)"
                for d in sorted((root / "release").iterdir()) if d.is_dir() and d.name not in lab_names(root)] \
        if (root / "release").is_dir() else []
    with tempfile.TemporaryDirectory(prefix="mlsys-release-") as tmp:
        for lab, files in _build_releases(root, labs, Path(tmp)).items():
            dest = root / "release" / lab
            for rel, data in files.items():
                p = dest / rel
                if not p.is_file():
                    problems.append(f"{p} is missing")
                elif p.read_bytes() != data:
                    problems.append(f"{p} differs from what `make release` generates now")
            if dest.is_dir():
                for p in dest.rglob("*"):
                    if p.is_file() and str(p.relative_to(dest)) not in files:
                        problems.append(f"{p} is not produced by `make release` (stale file?)")
    return problems


# ----------------------------------------------------------------------------------------------
# grading


@dataclass
class Row:
    """One (student, lab) line of the grade report."""

    student: str
    lab: str
    status: str = "ok"  # ok | failed
    correctness_score: float = 0.0
    correctness_max: float = 0.0
    performance_score: float | str = 0.0
    performance_max: float = 0.0
    performance: str = "graded"  # graded | not graded (no GPU) | none
    manual_max: float = 0.0
    manual_score: float | str = ""  # written answers graded so far in formgrader ("" while none is)
    total_score: float = 0.0
    reason: str = ""
    summary: str = ""
    flags: str = ""
    notes: list[str] = field(default_factory=list, repr=False)


def _pts(x: float) -> str:
    return f"{x:g}"


def summarize(row: Row) -> str:
    """The score line shared by the CSV and the feedback page, e.g. ``3 / 3 autograded; performance
    not graded here (no GPU); 2 points of written answers pending``. Pure: reads ``row`` only."""
    if row.status != "ok" and row.correctness_score == 0 and not row.notes:
        return f"not graded: {row.reason}" if row.reason else "not graded"
    parts = [f"{_pts(row.correctness_score)} / {_pts(row.correctness_max)} autograded"]
    if row.performance == "graded":
        parts.append(f"performance {_pts(float(row.performance_score or 0))} / {_pts(row.performance_max)}")
    elif row.performance != "none":
        where = row.performance.replace("not graded", "not graded here", 1)
        parts.append(f"performance ({_pts(row.performance_max)} points) {where}")
    if row.manual_max and row.manual_score == "":
        parts.append(f"{_pts(row.manual_max)} points of written answers pending")
    elif row.manual_max:
        parts.append(f"written answers {_pts(float(row.manual_score))} / {_pts(row.manual_max)}")
    return "; ".join(parts)


def _grade_cells(nb: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb.get("cells", [])
            if c.get("metadata", {}).get("nbgrader", {}).get("grade")}


def _text(output: dict[str, Any]) -> str:
    t = output.get("text") or output.get("data", {}).get("text/plain", "")
    return "".join(t) if isinstance(t, list) else str(t)


def score_notebook(source_nb: dict[str, Any], graded_nb: dict[str, Any] | None, row: Row) -> Row:
    """Fill ``row`` from an autograded notebook; the instructor notebook defines which cells count.

    Correctness: ``test_*`` (and any other autograded) cells; performance: ``perf_*`` cells, reported
    as not graded when they printed the no-GPU notice; solution cells with points are manual.
    """
    from nbformat import from_dict
    from nbgrader.utils import determine_grade, is_solution

    graded = _grade_cells(graded_nb) if graded_nb else {}
    perf_not_graded = False
    perf_cells = 0
    for gid, src in _grade_cells(source_nb).items():
        points = float(src["metadata"]["nbgrader"].get("points", 0))
        if is_solution(from_dict(src)):
            row.manual_max += points
            continue
        cell = graded.get(gid)
        score = 0.0
        if cell is not None:
            s, _ = determine_grade(from_dict(cell))
            score = float(s or 0.0)
        if gid.startswith("perf_"):
            perf_cells += 1
            row.performance_max += points
            row.performance_score = float(row.performance_score) + score
            if cell is not None and any(NOT_GRADED in _text(o) for o in cell.get("outputs", [])):
                perf_not_graded = True
        else:
            row.correctness_max += points
            row.correctness_score += score
    if perf_cells == 0:
        row.performance = "none"
    elif perf_not_graded:
        row.performance = NOT_GRADED.split(": ", 1)[1]
        row.performance_score = ""
    row.total_score = row.correctness_score + (0.0 if perf_not_graded else float(row.performance_score or 0.0))
    return row


def _reason(rc: int | None, log: str, timeout: float) -> str:
    if rc is None:
        return f"timeout: grading ran past the time limit of {timeout:g} s per submission and was stopped"
    for needle, why in (("DeadKernelError", "kernel died (the notebook crashed its Python process)"),
                        ("Kernel died", "kernel died (the notebook crashed its Python process)"),
                        ("UnresponsiveKernelError", "kernel stopped responding"),
                        ("CellTimeoutError", "a cell ran past the per-cell time limit and ignored the interrupt"),
                        ("NotJSONError", "malformed notebook (not valid JSON)"),
                        ("MemoryError", "out of memory")):
        if needle in log:
            return why
    lines = [ln.strip() for ln in log.strip().splitlines() if ln.strip()]
    # nbgrader's last line says "Please see the above traceback": the exception that line means is the cause
    errors = [ln for ln in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit)\b:?", ln)]
    tail = (errors or lines)[-1:] or ["no log"]
    return f"nbgrader autograde failed (exit {rc}): {tail[0][:300]}"


def _validate_submission(path: Path) -> str | None:
    import warnings

    import nbformat

    try:
        with warnings.catch_warnings():  # duplicated cell ids are repaired on our copy (_normalise_cells)
            warnings.simplefilter("ignore")
            nb = nbformat.read(path, as_version=4)
    except Exception as exc:  # any parse failure is reported, not raised
        return f"malformed notebook: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nbformat.validate(nb)
    except Exception as exc:
        return f"malformed notebook (fails the notebook schema): {str(exc).splitlines()[0][:200]}"
    if not nb.cells:
        return ("empty notebook: it has no cells, so there is nothing to grade (saved before any work, or emptied?); "
                "hand in the lab's notebook with your answers")
    return None


def _trim_outputs(path: Path) -> None:
    """Cap every output's text in the returned notebook (feedback stays readable)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    changed = False
    for cell in nb.get("cells", []):
        for o in cell.get("outputs", []):
            for key, holder in (("text", o), ("text/plain", o.get("data", {}))):
                t = holder.get(key)
                if t is None:
                    continue
                t = "".join(t) if isinstance(t, list) else t
                if len(t) > MAX_OUTPUT_CHARS:
                    holder[key] = t[:MAX_OUTPUT_CHARS] + f"\n... output truncated ({len(t)} characters) ...\n"
                    changed = True
    if changed:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _no_links(folder: str, names: list[str]) -> set[str]:
    """copytree ignore: symbolic links (a link to a teacher's file must not be copied as that file) and caches."""
    return {n for n in names if os.path.islink(os.path.join(folder, n)) or n in (".ipynb_checkpoints", "__pycache__")}


@dataclass
class _RunSettings:
    """What one grading run shares between submissions."""

    mode: str  # "bwrap" | "none"
    site: Path
    scratch: Path
    perf: str  # "off" | "cuda" | "fake"
    gpu: bool = False  # CUDA present: the GPU is passed into every sandbox
    limits: sandbox.Limits = field(default_factory=sandbox.Limits)


def _perf_cases(root: Path, lab: str) -> dict[str, Any]:
    """The lab's perf.toml as plain data for the cell runner ({grade_id: spec}), or {} when the lab has none.

    Read once, by :func:`mlsys.course.trusted.load_spec` (a malformed spec stops the run here, with its
    message); each case goes on the wire as its fields, which :meth:`PerfCase.from_dict` reads back.
    """
    path = root / "source" / lab / "perf.toml"
    if not path.is_file():
        return {}
    from .trusted import load_spec

    return {gid: {k: v for k, v in asdict(case).items() if k != "grade_id"} for gid, case in load_spec(path).items()}


def _report_notes(row: Row, report: dict[str, Any], timeout: float) -> None:
    if report.get("kernel_died"):
        row.notes.append(f"kernel died in {report['kernel_died']} (a crash such as an out-of-bounds access); "
                         "cells before it keep their points, later cells were not run")
    if report.get("timed_out"):
        row.notes.append(f"time limit of {timeout:g} s reached; {report.get('not_run', 0)} cell(s) not run, "
                         "cells before keep their points")
    elif report.get("fatal"):
        row.notes.append(f"grading stopped early: {report['fatal']}")
    for gid in report.get("legacy_perf", []):
        row.notes.append(f"{gid}: measured by the notebook itself (no perf.toml entry), not by the trusted process")
    for gid, v in sorted(report.get("perf", {}).items()):
        if v.get("reason"):
            row.notes.append(f"{gid}: {v['reason']}")


def _one_line(text: str) -> str:
    """``text`` as one line of the flags column: runs of white space (newlines too) as one space, no ``;``."""
    return " ".join(printable_name(text).replace(";", ",").split())


def _stranger_flags(report: dict[str, Any], limit: int = 3) -> list[str]:
    """``process`` flags for the processes the grader saw alive in the sandbox while it ran test cells
    (:mod:`mlsys.course.census`): work done there is in no record of a checked call."""
    seen = [s for s in report.get("strangers", []) if isinstance(s, dict)]
    out = [f"process: pid {s.get('pid')} (parent {s.get('ppid')}, {_one_line(str(s.get('cmd') or s.get('exe') or '?'))[:80]}) "
           f"was running while the grader ran {printable_name(str(s.get('test', '?')))[:40]} (seen by the grader)"
           for s in seen[:limit]]
    if len(seen) > limit:
        out.append(f"process: ... {len(seen) - limit} more running while test cells ran")
    return out


def _annotate_feedback(html: Path, row: Row) -> None:
    """Put the CSV's summary in the feedback header and list the audit flags under it."""
    import html as htmlmod
    import re

    text = html.read_text(encoding="utf-8")
    summary = htmlmod.escape(row.summary)
    text, n = re.subn(r"\(Score: [0-9.]+ / [0-9.]+\)</h4>", f"({summary})</h4>", text, count=1)
    extra = ""
    if row.reason:
        extra += f"<p><strong>Grader notes:</strong> {htmlmod.escape(row.reason)}</p>"
    if row.flags:
        items = "".join(f"<li>{htmlmod.escape(f)}</li>" for f in row.flags.split("; "))
        extra += ("<p><strong>Flagged for the teacher to review</strong> (a flag alone does not change the "
                  f"score):</p><ul>{items}</ul>")
    if extra:
        text = text.replace("</h4>", "</h4>" + extra, 1) if n else text.replace("<body>", "<body>" + extra, 1)
    html.write_text(text, encoding="utf-8")


def printable_name(name: str) -> str:
    """``name`` (a folder name, bytes that are not UTF-8 held as surrogates) with such bytes as ``\\xNN``."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _nbgrader_id(student: str) -> str:
    """The id nbgrader sees for a student: never the folder name itself, so that names starting with
    ``-`` (read as an option), spaces or other odd characters cannot break or steer nbgrader."""
    return "s" + hashlib.sha256(student.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _normalise_cells(path: Path, source_nb: dict[str, Any]) -> list[str]:
    """Make the (scratch copy of the) submission's nbgrader cells the instructor's: returns a note per change.

    nbgrader trusts a submission's cell metadata, and a changed one stops it with a traceback (a cell that says
    it is graded but has a grade id the lab does not know) or makes it grade the wrong thing (an answer cell
    marked as a test). So: the first cell of each grade id gets the instructor's nbgrader metadata for that id;
    a later copy of it (a duplicated cell), a grade id the lab does not have (a renamed or invented cell) and
    nbgrader metadata without a grade id become ordinary cells, which run but earn nothing."""
    known: dict[str, dict[str, Any]] = {}
    for cell in source_nb.get("cells", []):
        meta = (cell.get("metadata", {}) or {}).get("nbgrader")
        if isinstance(meta, dict) and meta.get("grade_id"):
            known.setdefault(str(meta["grade_id"]), meta)
    nb = json.loads(path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    unknown: list[str] = []
    restored: list[str] = []
    ids: set[str] = set()
    changed = False
    for cell in nb.get("cells", []):
        meta = cell.get("metadata")
        if not isinstance(meta, dict):
            cell["metadata"] = meta = {}
            changed = True
        nbg = meta.get("nbgrader")
        if nbg is not None:
            gid = nbg.get("grade_id") if isinstance(nbg, dict) else None
            gid = gid if isinstance(gid, str) and gid else None
            if gid is not None:
                seen[gid] = seen.get(gid, 0) + 1
            if gid is None or gid not in known or seen[gid] > 1:
                if gid is not None and gid not in known:
                    unknown.append(gid)
                meta.pop("nbgrader")
                changed = True
            elif nbg != known[gid]:
                if any(nbg.get(k) != known[gid].get(k) for k in ("grade", "solution", "points", "task")):
                    restored.append(gid)
                meta["nbgrader"] = dict(known[gid])
                changed = True
        if "id" in cell:  # nbformat 4.5 cell ids must be unique too
            while cell["id"] in ids:
                cell["id"] = f"{cell['id']}-copy"[:64]
                changed = True
            ids.add(cell["id"])
    if changed:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
    notes = [f"cell {g} appears {n} times in the submission (a duplicated cell?): the first copy was graded, "
             f"the others ran as ordinary cells" for g, n in sorted(seen.items()) if n > 1]
    if unknown:
        shown = ", ".join(repr(g[:40]) for g in sorted(set(unknown))[:5])
        notes.append(f"cell(s) {shown} are not cells of this lab (a renamed or added cell?): they ran as ordinary "
                     "cells and earn nothing (the lab's test cells are graded as the course wrote them)")
    if restored:
        notes.append(f"the grading settings of cell(s) {', '.join(repr(g[:40]) for g in restored[:5])} were changed in "
                     "the submission (a test marked as an answer, or the reverse?): the course's were used")
    return notes


def _grade_one(sub: Submission, prep: _Prepared, work: Path, root: Path, *, timeout: float, extra: list[str],
               feedback: bool, verbose: bool, slot: Slot | None = None) -> Row:
    """Grade one submission in its own scratch course (own gradebook copy): returns its row."""
    student, lab = sub.student, sub.lab
    base, run = prep.base, prep.run
    row = Row(student, lab)
    if sub.note:
        row.notes.append(sub.note)
    source_nb = json.loads((root / "source" / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
    score_notebook(source_nb, None, row)  # the maxima, reported even when grading fails
    _zero(row)
    nb_path = sub.notebook
    if nb_path.is_symlink() or not nb_path.is_file():
        found = sorted(printable_name(q.name) for q in sub.folder.glob("*.ipynb")) if sub.folder is not None else []
        also = f"; found {', '.join(found[:5])}: rename the one to grade" if found else ""
        return _finish(_failed(row, f"no notebook: expected {printable_name(student)}/{lab}/{lab}.ipynb (a regular "
                                    f"file){also}"))
    bad = _validate_submission(nb_path)
    if bad:
        return _finish(_failed(row, bad))
    release_nb = base / "release" / lab / f"{lab}.ipynb"
    try:
        given = json.loads(release_nb.read_text(encoding="utf-8")) if release_nb.is_file() else None
        row.flags = audit.format_flags(audit.audit_notebook(json.loads(nb_path.read_text(encoding="utf-8")), given))
    except Exception as exc:  # the audit never stops grading
        row.flags = f"audit failed: {type(exc).__name__}"
    if sub.folder is not None and any(p.is_symlink() for p in sub.folder.rglob("*")):
        row.flags = "; ".join(x for x in (row.flags, "file: symbolic link in the submission (ignored)") if x)
    sid = _nbgrader_id(student)
    course = work / f"{sid}__{lab}"
    (course / "source").mkdir(parents=True)
    shutil.copy2(base / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copy2(base / "gradebook.db", course / "gradebook.db")
    shutil.copytree(base / "source" / lab, course / "source" / lab)
    dest = course / "submitted" / sid / lab
    if sub.folder is not None:
        shutil.copytree(sub.folder, dest, ignore=_no_links)
        if nb_path.name != f"{lab}.ipynb":  # the folder's one notebook, under another name (see plan)
            shutil.copy2(nb_path, dest / f"{lab}.ipynb")
    else:  # a notebook saved without its lab folder: graded on its own
        dest.mkdir(parents=True)
        shutil.copy2(nb_path, dest / f"{lab}.ipynb")
    row.notes.extend(_normalise_cells(dest / f"{lab}.ipynb", source_nb))
    db = f"sqlite:///{course / 'gradebook.db'}"
    if verbose:
        print(f"grading {student}/{lab} ...", flush=True)
    report_path = course / "sandbox_report.json"
    settings = {"mode": run.mode, "site": str(run.site), "scratch": str(run.scratch), "wall": timeout,
                "perf": run.perf, "cases": _perf_cases(root, lab), "report": str(report_path),
                "limits": asdict(run.limits), "gpu": run.gpu}
    env = {"MLSYS_SANDBOX": json.dumps(settings)}
    rc, out = _run(["autograde", lab, "--student", sid, "--create", "--force", "--db", db, *extra],
                   course, timeout + 120, course / "autograde.log", env=env, slot=slot)
    graded = course / "autograded" / sid / lab / f"{lab}.ipynb"
    if rc != 0 or not graded.is_file():
        kept = RowStore(root).path(student, lab).with_suffix(".log")  # the traceback the reason points to
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(course / "autograde.log", kept)
        return _finish(_failed(row, "; ".join([*row.notes, f"{_reason(rc, out, timeout + 120)} (log: {kept})"])))
    _trim_outputs(graded)
    sanitize.sanitize_file(graded, source_nb)  # no hidden test, no live markup leaves (issue 26)
    graded_nb = json.loads(graded.read_text(encoding="utf-8"))
    _reset(row)
    score_notebook(source_nb, graded_nb, row)
    if report_path.is_file():
        report = json.loads(report_path.read_text(encoding="utf-8"))
        _report_notes(row, report, timeout)
        row.flags = "; ".join(x for x in (row.flags, *_stranger_flags(report)) if x)
    for cell in graded_nb.get("cells", []):
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error" and o.get("ename") == "CellTimeoutError":
                gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or cell.get("id", "?")
                row.notes.append(f"cell {gid} timed out (per-cell time limit)")
    row.reason = "; ".join(dict.fromkeys(row.notes))
    _finish(row)
    _replace_tree(course / "autograded" / sid / lab, root / "autograded" / student / lab)
    if feedback:
        rc, out = _run(["generate_feedback", lab, "--student", sid, "--force", "--db", db],
                       course, 600, course / "feedback.log", slot=slot)
        fb = course / "feedback" / sid / lab
        if rc == 0 and fb.is_dir():
            for html in fb.glob("*.html"):
                _annotate_feedback(html, row)
                # issue 30: cells without a score yet read "not graded here" / "pending", not 0.0
                html.write_text(feedback_marks.relabel(html.read_text(encoding="utf-8"),
                                                       feedback_marks.ungraded_cells(graded_nb)), encoding="utf-8")
            _replace_tree(fb, root / "feedback" / student / lab)
        else:
            row.notes.append("feedback could not be generated")
            row.reason = "; ".join(dict.fromkeys(row.notes))
    return row


def _replace_tree(src: Path, target: Path) -> None:
    """Copy ``src`` to ``target`` (links left out), replacing it: staged beside it, then swapped in."""
    target.parent.mkdir(parents=True, exist_ok=True)
    stage = target.with_name(f".{target.name}.new-{os.getpid()}-{threading.get_ident()}")
    if stage.exists():
        shutil.rmtree(stage)
    shutil.copytree(src, stage, ignore=_no_links)
    if target.exists():
        shutil.rmtree(target)
    stage.rename(target)


def _finish(row: Row) -> Row:
    row.summary = summarize(row)
    return row


def _has_cuda() -> bool:
    from ..runtime.device import has_cuda

    return has_cuda()


def _perf_mode(perf: str | None) -> str:
    if perf is not None:
        if perf not in ("off", "cuda", "fake"):
            raise ValueError(f"perf: expected 'off', 'cuda' or 'fake', got {perf!r}")
        return perf
    from ..runtime.device import fake_timer, has_cuda

    if fake_timer():
        return "fake"

    return "cuda" if has_cuda() else "off"


# ----------------------------------------------------------------------------------------------
# grading a class: plan (what to grade) / run (here, N at a time, or as a Slurm job array) / report


@dataclass(frozen=True)
class Submission:
    """One (student, lab) to grade: its notebook, its lab folder (None: saved without one), its key."""

    student: str
    lab: str
    notebook: Path
    folder: Path | None
    key: str = ""
    note: str = ""  # said in the row's reason (e.g. "notebook saved without its lab folder")

    def files(self) -> list[Path]:
        return [self.folder] if self.folder is not None else [self.notebook]

    def to_json(self) -> dict[str, Any]:
        return {"student": self.student, "lab": self.lab, "notebook": str(self.notebook),
                "folder": None if self.folder is None else str(self.folder), "key": self.key, "note": self.note}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Submission:
        return cls(d["student"], d["lab"], Path(d["notebook"]), None if d["folder"] is None else Path(d["folder"]),
                   d["key"], d.get("note", ""))


@dataclass
class Plan:
    """What one ``teach grade`` does: ``todo`` to grade, ``done`` already graded with the same key
    (kept byte for byte), ``problems`` rows decided without grading (unknown lab, stray notebook)."""

    root: Path
    submitted: Path
    labs: list[str]
    todo: list[Submission]
    done: list[Submission]
    problems: list[Row]
    settings: dict[str, Any]
    again: dict[str, int] = field(default_factory=dict)  # why stored rows are graded again: reason -> count


@dataclass
class _Prepared:
    """What every grading of a run shares: the generated assignments (``base``) and the run settings."""

    base: Path
    run: _RunSettings


def _pending(sub: Submission, why: str) -> Row:
    row = _failed(Row(sub.student, sub.lab), why)
    row.status = "pending"
    return _finish(row)


def plan(root: Path | None = None, *, submitted: Path | None = None, labs: list[str] | None = None,
         settings: dict[str, Any] | None = None, regrade: bool = False) -> Plan:
    """Read ``submitted/`` and decide what a run grades.

    Every notebook gets a row: ``<student>/<lab>/<lab>.ipynb`` is graded; ``<student>/<lab>.ipynb``
    (saved without its lab folder) is graded with a note; a folder or notebook that names no known
    lab, a notebook directly in ``submitted/`` and a student folder with nothing in it get a failed
    row saying what was expected. A submission whose key (files, instructor version, ``settings``)
    matches its stored row is ``done`` unless ``regrade``.
    """
    root = (root or labs_root()).resolve()
    submitted = (submitted or root / "submitted").resolve()
    settings = dict(settings or {})
    known = lab_names(root)
    expected = "expected submitted/<student>/<lab>/<lab>.ipynb"
    found: list[Submission] = []
    problems: list[Row] = []

    def problem(student: str, lab: str, why: str) -> None:
        problems.append(_finish(_failed(Row(student, lab, performance="none"), why)))

    entries = sorted(submitted.iterdir()) if submitted.is_dir() else []
    for entry in entries:
        if entry.is_symlink():
            continue
        if entry.is_file():
            if entry.suffix == ".ipynb" and not labs:
                problem(entry.stem, "(none)", f"notebook {entry.name} directly in submitted/, not in a student's "
                                              f"folder: {expected}")
            continue
        student, any_work = entry.name, False
        shown = printable_name(student)
        if shown != student:  # bytes that are not UTF-8: no report, row file or terminal can hold the name as it is
            if not labs:
                problem(shown, "(none)", "the folder name is not valid UTF-8 (shown here with \\x escapes): rename "
                                         f"the folder and grade again; {expected}")
            continue
        for child in sorted(entry.iterdir()):
            if child.is_symlink():
                continue
            if child.is_dir():
                lab = child.name
                if child.name in (".ipynb_checkpoints", "__pycache__"):
                    continue
                any_work = True
                if labs and lab not in labs:
                    continue
                if lab not in known:
                    problem(student, lab, f"unknown lab {lab!r}; expected one of {known}")
                    continue
                nb, note = child / f"{lab}.ipynb", ""
                others = sorted(q for q in child.glob("*.ipynb") if q.is_file() and not q.is_symlink())
                if not nb.exists() and len(others) == 1:  # "lab1 (1).ipynb", as a browser saves a second download
                    nb, note = others[0], (f"the notebook is named {printable_name(others[0].name)!r}; graded as "
                                           f"{lab} (expected {lab}/{lab}.ipynb)")
                found.append(Submission(student, lab, nb, child, note=note))
            elif child.suffix == ".ipynb":
                any_work = True
                lab = child.stem
                if lab in known and (entry / lab).is_dir():
                    continue  # a loose copy beside the lab folder: the folder is what is graded
                if labs and lab not in labs:
                    continue
                if lab in known:
                    found.append(Submission(student, lab, child, None,
                                            note=f"notebook saved without its lab folder ({student}/{child.name}); "
                                                 f"graded as {lab} (expected {student}/{lab}/{lab}.ipynb)"))
                elif not labs:
                    problem(student, lab, f"notebook {child.name} is not in a lab folder and its name is not a "
                                          f"lab's; {expected}, <lab> one of {known}")
        if not any_work and not labs:
            problem(student, "(none)", f"nothing to grade in submitted/{student}/: {expected}")
    store = RowStore(root)
    todo, done = [], []
    again: dict[str, int] = {}
    for sub in found:
        key = submission_key(sub.files(), sub.files()[0].parent, root / "source" / sub.lab, settings)
        sub = Submission(sub.student, sub.lab, sub.notebook, sub.folder, key, sub.note)
        why = None if regrade else _why_grade_again(root, sub, store.stored(sub.student, sub.lab), settings)
        if why is None and not regrade:
            done.append(sub)
            continue
        todo.append(sub)
        if why:
            again[why] = again.get(why, 0) + 1
    graded_labs = sorted({s.lab for s in found} | {r.lab for r in problems if r.lab in known})
    return Plan(root, submitted, graded_labs, todo, done, problems, settings, {k: v for k, v in again.items() if k})


def _why_grade_again(root: Path, sub: Submission, stored: dict[str, Any] | None, settings: dict[str, Any]) -> str | None:
    """Why a submission with a stored row must be graded again ("" for a new or changed submission), or None:
    another grader graded it (48.7), or what the row returned is gone or leaks (a graded notebook another tool
    deleted, a feedback page with hidden tests that another tool wrote)."""
    if stored is None:
        return ""
    if stored.get("key") != sub.key:
        return ("graded by another grader (its code, configuration, libraries or device changed)"
                if stored.get("grader") not in (None, "", settings.get("grader")) else "")
    row = stored.get("row") or {}
    if row.get("status") != "ok":
        return None
    graded = root / "autograded" / sub.student / sub.lab / f"{sub.lab}.ipynb"
    if not graded.is_file():
        return "its graded notebook was missing (deleted by another tool)"
    feedback = root / "feedback" / sub.student / sub.lab / f"{sub.lab}.html"
    if settings.get("feedback", True):
        if not feedback.is_file():
            return "its feedback page was missing"
        source = json.loads((root / "source" / sub.lab / f"{sub.lab}.ipynb").read_text(encoding="utf-8"))
        if sanitize.leaks(feedback.read_text(encoding="utf-8", errors="replace"), source):
            return "its feedback page showed hidden tests (written by another tool): replaced"
    return None


def _prepare(root: Path, labs: list[str], dest: Path, *, use_sandbox: bool, perf: str,
             limits: sandbox.Limits | None, gpu: bool) -> _Prepared:
    """Generate the assignments of ``labs`` (one gradebook) and build the sandbox's site, under ``dest``."""
    base = _scratch_course(root, labs, dest)
    for lab in labs:
        _generate(base, lab)
    scratch = dest / "scratch"
    scratch.mkdir(exist_ok=True)
    run = _RunSettings(mode="bwrap" if use_sandbox else "none", site=sandbox.build_site(dest / "site"),
                       scratch=scratch, perf=perf, limits=limits or sandbox.Limits(), gpu=gpu)
    for p in run.site.rglob("*"):  # read-only for everyone: the sandbox binds it read-only as well
        if p.is_file():
            p.chmod(0o444)
    return _Prepared(base, run)


def _grade_guarded(sub: Submission, prep: _Prepared, work: Path, root: Path, **kw: Any) -> tuple[Row, bool]:
    """(row, keep): a row to store, or a grader error (not the submission's fault: not stored, retried)."""
    try:
        return _grade_one(sub, prep, work, root, **kw), True
    except Exception as exc:  # the run goes on; the row says what went wrong
        why = f"grading error: {type(exc).__name__}: {exc} (not the submission's fault; run again to retry)"
        return _finish(_failed(Row(sub.student, sub.lab), why)), False


def _stored(row: Row) -> dict[str, Any]:
    d = asdict(row)
    d.pop("notes", None)
    return d


class Progress:
    """One line: ``[#####-----] 12/40 graded, 1 failed, 2 running, about 3 min left``.

    The estimate is the mean time of this run's gradings so far times what is left, divided by the
    number running at once. On a terminal the line is redrawn; elsewhere (a log) printed on change.
    """

    def __init__(self, total: int, parallel: int, *, stream: Any = None, label: str = "grading"):
        self.total, self.parallel, self.label = total, max(1, parallel), label
        self.stream = stream if stream is not None else sys.stderr
        self.durations: list[float] = []
        self.last = ""
        self.start = time.monotonic()

    @staticmethod
    def _clock(seconds: float) -> str:
        s = int(round(seconds))
        return f"{s // 3600} h {s % 3600 // 60:02d} min" if s >= 3600 else f"{s // 60} min {s % 60:02d} s"

    def line(self, finished: int, failed: int, running: int) -> str:
        width = 24
        fill = int(width * finished / self.total) if self.total else width
        left = self.total - finished
        if left == 0:
            eta = f"done in {self._clock(time.monotonic() - self.start)}"
        elif self.durations:
            eta = f"about {self._clock(sum(self.durations) / len(self.durations) * left / self.parallel)} left"
        elif finished:
            eta = f"about {self._clock((time.monotonic() - self.start) / finished * left)} left"
        else:
            eta = "time left: known after the first submission"
        return (f"{self.label}: [{'#' * fill}{'-' * (width - fill)}] {finished}/{self.total} graded, "
                f"{failed} failed, {running} running, {eta}")

    def show(self, finished: int, failed: int, running: int) -> None:
        text = self.line(finished, failed, running)
        if text == self.last:
            return
        self.last = text
        tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.stream.write(("\r" + text + ("\n" if finished == self.total else "")) if tty else text + "\n")
        self.stream.flush()


class Interrupted(Exception):
    """A run stopped by Ctrl-C or SIGTERM; finished rows are stored, the rest are pending."""


class _StopFlag:
    """Set once by the main thread on Ctrl-C, read by the grading threads (a bool is atomic in CPython)."""

    def __init__(self) -> None:
        self._on = False

    def set(self) -> None:
        self._on = True

    def is_set(self) -> bool:
        return self._on


def run_local(plan_: Plan, prep: _Prepared, *, jobs: int = 1, timeout: float = 3600, extra: list[str] | None = None,
              feedback: bool = True, verbose: bool = True, slots: list[Slot] | None = None) -> dict[tuple[str, str], Row]:
    """Grade ``plan_.todo`` here, ``jobs`` at a time, one slot each; store each row as it finishes.

    Returns the rows that could not be stored (grader errors). Ctrl-C (or SIGTERM) ends every running
    grading with all it started, keeps every stored row, and raises :class:`Interrupted`.
    """
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    store = RowStore(plan_.root)
    slots = slots or make_slots(jobs, gpus=_gpu_ids(prep.run), timed_on_gpu=prep.run.perf == "cuda")
    free: queue.Queue = queue.Queue()
    for s in slots:
        free.put(s)
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
    try:
        while pending:
            finished, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for f in finished:
                f.result()
            if verbose and plan_.todo:
                with lock:
                    progress.show(counts["finished"], counts["failed"], counts["running"])
    except KeyboardInterrupt:
        stop.set()
        _kill_live()
        pool.shutdown(wait=True, cancel_futures=True)
        raise Interrupted(f"interrupted: {counts['finished']} of {len(plan_.todo)} graded in this run are kept; "
                          "run the same command again to grade the rest") from None
    pool.shutdown(wait=True)
    return unstored


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
    """One gradebook (:mod:`mlsys.course.gradebook`): record every graded row of ``plan_`` that the course
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
    digest (:func:`mlsys.course.rowstore.grader_digest` of the course's nbgrader_config.py)."""
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
    (:mod:`mlsys.course.slots`). ``slurm_options`` grades on a Slurm cluster instead, as a job array
    of ``batch`` submissions per task (:func:`run_slurm`). ``use_sandbox=False`` runs student code
    unconfined (logged loudly). ``perf`` is "cuda", "fake" (deterministic fake timer, for CI) or
    "off"; default: "cuda" where CUDA is present (on Slurm: where ``--gres`` asks for a GPU), "fake"
    if ``MLSYS_FAKE_TIMER=1``, else "off". Results go to ``autograded/`` and ``feedback/`` under
    ``root`` and to ``out_csv`` (default ``root/grades.csv``), where rows of labs not graded in this
    run are kept. A submission graded before with the same files, instructor version and settings is
    not graded again (``regrade`` forces it). Raises :class:`mlsys.course.sandbox.SandboxUnavailable`
    when bubblewrap cannot run and ``use_sandbox`` is true, :class:`Interrupted` on Ctrl-C.
    """
    root = (root or labs_root()).resolve()
    out_csv = out_csv or root / "grades.csv"
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
    p = plan(root, submitted=submitted, labs=labs, settings=settings, regrade=regrade)
    if verbose:
        print(f"{len(p.todo)} submission(s) to grade, {len(p.done)} unchanged since they were graded (kept), "
              f"{len(p.problems)} that cannot be graded", flush=True)
        for why, n in sorted(p.again.items()):
            print(f"  {n} graded again: {why}", flush=True)
    extra = [f"--Execute.timeout={int(cell_timeout)}"] if cell_timeout else []
    unstored: dict[tuple[str, str], Row] = {}
    missing: dict[tuple[str, str], str] = {}
    before = {q: _sha(q) for s in p.todo for f in s.files() for q in ([f] if f.is_file() else f.rglob("*"))
              if q.is_file() and not q.is_symlink()}
    needed = sorted({s.lab for s in p.todo})
    try:
        if p.todo and slurm_options is not None:
            missing = run_slurm(p, slurm_options, needed=needed, use_sandbox=use_sandbox, perf=perf, limits=limits,
                                timeout=timeout, extra=extra, feedback=feedback, batch=batch, verbose=verbose,
                                regrade=regrade)
        elif p.todo:
            with tempfile.TemporaryDirectory(prefix="mlsys-grade-") as tmp:
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
        raise RuntimeError("a submitted file changed during grading; this is a bug in mlsys.course.teach")
    return report(p, out_csv, unstored=unstored, missing=missing)


# ---------------------------------------------------------------------------------------------- Slurm


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
        [sys.executable, "-m", "mlsys.course.teach", "grade-task", str(manifest)],
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
    with tempfile.TemporaryDirectory(prefix="mlsys-grade-task-") as tmp:
        scratch = Path(tmp) / "scratch"
        scratch.mkdir()
        run = _RunSettings(mode=m["mode"], site=Path(m["site"]), scratch=scratch, perf=m["perf"], gpu=gpu,
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


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any) -> Any:
    """A text cell that a spreadsheet would read as a formula gets a leading apostrophe (OWASP's advice)."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _csv_value(d: dict[str, Any]) -> dict[str, Any]:
    for k in ("correctness_score", "correctness_max", "performance_score", "performance_max", "manual_max",
              "total_score"):
        if isinstance(d.get(k), float):
            d[k] = f"{d[k]:g}"
    return {k: _csv_cell(v) for k, v in d.items()}


def write_csv(rows: list[Row], path: Path, *, keep_other_labs: bool = False) -> None:
    """The grade report: one line per (student, lab), columns :data:`CSV_FIELDS`.

    With ``keep_other_labs``, lines of an existing report whose lab is not among ``rows``' labs are
    kept (grading Lab 2 leaves Lab 1's grades as they were); the labs in ``rows`` are replaced whole.
    Text that a spreadsheet would take for a formula (``=``, ``+``, ``-``, ``@`` first) starts with
    an apostrophe. Written to a temporary file, then renamed: never half a report.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    kept: list[dict[str, Any]] = []
    graded_labs = {r.lab for r in rows}
    if keep_other_labs and path.is_file():
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            ours = {"student", "lab", "status"} <= set(reader.fieldnames or [])
            # another tool's CSV at this path (nbgrader export's, before labs/nbgrader_config.py sent it to
            # nbgrader_grades.csv) holds no row of ours: it is replaced, never read as blank rows
            kept = [r for r in reader if r.get("lab") not in graded_labs and r.get("student")] if ours else []
    lines = [_csv_value(d) for d in kept] + [_csv_value(asdict(r)) for r in rows]
    lines.sort(key=lambda d: (str(d.get("student")).lstrip("'"), str(d.get("lab"))))
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore", restval="")
        w.writeheader()
        for d in lines:
            w.writerow(d)
    tmp.replace(path)


def _zero(row: Row) -> Row:
    row.correctness_score, row.total_score = 0.0, 0.0
    row.performance_score = 0.0
    row.performance = "none" if row.performance == "none" else "graded"
    return row


def _failed(row: Row, reason: str) -> Row:
    _zero(row)
    row.status, row.reason = "failed", reason
    if row.performance != "none":
        row.performance, row.performance_score = "not graded (grading failed)", ""
    return row


def _reset(row: Row) -> Row:
    row.correctness_score = row.correctness_max = row.performance_max = row.manual_max = row.total_score = 0.0
    row.performance_score, row.performance = 0.0, "graded"
    return row


# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["similarity"]:  # `teach similarity LAB`: copied-work report (mlsys.course.similarity, own options)
        from .similarity import main as similarity_main
        return similarity_main(args[1:])
    p = argparse.ArgumentParser(prog="python -m mlsys.course.teach", description=__doc__.split("\n\n")[0])
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
    a = p.parse_args(argv)
    if a.cmd in ("release", "check-release"):
        try:
            return _release_command(a.cmd, a.labs or None)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if a.cmd == "grade-task":
        signal.signal(signal.SIGTERM, _interrupt)  # Slurm's time limit: end the running grading cleanly
        try:
            return grade_task(a.manifest, a.index)
        except KeyboardInterrupt:
            _kill_live()
            print("task stopped (time limit or scancel); rows stored so far are kept", flush=True)
            return 1
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
