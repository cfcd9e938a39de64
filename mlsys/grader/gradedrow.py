"""One graded (student, lab) row of the grade report: its fields, its one-line summary, its CSV (a spreadsheet
formula in a cell is written as text), and the ways a row is zeroed, failed, reset and finished.

Moved out of :mod:`mlsys.grader.teach` (issue 48, "a size it can keep"); ``teach`` re-exports its names.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CSV_FIELDS = [
    "student", "lab", "status", "correctness_score", "correctness_max", "performance_score", "performance_max",
    "performance", "manual_max", "manual_score", "total_score", "reason", "summary", "flags",
]


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


def _finish(row: Row) -> Row:
    row.summary = summarize(row)
    return row


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
