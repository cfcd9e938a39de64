"""Grading one submission: validated, its cells put back in the released order, autograded by nbgrader (in the
sandbox), its scores, performance verdicts, audit flags and feedback read into a :class:`Row`.

Moved out of :mod:`mlsys.grader.teach` (issue 48, "a size it can keep"); ``teach`` re-exports its names.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlsys.grader import feedback_marks, sandbox, sanitize
from mlsys.grader.decide import audit
from mlsys.grader.decide.verdict import cell_status
from mlsys.grader.gradedrow import Row, _failed, _finish, _reset, _zero
from mlsys.grader.nbgraderrun import _run
from mlsys.grader.rowstore import RowStore
from mlsys.grader.slots import Slot
from mlsys.labkit.grading import NOT_GRADED

MAX_OUTPUT_CHARS = 20_000  # per output, in the returned autograded/feedback notebooks


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
            if cell is not None and cell_status(cell) == "not_graded":  # the grader's field, not the output's text
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

    Read once, by :func:`mlsys.grader.decide.trusted.load_spec` (a malformed spec stops the run here, with its
    message); each case goes on the wire as its fields, which :meth:`PerfCase.from_dict` reads back.
    """
    path = root / "source" / lab / "perf.toml"
    if not path.is_file():
        return {}
    from mlsys.grader.decide.trusted import load_spec

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
    for gid, v in sorted(report.get("perf", {}).items()):
        if v.get("reason"):
            row.notes.append(f"{gid}: {v['reason']}")


def _one_line(text: str) -> str:
    """``text`` as one line of the flags column: runs of white space (newlines too) as one space, no ``;``."""
    return " ".join(printable_name(text).replace(";", ",").split())


def _stranger_flags(report: dict[str, Any], limit: int = 3) -> list[str]:
    """``process`` flags for the processes the grader saw alive in the sandbox while it ran test cells
    (:mod:`mlsys.grader.learnerside.census`): work done there is in no record of a checked call."""
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
        if meta.get("nbgrader") is not None and _course_metadata(meta, known, seen, unknown, restored):
            changed = True
        if meta.pop("mlsys", None) is not None:  # the grader's own field (a perf cell's verdict): only it writes one
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


def _course_metadata(meta: dict[str, Any], known: dict[str, dict[str, Any]], seen: dict[str, int], unknown: list[str],
                     restored: list[str]) -> bool:
    """One cell's nbgrader metadata made the instructor's (see :func:`_normalise_cells`): the first cell of a
    known grade id gets the course's, a later copy, an unknown id or no id loses it; the counts and ids of what
    was found go to ``seen``, ``unknown`` and ``restored``. Returns whether the cell changed."""
    nbg = meta.get("nbgrader")
    gid = nbg.get("grade_id") if isinstance(nbg, dict) else None
    gid = gid if isinstance(gid, str) and gid else None
    if gid is not None:
        seen[gid] = seen.get(gid, 0) + 1
    if gid is None or gid not in known or seen[gid] > 1:
        if gid is not None and gid not in known:
            unknown.append(gid)
        meta.pop("nbgrader")
        return True
    if nbg != known[gid]:
        if any(nbg.get(k) != known[gid].get(k) for k in ("grade", "solution", "points", "task")):
            restored.append(gid)
        meta["nbgrader"] = dict(known[gid])
        return True
    return False


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
    _audit_flags(sub, base, row)
    sid = _nbgrader_id(student)
    course, dest = _scratch_submission(sub, base, work, sid)
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
    graded_nb = _read_graded(graded, source_nb, report_path, row, timeout)
    if report_path.is_file():  # the verdicts' evidence, for the teacher (feedback never reads it)
        kept = RowStore(root).evidence_path(student, lab)
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(report_path, kept)
    row.reason = "; ".join(dict.fromkeys(row.notes))
    _finish(row)
    _replace_tree(course / "autograded" / sid / lab, root / "autograded" / student / lab)
    if feedback:
        _feedback(course, sid, sub, root, row, graded_nb, slot)
    return row


def _audit_flags(sub: Submission, base: Path, row: Row) -> None:
    """The row's flags: the static audit of the submitted notebook against the released one (an audit that fails
    says so, and never stops grading), and a symbolic link in the submission's folder."""
    lab, nb_path = sub.lab, sub.notebook
    release_nb = base / "release" / lab / f"{lab}.ipynb"
    try:
        given = json.loads(release_nb.read_text(encoding="utf-8")) if release_nb.is_file() else None
        row.flags = audit.format_flags(audit.audit_notebook(json.loads(nb_path.read_text(encoding="utf-8")), given))
    except Exception as exc:  # the audit never stops grading
        row.flags = f"audit failed: {type(exc).__name__}"
    if sub.folder is not None and any(p.is_symlink() for p in sub.folder.rglob("*")):
        row.flags = "; ".join(x for x in (row.flags, "file: symbolic link in the submission (ignored)") if x)


def _scratch_submission(sub: Submission, base: Path, work: Path, sid: str) -> tuple[Path, Path]:
    """A scratch nbgrader course for one submission (the lab's source, config and a gradebook copy) with the
    submission under ``submitted/<sid>/<lab>`` (its folder without links, or its notebook alone); returns the
    course and the submission's folder there."""
    lab, nb_path = sub.lab, sub.notebook
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
    return course, dest


def _read_graded(graded: Path, source_nb: dict[str, Any], report_path: Path, row: Row, timeout: float) -> dict[str, Any]:
    """The autograded notebook trimmed and sanitized in place (no hidden test, no live markup leaves: issue 26),
    its scores read into ``row`` with the sandbox report's notes and flags and each cell that timed out; returns
    the notebook."""
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
    return graded_nb


def _feedback(course: Path, sid: str, sub: Submission, root: Path, row: Row, graded_nb: dict[str, Any],
              slot: Slot | None) -> None:
    """The HTML feedback generated by nbgrader, annotated with the row and relabelled (cells without a score yet
    read "not graded here" / "pending", not 0.0), moved to ``root/feedback``; a note on the row if it failed."""
    lab, student, db = sub.lab, sub.student, f"sqlite:///{course / 'gradebook.db'}"
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


def _has_cuda() -> bool:
    from mlsys.runtime.device import has_cuda

    return has_cuda()


def _perf_mode(perf: str | None) -> str:
    if perf is not None:
        if perf not in ("off", "cuda", "fake"):
            raise ValueError(f"perf: expected 'off', 'cuda' or 'fake', got {perf!r}")
        return perf
    from mlsys.runtime.device import fake_timer, has_cuda

    if fake_timer():
        return "fake"

    return "cuda" if has_cuda() else "off"


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
class _Prepared:
    """What every grading of a run shares: the generated assignments (``base``) and the run settings."""

    base: Path
    run: _RunSettings
