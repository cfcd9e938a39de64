"""Teacher commands: make the student versions of the labs and grade submissions.

``python -m mlsys.course.teach release``        labs/source/<lab>/ -> labs/release/<lab>/ (nbgrader generate_assignment)
``python -m mlsys.course.teach check-release``  exit 1 if a committed release differs from what release makes now
``python -m mlsys.course.teach grade``          labs/submitted/<student>/<lab>/<lab>.ipynb -> labs/grades.csv,
                                         labs/autograded/..., labs/feedback/.../<lab>.html

nbgrader always runs in a scratch copy of the course root (``labs/nbgrader_config.py`` and the
sources), so submitted files are only ever read, and each submission's autograde runs in its own
process group under a wall-clock limit: an endless loop, a crash or a flood of output costs that
submission, never the run. Every (student, lab) gets one CSV row: correctness points, performance
points (or "not graded (no GPU)"), points left for manual grading, and, where grading failed, why.
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

from .grading import NOT_GRADED

__all__ = ["labs_root", "lab_names", "release", "check_release", "grade", "score_notebook", "Row", "main"]

MAX_OUTPUT_CHARS = 20_000  # per output, in the returned autograded/feedback notebooks
CSV_FIELDS = [
    "student", "lab", "status", "correctness_score", "correctness_max", "performance_score", "performance_max",
    "performance", "manual_max", "total_score", "reason",
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


def _run(args: list[str], cwd: Path, timeout: float, log: Path) -> tuple[int | None, str]:
    """Run ``python -m nbgrader ARGS`` in its own process group; (returncode or None on timeout, log tail)."""
    env = dict(os.environ, PYTHONHASHSEED="0", MPLBACKEND="Agg", PYDEVD_DISABLE_FILE_VALIDATION="1")
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
    notes: list[str] = field(default_factory=list, repr=False)


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


def _grade_one(student: str, lab: str, labdir: Path, base: Path, work: Path, root: Path, submitted: Path, *,
               timeout: float, extra: list[str], feedback: bool, verbose: bool) -> Row:
    """Grade one submission in its own scratch course (own gradebook copy): returns its row."""
    row = Row(student, lab)
    source_nb = json.loads((root / "source" / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
    score_notebook(source_nb, None, row)  # the maxima, reported even when grading fails
    _zero(row)
    nb_path = labdir / f"{lab}.ipynb"
    if not nb_path.is_file():
        return _failed(row, f"no notebook: expected {nb_path.relative_to(submitted)}")
    bad = _validate_submission(nb_path)
    if bad:
        return _failed(row, bad)
    course = work / f"{student}__{lab}"
    (course / "source").mkdir(parents=True)
    shutil.copy2(base / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copy2(base / "gradebook.db", course / "gradebook.db")
    shutil.copytree(base / "source" / lab, course / "source" / lab)
    shutil.copytree(labdir, course / "submitted" / student / lab,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    db = f"sqlite:///{course / 'gradebook.db'}"
    if verbose:
        print(f"grading {student}/{lab} ...", flush=True)
    rc, out = _run(["autograde", lab, "--student", student, "--create", "--force", "--db", db, *extra],
                   course, timeout, course / "autograde.log")
    graded = course / "autograded" / student / lab / f"{lab}.ipynb"
    if rc != 0 or not graded.is_file():
        return _failed(row, _reason(rc, out, timeout))
    _trim_outputs(graded)
    graded_nb = json.loads(graded.read_text(encoding="utf-8"))
    _reset(row)
    score_notebook(source_nb, graded_nb, row)
    for cell in graded_nb.get("cells", []):
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error" and o.get("ename") == "CellTimeoutError":
                gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or cell.get("id", "?")
                row.notes.append(f"cell {gid} timed out (per-cell time limit)")
    target = root / "autograded" / student / lab
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(course / "autograded" / student / lab, target)
    if feedback:
        rc, out = _run(["generate_feedback", lab, "--student", student, "--force", "--db", db],
                       course, 600, course / "feedback.log")
        fb = course / "feedback" / student / lab
        if rc == 0 and fb.is_dir():
            ftarget = root / "feedback" / student / lab
            if ftarget.exists():
                shutil.rmtree(ftarget)
            shutil.copytree(fb, ftarget)
        else:
            row.notes.append("feedback could not be generated")
    row.reason = "; ".join(dict.fromkeys(row.notes))
    return row


def grade(root: Path | None = None, *, submitted: Path | None = None, out_csv: Path | None = None,
          timeout: float = 3600, cell_timeout: int | None = None, labs: list[str] | None = None,
          feedback: bool = True, jobs: int = 1, verbose: bool = True) -> list[Row]:
    """Autograde every ``submitted/<student>/<lab>/<lab>.ipynb``; write the CSV; return its rows.

    ``timeout`` bounds one submission's whole autograde (seconds); ``cell_timeout`` overrides the
    per-cell limit from nbgrader_config.py; ``jobs`` submissions are graded at a time (keep 1 where
    performance cells are timed on a GPU). Results go to ``autograded/`` and ``feedback/`` under
    ``root`` and to ``out_csv`` (default ``root/grades.csv``).
    """
    from concurrent.futures import ThreadPoolExecutor

    root = (root or labs_root()).resolve()
    submitted = (submitted or root / "submitted").resolve()
    out_csv = out_csv or root / "grades.csv"
    known = lab_names(root)
    todo: list[tuple[str, str, Path]] = []
    rows: list[Row] = []
    students = sorted(p.name for p in submitted.iterdir() if p.is_dir()) if submitted.is_dir() else []
    for student in students:
        for labdir in sorted(p for p in (submitted / student).iterdir() if p.is_dir()):
            lab = labdir.name
            if labs and lab not in labs:
                continue
            if lab not in known:
                rows.append(_failed(Row(student, lab), f"unknown lab {lab!r}; expected one of {known}"))
                continue
            todo.append((student, lab, labdir))
    before = {p: _sha(p) for _, _, d in todo for p in d.rglob("*") if p.is_file()}
    extra = [f"--Execute.timeout={int(cell_timeout)}"] if cell_timeout else []
    with tempfile.TemporaryDirectory(prefix="mlsys-grade-") as tmp:
        needed = sorted({lab for _, lab, _ in todo})
        base = _scratch_course(root, needed, Path(tmp))
        for lab in needed:
            _generate(base, lab)
        work = Path(tmp) / "jobs"
        work.mkdir()

        def one(job: tuple[str, str, Path]) -> Row:
            student, lab, labdir = job
            try:
                return _grade_one(student, lab, labdir, base, work, root, submitted, timeout=timeout, extra=extra,
                                  feedback=feedback, verbose=verbose)
            except Exception as exc:  # the run goes on; the row says what went wrong
                return _failed(Row(student, lab), f"grading error: {type(exc).__name__}: {exc}")

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            rows.extend(pool.map(one, todo))
    after = {p: _sha(p) for p in before if p.is_file()}
    if after != before:  # a safety net: grading must never change what students handed in
        raise RuntimeError("a submitted file changed during grading; this is a bug in mlsys.course.teach")
    rows.sort(key=lambda r: (r.student, r.lab))
    write_csv(rows, out_csv)
    return rows


def write_csv(rows: list[Row], path: Path) -> None:
    """The grade report: one line per (student, lab), columns :data:`CSV_FIELDS`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            d = asdict(r)
            for k in ("correctness_score", "correctness_max", "performance_score", "performance_max", "manual_max",
                      "total_score"):
                if isinstance(d[k], float):
                    d[k] = f"{d[k]:g}"
            w.writerow(d)


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
    rows = grade(submitted=a.submitted, out_csv=a.csv, timeout=a.timeout, cell_timeout=a.cell_timeout,
                 labs=a.labs or None, feedback=not a.no_feedback, jobs=a.jobs)
    failed = sum(r.status != "ok" for r in rows)
    print(f"graded {len(rows)} submission(s), {failed} with problems; report: {a.csv or labs_root() / 'grades.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
