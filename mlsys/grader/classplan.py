"""Grading a class, the plan: which (student, lab) submissions to grade and which stored rows to keep (by
key), the generated assignments every grading shares, one guarded grading, and the progress shown.

Moved out of :mod:`mlsys.grader.teach` (issue 48, "a size it can keep"); ``teach`` re-exports its names.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlsys.grader import assignments, sandbox, sanitize
from mlsys.grader.gradedrow import Row, _failed, _finish
from mlsys.grader.nbgraderrun import _generate, _scratch_course, seed_gradebook
from mlsys.grader.release import lab_names
from mlsys.grader.rowstore import RowStore, submission_key
from mlsys.grader.submission import Submission, _grade_one, _Prepared, _RunSettings, printable_name
from mlsys.runtime.paths import labs_root


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
        _student_folder(entry, known, labs, expected, found, problem)
    todo, done, again = _split_by_stored_rows(root, found, settings, regrade)
    graded_labs = sorted({s.lab for s in found} | {r.lab for r in problems if r.lab in known})
    return Plan(root, submitted, graded_labs, todo, done, problems, settings, {k: v for k, v in again.items() if k})


def _student_folder(entry: Path, known: list[str], labs: list[str] | None, expected: str, found: list[Submission],
                    problem: Callable[[str, str, str], None]) -> None:
    """One student's folder of ``submitted/``: each lab folder (or notebook saved without one) of a known lab
    appended to ``found`` (only ``labs`` where given), and a failed row through ``problem`` for a name that is not
    UTF-8, an unknown lab, a stray notebook or a folder with nothing to grade."""
    student, any_work = entry.name, False
    shown = printable_name(student)
    if shown != student:  # bytes that are not UTF-8: no report, row file or terminal can hold the name as it is
        if not labs:
            problem(shown, "(none)", "the folder name is not valid UTF-8 (shown here with \\x escapes): rename "
                                     f"the folder and grade again; {expected}")
        return
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
            found.append(_lab_folder(student, lab, child))
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


def _lab_folder(student: str, lab: str, child: Path) -> Submission:
    """A student's folder of a known lab: its ``<lab>.ipynb``, or its one notebook under another name
    ("lab1 (1).ipynb", as a browser saves a second download), graded with a note saying so."""
    nb, note = child / f"{lab}.ipynb", ""
    others = sorted(q for q in child.glob("*.ipynb") if q.is_file() and not q.is_symlink())
    if not nb.exists() and len(others) == 1:  # "lab1 (1).ipynb", as a browser saves a second download
        nb, note = others[0], (f"the notebook is named {printable_name(others[0].name)!r}; graded as "
                               f"{lab} (expected {lab}/{lab}.ipynb)")
    return Submission(student, lab, nb, child, note=note)


def _split_by_stored_rows(root: Path, found: list[Submission], settings: dict[str, Any],
                          regrade: bool) -> tuple[list[Submission], list[Submission], dict[str, int]]:
    """Each found submission keyed (files, instructor version, settings): ``done`` when its stored row has the same
    key and grader (unless ``regrade``), else ``todo``; with the count of each reason a stored row is graded again."""
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
    return todo, done, again


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
    assignments.generate_all(base, labs, _generate)  # kept by the digest of what makes it (about 3.5 CPU-s a lab)
    seed_gradebook(root, base)  # a course's first run: its gradebook without generating the labs a second time
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
