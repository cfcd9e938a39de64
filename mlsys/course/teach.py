"""Teacher commands: make the student versions of the labs and grade submissions.

``python -m mlsys.course.teach release``        labs/source/<lab>/ -> labs/release/<lab>/ (nbgrader generate_assignment)
``python -m mlsys.course.teach check-release``  exit 1 if a committed release differs from what release makes now
``python -m mlsys.course.teach grade``          labs/submitted/<student>/<lab>/<lab>.ipynb -> labs/grades.csv,
                                         labs/autograded/..., labs/feedback/.../<lab>.html

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
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import audit, feedback_marks, sandbox  # feedback_marks: issue 30
from .grading import NOT_GRADED

__all__ = ["labs_root", "lab_names", "release", "check_release", "grade", "score_notebook", "Row", "main"]

MAX_OUTPUT_CHARS = 20_000  # per output, in the returned autograded/feedback notebooks
CSV_FIELDS = [
    "student", "lab", "status", "correctness_score", "correctness_max", "performance_score", "performance_max",
    "performance", "manual_max", "total_score", "reason", "summary", "flags",
]


def labs_root() -> Path:
    """The nbgrader course root: ``<repo>/labs`` (the folder holding nbgrader_config.py)."""
    return Path(__file__).resolve().parents[2] / "labs"


def lab_names(root: Path | None = None) -> list[str]:
    """Labs with an instructor notebook ``source/<lab>/<lab>.ipynb``, sorted."""
    src = (root or labs_root()) / "source"
    return sorted(p.name for p in src.iterdir() if (p / f"{p.name}.ipynb").is_file()) if src.is_dir() else []


# ----------------------------------------------------------------------------------------------
# running nbgrader


def _run(args: list[str], cwd: Path, timeout: float, log: Path,
         env: dict[str, str] | None = None) -> tuple[int | None, str]:
    """Run ``python -m nbgrader ARGS`` in its own process group; (returncode or None on timeout, log tail)."""
    env = dict(os.environ, PYTHONHASHSEED="0", MPLBACKEND="Agg", PYDEVD_DISABLE_FILE_VALIDATION="1", **(env or {}))
    # the grader's own mlsys (nbgrader_config.py imports its sandboxed executor) whatever the working folder
    pkg_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    # nbgrader runs the `alembic` script of its own environment: put that environment's bin first
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "nbgrader", *args], cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            _kill_tree(proc.pid)
            proc.wait()
    with open(log, "rb") as fh:
        fh.seek(max(0, log.stat().st_size - 20_000))
        return rc, fh.read().decode("utf-8", "replace")


def _descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (children, grandchildren, ...), read from /proc where it exists."""
    try:
        import psutil

        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except Exception:  # psutil missing, or the process already gone
        pass
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid``'s process group and every descendant (jupyter starts kernels in a new session)."""
    victims = _descendants(pid)
    for target in (pid, *victims):
        for kill in (os.killpg, os.kill):
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass


def _scratch_course(root: Path, labs: list[str], tmp: Path) -> Path:
    course = tmp / "course"
    (course / "source").mkdir(parents=True)
    shutil.copy2(root / "nbgrader_config.py", course / "nbgrader_config.py")
    for lab in labs:
        shutil.copytree(root / "source" / lab, course / "source" / lab,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    return course


def _generate(course: Path, lab: str, timeout: float = 300) -> None:
    rc, out = _run(["generate_assignment", lab, "--force", "--db", f"sqlite:///{course / 'gradebook.db'}"],
                   course, timeout, course / f"generate_{lab}.log")
    if rc != 0:
        raise RuntimeError(f"nbgrader generate_assignment {lab} failed (exit {rc}):\n{out[-4000:]}")


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


def _build_releases(root: Path, labs: list[str], tmp: Path) -> dict[str, dict[str, bytes]]:
    course = _scratch_course(root, labs, tmp)
    out: dict[str, dict[str, bytes]] = {}
    for lab in labs:
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


def release(labs: list[str] | None = None, root: Path | None = None) -> list[Path]:
    """Write ``release/<lab>/`` for each lab (all labs by default); returns the files written."""
    root = root or labs_root()
    labs = labs or lab_names(root)
    written = []
    with tempfile.TemporaryDirectory(prefix="mlsys-release-") as tmp:
        for lab, files in _build_releases(root, labs, Path(tmp)).items():
            dest = root / "release" / lab
            if dest.exists():
                shutil.rmtree(dest)
            for rel, data in files.items():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                (dest / rel).write_bytes(data)
                written.append(dest / rel)
    return written


def check_release(labs: list[str] | None = None, root: Path | None = None) -> list[str]:
    """Differences between the committed releases and freshly generated ones (empty when in sync)."""
    root = root or labs_root()
    labs = labs or lab_names(root)
    problems = []
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
    if row.manual_max:
        parts.append(f"{_pts(row.manual_max)} points of written answers pending")
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
    tail = [ln for ln in log.strip().splitlines() if ln.strip()][-1:] or ["no log"]
    return f"nbgrader autograde failed (exit {rc}): {tail[0][:200]}"


def _validate_submission(path: Path) -> str | None:
    import nbformat

    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:  # any parse failure is reported, not raised
        return f"malformed notebook: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    try:
        nbformat.validate(nb)
    except Exception as exc:
        return f"malformed notebook (fails the notebook schema): {str(exc).splitlines()[0][:200]}"
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
    """The lab's perf.toml as a dict (validated), or {} when the lab has none."""
    path = root / "source" / lab / "perf.toml"
    if not path.is_file():
        return {}
    import tomllib

    from .trusted import load_spec

    load_spec(path)  # a malformed spec stops the run here, with its message
    return tomllib.loads(path.read_text(encoding="utf-8"))


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


def _grade_one(student: str, lab: str, labdir: Path, base: Path, work: Path, root: Path, submitted: Path, *,
               timeout: float, extra: list[str], feedback: bool, verbose: bool, run: _RunSettings) -> Row:
    """Grade one submission in its own scratch course (own gradebook copy): returns its row."""
    row = Row(student, lab)
    source_nb = json.loads((root / "source" / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
    score_notebook(source_nb, None, row)  # the maxima, reported even when grading fails
    _zero(row)
    nb_path = labdir / f"{lab}.ipynb"
    if nb_path.is_symlink() or not nb_path.is_file():
        return _finish(_failed(row, f"no notebook: expected {nb_path.relative_to(submitted)} (a regular file)"))
    bad = _validate_submission(nb_path)
    if bad:
        return _finish(_failed(row, bad))
    release_nb = base / "release" / lab / f"{lab}.ipynb"
    try:
        given = json.loads(release_nb.read_text(encoding="utf-8")) if release_nb.is_file() else None
        row.flags = audit.format_flags(audit.audit_notebook(json.loads(nb_path.read_text(encoding="utf-8")), given))
    except Exception as exc:  # the audit never stops grading
        row.flags = f"audit failed: {type(exc).__name__}"
    if any(p.is_symlink() for p in labdir.rglob("*")):
        row.flags = "; ".join(x for x in (row.flags, "file: symbolic link in the submission (ignored)") if x)
    course = work / f"{student}__{lab}"
    (course / "source").mkdir(parents=True)
    shutil.copy2(base / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copy2(base / "gradebook.db", course / "gradebook.db")
    shutil.copytree(base / "source" / lab, course / "source" / lab)
    shutil.copytree(labdir, course / "submitted" / student / lab, ignore=_no_links)
    db = f"sqlite:///{course / 'gradebook.db'}"
    if verbose:
        print(f"grading {student}/{lab} ...", flush=True)
    report_path = course / "sandbox_report.json"
    settings = {"mode": run.mode, "site": str(run.site), "scratch": str(run.scratch), "wall": timeout,
                "perf": run.perf, "cases": _perf_cases(root, lab), "report": str(report_path),
                "limits": asdict(run.limits), "gpu": run.gpu}
    env = {"MLSYS_SANDBOX": json.dumps(settings)}
    rc, out = _run(["autograde", lab, "--student", student, "--create", "--force", "--db", db, *extra],
                   course, timeout + 120, course / "autograde.log", env=env)
    graded = course / "autograded" / student / lab / f"{lab}.ipynb"
    if rc != 0 or not graded.is_file():
        return _finish(_failed(row, _reason(rc, out, timeout + 120)))
    _trim_outputs(graded)
    graded_nb = json.loads(graded.read_text(encoding="utf-8"))
    _reset(row)
    score_notebook(source_nb, graded_nb, row)
    if report_path.is_file():
        _report_notes(row, json.loads(report_path.read_text(encoding="utf-8")), timeout)
    for cell in graded_nb.get("cells", []):
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error" and o.get("ename") == "CellTimeoutError":
                gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or cell.get("id", "?")
                row.notes.append(f"cell {gid} timed out (per-cell time limit)")
    row.reason = "; ".join(dict.fromkeys(row.notes))
    _finish(row)
    target = root / "autograded" / student / lab
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(course / "autograded" / student / lab, target, ignore=_no_links)
    if feedback:
        rc, out = _run(["generate_feedback", lab, "--student", student, "--force", "--db", db],
                       course, 600, course / "feedback.log")
        fb = course / "feedback" / student / lab
        if rc == 0 and fb.is_dir():
            for html in fb.glob("*.html"):
                _annotate_feedback(html, row)
                # issue 30: cells without a score yet read "not graded here" / "pending", not 0.0
                html.write_text(feedback_marks.relabel(html.read_text(encoding="utf-8"),
                                                       feedback_marks.ungraded_cells(graded_nb)), encoding="utf-8")
            ftarget = root / "feedback" / student / lab
            if ftarget.exists():
                shutil.rmtree(ftarget)
            shutil.copytree(fb, ftarget, ignore=_no_links)
        else:
            row.notes.append("feedback could not be generated")
            row.reason = "; ".join(dict.fromkeys(row.notes))
    return row


def _finish(row: Row) -> Row:
    row.summary = summarize(row)
    return row


def _has_cuda() -> bool:
    from .device import has_cuda

    return has_cuda()


def _perf_mode(perf: str | None) -> str:
    if perf is not None:
        if perf not in ("off", "cuda", "fake"):
            raise ValueError(f"perf: expected 'off', 'cuda' or 'fake', got {perf!r}")
        return perf
    if os.environ.get("MLSYS_FAKE_TIMER") == "1":
        return "fake"
    from .device import has_cuda

    return "cuda" if has_cuda() else "off"


def grade(root: Path | None = None, *, submitted: Path | None = None, out_csv: Path | None = None,
          timeout: float = 3600, cell_timeout: int | None = None, labs: list[str] | None = None,
          feedback: bool = True, jobs: int = 1, verbose: bool = True, use_sandbox: bool = True,
          perf: str | None = None, limits: sandbox.Limits | None = None) -> list[Row]:
    """Autograde every ``submitted/<student>/<lab>/<lab>.ipynb``; update the CSV; return the rows.

    ``timeout`` bounds one submission's whole run (seconds; cells run before it keep their points);
    ``cell_timeout`` overrides the per-cell limit from nbgrader_config.py; ``jobs`` submissions are
    graded at a time (keep 1 where performance cells are timed on a GPU). ``use_sandbox=False`` runs
    student code unconfined (logged loudly). ``perf`` is "cuda", "fake" (deterministic fake timer,
    for CI) or "off"; default: "cuda" where CUDA is present, "fake" if ``MLSYS_FAKE_TIMER=1``, else
    "off" (performance reported as not graded). Results go to ``autograded/`` and ``feedback/``
    under ``root`` and to ``out_csv`` (default ``root/grades.csv``), where rows of labs not graded
    in this run are kept. Raises :class:`mlsys.course.sandbox.SandboxUnavailable` when bubblewrap
    cannot run and ``use_sandbox`` is true.
    """
    from concurrent.futures import ThreadPoolExecutor

    root = (root or labs_root()).resolve()
    submitted = (submitted or root / "submitted").resolve()
    out_csv = out_csv or root / "grades.csv"
    if use_sandbox:
        sandbox.check()
    else:
        print(sandbox.NO_SANDBOX_WARNING, file=sys.stderr, flush=True)
    known = lab_names(root)
    todo: list[tuple[str, str, Path]] = []
    rows: list[Row] = []
    students = sorted(p.name for p in submitted.iterdir() if p.is_dir()) if submitted.is_dir() else []
    for student in students:
        for labdir in sorted(p for p in (submitted / student).iterdir() if p.is_dir() and not p.is_symlink()):
            lab = labdir.name
            if labs and lab not in labs:
                continue
            if lab not in known:
                rows.append(_finish(_failed(Row(student, lab), f"unknown lab {lab!r}; expected one of {known}")))
                continue
            todo.append((student, lab, labdir))
    before = {p: _sha(p) for _, _, d in todo for p in d.rglob("*") if p.is_file() and not p.is_symlink()}
    extra = [f"--Execute.timeout={int(cell_timeout)}"] if cell_timeout else []
    with tempfile.TemporaryDirectory(prefix="mlsys-grade-") as tmp:
        needed = sorted({lab for _, lab, _ in todo})
        base = _scratch_course(root, needed, Path(tmp))
        for lab in needed:
            _generate(base, lab)
        work = Path(tmp) / "jobs"
        work.mkdir()
        scratch = Path(tmp) / "scratch"
        scratch.mkdir()
        run = _RunSettings(mode="bwrap" if use_sandbox else "none", site=sandbox.build_site(Path(tmp) / "site"),
                           scratch=scratch, perf=_perf_mode(perf), limits=limits or sandbox.Limits(), gpu=_has_cuda())
        for p in run.site.rglob("*"):  # read-only for everyone: the sandbox binds it read-only as well
            if p.is_file():
                p.chmod(0o444)

        def one(job: tuple[str, str, Path]) -> Row:
            student, lab, labdir = job
            try:
                return _grade_one(student, lab, labdir, base, work, root, submitted, timeout=timeout, extra=extra,
                                  feedback=feedback, verbose=verbose, run=run)
            except Exception as exc:  # the run goes on; the row says what went wrong
                return _finish(_failed(Row(student, lab), f"grading error: {type(exc).__name__}: {exc}"))

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            rows.extend(pool.map(one, todo))
    after = {p: _sha(p) for p in before if p.is_file()}
    if after != before:  # a safety net: grading must never change what students handed in
        raise RuntimeError("a submitted file changed during grading; this is a bug in mlsys.course.teach")
    rows.sort(key=lambda r: (r.student, r.lab))
    write_csv(rows, out_csv, keep_other_labs=True)
    return rows


def _csv_value(d: dict[str, Any]) -> dict[str, Any]:
    for k in ("correctness_score", "correctness_max", "performance_score", "performance_max", "manual_max",
              "total_score"):
        if isinstance(d.get(k), float):
            d[k] = f"{d[k]:g}"
    return d


def write_csv(rows: list[Row], path: Path, *, keep_other_labs: bool = False) -> None:
    """The grade report: one line per (student, lab), columns :data:`CSV_FIELDS`.

    With ``keep_other_labs``, lines of an existing report whose lab is not among ``rows``' labs are
    kept (grading Lab 2 leaves Lab 1's grades as they were); the labs in ``rows`` are replaced whole.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    kept: list[dict[str, Any]] = []
    graded_labs = {r.lab for r in rows}
    if keep_other_labs and path.is_file():
        with open(path, newline="", encoding="utf-8") as fh:
            kept = [r for r in csv.DictReader(fh) if r.get("lab") not in graded_labs]
    lines = kept + [_csv_value(asdict(r)) for r in rows]
    lines.sort(key=lambda d: (str(d.get("student")), str(d.get("lab"))))
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
    p = argparse.ArgumentParser(prog="python -m mlsys.course.teach", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("release", help="generate labs/release/<lab>/ from labs/source/<lab>/")
    r.add_argument("labs", nargs="*", help="labs to release (default: all)")
    c = sub.add_parser("check-release", help="exit 1 if committed releases differ from a fresh `release`")
    c.add_argument("labs", nargs="*")
    g = sub.add_parser("grade", help="autograde labs/submitted/<student>/<lab>/ into labs/grades.csv")
    g.add_argument("labs", nargs="*", help="labs to grade (default: every lab found in submitted/)")
    g.add_argument("--submitted", type=Path, help="folder of <student>/<lab>/<lab>.ipynb (default labs/submitted)")
    g.add_argument("--csv", type=Path, help="where to write the report (default labs/grades.csv)")
    g.add_argument("--timeout", type=float, default=3600, help="seconds allowed for one submission (default 3600)")
    g.add_argument("--cell-timeout", type=int, help="seconds per cell (default: nbgrader_config.py, 600)")
    g.add_argument("--no-feedback", action="store_true", help="skip the HTML feedback")
    g.add_argument("--jobs", type=int, default=1, help="submissions graded at a time (default 1: GPU timings stay fair)")
    g.add_argument("--no-sandbox", action="store_true",
                   help="run student code WITHOUT the bubblewrap sandbox (logged loudly; trusted submissions only)")
    g.add_argument("--perf", choices=["cuda", "fake", "off"],
                   help="performance cells: time on CUDA, use the fake timer (CI), or report not graded "
                        "(default: cuda where present, fake if MLSYS_FAKE_TIMER=1, else off)")
    a = p.parse_args(argv)
    if a.cmd == "release":
        for path in release(a.labs or None):
            print(f"wrote {path}")
        return 0
    if a.cmd == "check-release":
        problems = check_release(a.labs or None)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print("run `make release` and commit labs/release/", file=sys.stderr)
        return 1 if problems else 0
    try:
        rows = grade(submitted=a.submitted, out_csv=a.csv, timeout=a.timeout, cell_timeout=a.cell_timeout,
                     labs=a.labs or None, feedback=not a.no_feedback, jobs=a.jobs, use_sandbox=not a.no_sandbox,
                     perf=a.perf)
    except sandbox.SandboxUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    failed = sum(r.status != "ok" for r in rows)
    print(f"graded {len(rows)} submission(s), {failed} with problems; report: {a.csv or labs_root() / 'grades.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
