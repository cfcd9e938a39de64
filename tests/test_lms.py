"""Grades exported for Canvas and Gradescope, checked against the headers their documentation gives."""

import csv
import io

import pytest

from mlsys.grader import lms

FIELDS = ["student", "lab", "status", "correctness_score", "correctness_max", "performance_score", "performance_max",
          "performance", "manual_max", "total_score", "reason", "summary", "flags"]


def _grades(tmp_path, rows):
    path = tmp_path / "grades.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" for k in FIELDS} | r)
    return lms.read_grades(path)


ROWS = [
    {"student": "ada", "lab": "lab1_roofline", "status": "ok", "correctness_max": "11", "performance_max": "2",
     "manual_max": "2", "total_score": "11"},
    {"student": "bob", "lab": "lab1_roofline", "status": "failed", "correctness_max": "11", "performance_max": "2",
     "manual_max": "2", "total_score": "0", "reason": "malformed notebook"},
    {"student": "ada", "lab": "lab3_fusion", "status": "ok", "correctness_max": "9", "performance_max": "3",
     "manual_max": "2", "total_score": "12.5"},
]


def _table(text):
    return list(csv.reader(io.StringIO(text)))


def test_canvas_header_is_canvas_export_header(tmp_path):
    table = _table(lms.canvas(_grades(tmp_path, ROWS)))
    # Canvas's gradebook export/import: Student, ID, SIS User ID, SIS Login ID, Section, then assignments
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "lab1_roofline", "lab3_fusion"]
    assert table[1] == ["ada", "", "ada", "", "", "11", "12.5"]
    assert table[2] == ["bob", "", "bob", "", "", "", ""]  # a failed row is left empty, never turned into 0


def test_canvas_roster_and_existing_assignment_ids(tmp_path):
    roster = {"ada": {"student": "ada", "name": "Lovelace, Ada", "canvas_id": "4711", "sis_login_id": "al12",
                      "section": "A"}}
    table = _table(lms.canvas(_grades(tmp_path, ROWS), roster, {"lab1_roofline": "Lab 1 (12345)"}))
    assert table[0][5] == "Lab 1 (12345)"
    assert table[1][:5] == ["Lovelace, Ada", "4711", "", "al12", "A"]


def test_gradescope_columns_and_max_points(tmp_path):
    roster = {"ada": {"student": "ada", "name": "Ada Lovelace", "email": "ada@example.edu", "sis_user_id": "900"}}
    table = _table(lms.gradescope(_grades(tmp_path, ROWS), "lab1_roofline", roster))
    # Gradescope identifies students by Email (roster doc); its score files: Name, SID, Email, Total Score, Max Points
    assert table[0] == ["Name", "SID", "Email", "Total Score", "Max Points"]
    assert table[1] == ["Ada Lovelace", "900", "ada@example.edu", "11", "15"]  # 11 + 2 + 2 points in all
    assert table[2] == ["bob", "bob", "", "", "15"]


def test_unknown_lab_and_wrong_csv_say_what_was_expected(tmp_path):
    with pytest.raises(ValueError, match="no rows for lab 'lab9'"):
        lms.gradescope(_grades(tmp_path, ROWS), "lab9")
    bad = tmp_path / "other.csv"
    bad.write_text("name,score\nada,3\n")
    with pytest.raises(ValueError, match="expected the CSV `teach grade` writes"):
        lms.read_grades(bad)


def test_cli_writes_the_file(tmp_path):
    _grades(tmp_path, ROWS)
    out = tmp_path / "canvas.csv"
    assert lms.main(["canvas", "--grades", str(tmp_path / "grades.csv"), "--out", str(out)]) == 0
    assert out.read_text().splitlines()[0].startswith("Student,ID,SIS User ID,SIS Login ID,Section,")
