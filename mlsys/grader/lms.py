"""Grades where a school keeps them: ``labs/grades.csv`` in the upload formats of Canvas and Gradescope.

    python -m mlsys.grader.lms canvas     [--grades labs/grades.csv] [--roster roster.csv] [--out FILE]
    python -m mlsys.grader.lms gradescope LAB [--grades ...] [--roster ...] [--out FILE]

Canvas imports one CSV for the whole gradebook (Grades > Import). Its header is the one Canvas's own
export writes: ``Student, ID, SIS User ID, SIS Login ID, Section``, then one column per assignment; one of
Student, ID or SIS User ID identifies the student (Canvas Community guide "How do I import grades in the
Gradebook?", restated by Ohio State's "Import a CSV File to Carmen Grades",
https://teaching.resources.osu.edu/toolsets/carmencanvas/guides/calculating-final-grades/import-csv-file-carmen-grades).
A new column name creates a new assignment; ``Lab 1 (12345)`` updates the existing assignment 12345.

Gradescope identifies students by ``Email`` (required, unique) with ``Name`` (or ``First Name`` and
``Last Name``) and an optional ``SID`` (https://help.gradescope.com/article/w59nl02vyt-instructor-course-add-members,
"Prepping your roster file"); its per-assignment score files use ``Name, SID, Email, Total Score, Max Points``.
The export writes that file for one lab.

Student ids: ``labs/submitted/<student>/`` names a student by a folder name. A roster CSV
(``student,name,email,sis_user_id,canvas_id,sis_login_id,section``; only ``student`` is required) maps
it to the school's ids; without one the folder name is used as the SIS User ID (Canvas) and as the SID
(Gradescope), and Gradescope's Email is left empty (Gradescope then asks you to match rows by hand).

The exported score is the CSV's ``total_score`` (autograded plus, where a teacher entered them, written
points); a row that is not ``ok`` exports an empty cell (nothing is turned into a zero). Similarity flags
(``labs/similarity/*.csv``) are never exported: a flag is for the teacher, not a score.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

from mlsys.runtime.paths import labs_root

__all__ = ["CANVAS_ID_COLUMNS", "GRADESCOPE_COLUMNS", "read_grades", "read_roster", "canvas", "gradescope", "main"]

CANVAS_ID_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
GRADESCOPE_COLUMNS = ["Name", "SID", "Email", "Total Score", "Max Points"]


def read_grades(path: Path) -> list[dict[str, str]]:
    """The rows of a grades CSV (``teach grade``'s), checked for the columns an export needs."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    need = {"student", "lab", "status", "total_score", "correctness_max", "performance_max", "manual_max"}
    missing = need - set(rows[0]) if rows else set()
    if missing:
        raise ValueError(f"{path}: missing column(s) {sorted(missing)}; expected the CSV `teach grade` writes")
    return rows


def read_roster(path: Path | None) -> dict[str, dict[str, str]]:
    """``{student folder name: roster row}``; an empty mapping without a roster."""
    if path is None:
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if rows and "student" not in rows[0]:
        raise ValueError(f"{path}: a roster needs a 'student' column (the folder name under labs/submitted/)")
    return {r["student"]: r for r in rows}


def _score(row: dict[str, str]) -> str:
    return row["total_score"] if row["status"] == "ok" and row["total_score"] != "" else ""


def _max_points(rows: list[dict[str, str]]) -> float:
    """A lab's points: correctness + performance + written, as the CSV states them (the largest over its rows)."""
    def pts(r: dict[str, str]) -> float:
        return sum(float(r[k] or 0) for k in ("correctness_max", "performance_max", "manual_max"))
    return max((pts(r) for r in rows), default=0.0)


def _write(header: list[str], body: list[list[str]]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(header)
    w.writerows(body)
    return out.getvalue()


def canvas(grades: list[dict[str, str]], roster: dict[str, dict[str, str]] | None = None,
           assignment_names: dict[str, str] | None = None) -> str:
    """Canvas's gradebook import CSV: the five id columns, then one column per lab (named by
    ``assignment_names[lab]`` where given, e.g. ``"Lab 1 (12345)"``), one row per student."""
    roster = roster or {}
    names = assignment_names or {}
    labs = sorted({r["lab"] for r in grades})
    students = sorted({r["student"] for r in grades})
    score = {(r["student"], r["lab"]): _score(r) for r in grades}
    body = []
    for s in students:
        ro = roster.get(s, {})
        ids = [ro.get("name", s), ro.get("canvas_id", ""), ro.get("sis_user_id", "" if ro.get("canvas_id") else s),
               ro.get("sis_login_id", ""), ro.get("section", "")]
        body.append(ids + [score.get((s, lab), "") for lab in labs])
    return _write(CANVAS_ID_COLUMNS + [names.get(lab, lab) for lab in labs], body)


def gradescope(grades: list[dict[str, str]], lab: str, roster: dict[str, dict[str, str]] | None = None) -> str:
    """Gradescope's score CSV for one lab: ``Name, SID, Email, Total Score, Max Points``."""
    roster = roster or {}
    rows = [r for r in grades if r["lab"] == lab]
    if not rows:
        raise ValueError(f"no rows for lab {lab!r} in the grades (labs there: {sorted({r['lab'] for r in grades})})")
    top = f"{_max_points(rows):g}"
    body = []
    for r in sorted(rows, key=lambda r: r["student"]):
        ro = roster.get(r["student"], {})
        body.append([ro.get("name", r["student"]), ro.get("sis_user_id", r["student"]), ro.get("email", ""),
                     _score(r), top])
    return _write(GRADESCOPE_COLUMNS, body)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mlsys.grader.lms", description=__doc__.split("\n\n")[0])
    p.add_argument("format", choices=["canvas", "gradescope"])
    p.add_argument("lab", nargs="?", help="the lab to export (gradescope: one file per lab)")
    p.add_argument("--grades", type=Path, help="the grades CSV (default labs/grades.csv)")
    p.add_argument("--roster", type=Path, help="CSV mapping student folder names to school ids (see the module doc)")
    p.add_argument("--assignment", action="append", default=[], metavar="LAB=NAME",
                   help="Canvas column name for a lab, e.g. 'lab1_roofline=Lab 1 (12345)' (repeatable)")
    p.add_argument("--out", type=Path, help="where to write (default labs/<format>[_<lab>].csv)")
    a = p.parse_args(argv)
    grades_path = a.grades or labs_root() / "grades.csv"
    try:
        grades = read_grades(grades_path)
        roster = read_roster(a.roster)
        if a.format == "gradescope":
            if not a.lab:
                p.error("gradescope needs the lab to export, e.g. lab1_roofline")
            text = gradescope(grades, a.lab, roster)
        else:
            bad = [x for x in a.assignment if "=" not in x]
            if bad:
                p.error(f"--assignment expects LAB=NAME, got {bad}")
            text = canvas(grades, roster, dict(x.split("=", 1) for x in a.assignment))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = a.out or labs_root() / (f"{a.format}_{a.lab}.csv" if a.format == "gradescope" else "canvas.csv")
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({text.count(chr(10)) - 1} student row(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
