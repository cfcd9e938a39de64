"""nbgrader's own routes, as a teacher uses them beside ``make grade``: one gradebook, feedback that leaks
nothing, a CLI that refuses before it deletes, rows keyed by the grader.

Fast tests check the pieces on hand-built notebooks and rows. Slow tests drive nbgrader's CLI
(generate_assignment, autograde, generate_feedback, export) on the corpus' tiny lab, and formgrader in
Chromium on Lab 1 (the newcomer's sequence: teach grade; formgrader autograde, manual grade, generate
feedback; nbgrader export; teach grade again), each followed by the same three checks: no hidden test
in any feedback file, no file deleted, and the CSV agreeing with the gradebook.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlsys.grader import gradebook, sanitize, teach
from mlsys.grader.rowstore import RowStore, grader_digest

REPO = Path(__file__).resolve().parent.parent
LABS = REPO / "labs"
CORPUS = Path(__file__).resolve().parent / "bad_submissions"
TINY = json.loads((CORPUS / "source" / "lab0_tiny" / "lab0_tiny.nb.json").read_text())


def _cell(nb: dict, cell_id: str) -> dict:
    return next(c for c in nb["cells"] if c.get("id") == cell_id)


def _out(text: str) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": text}


def _err(ename: str, evalue: str) -> dict:
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}


def _graded_tiny() -> tuple[dict, dict]:
    """(instructor notebook, autograded notebook) of the tiny lab with a visible-only test cell put first.

    The learner's answer cells print what the tests gave them: what must never reach feedback."""
    source = copy.deepcopy(TINY)
    at = [c.get("id") for c in source["cells"]].index("test-double")
    visible = copy.deepcopy(source["cells"][at])
    visible.update(id="test-visible", source="assert double(0) == 0, 'double(0) should be 0'\n")
    visible["metadata"]["nbgrader"] = dict(visible["metadata"]["nbgrader"], grade_id="test_visible", points=1)
    source["cells"].insert(at, visible)
    graded = copy.deepcopy(source)
    _cell(graded, "setup")["outputs"] = [_out("numpy ready\n")]
    _cell(graded, "double")["outputs"] = [_out("defined double\n")]
    _cell(graded, "test-visible")["outputs"] = [_err("AssertionError", "double(0) should be 0")]
    _cell(graded, "test-double")["outputs"] = [_out("called with [1.5, -2.0, 1e30]\n"),
                                              _err("AssertionError", "double(x): expected [3.0, -4.0, 2e30]")]
    _cell(graded, "total")["outputs"] = [_out("the hidden test gave me [1.5, -2.0, 1e30]\n")]
    _cell(graded, "test-total")["outputs"] = [_out("total called with [0.5]*10\n")]
    _cell(graded, "perf-speed")["outputs"] = [_out("performance: not graded (no GPU)\n")]
    return source, graded


# ------------------------------------------------------------------ feedback returns nothing after the tests start


def test_feedback_returns_nothing_the_learners_code_saw_after_the_tests_started():
    source, graded = _graded_tiny()
    fb = sanitize.feedback_notebook(graded, source)
    # before the first test cell: the learner's own outputs, as they ran
    assert _cell(fb, "setup")["outputs"] == [_out("numpy ready\n")]
    assert _cell(fb, "double")["outputs"] == [_out("defined double\n")]
    # a test cell without hidden tests, before any hidden test ran: its own one-line message
    [visible] = _cell(fb, "test-visible")["outputs"]
    assert visible["evalue"] == "AssertionError: double(0) should be 0"
    # a cell with hidden tests that failed: a generic failure, nothing it printed
    assert _cell(fb, "test-double")["outputs"] == [sanitize._failure(sanitize.HIDDEN_FAILED)]
    # an answer cell after the tests started: replaced, whatever it printed
    assert _cell(fb, "total")["outputs"] == [_out(sanitize.AFTER_TESTS)]
    # a passing test cell shows nothing; the trusted process's performance verdict stays
    assert _cell(fb, "test-total")["outputs"] == []
    assert _cell(fb, "perf-speed")["outputs"] == [_out("performance: not graded (no GPU)\n")]
    text = json.dumps(fb)
    for secret in ("1e30", "2e30", "[0.5]*10", "BEGIN HIDDEN TESTS", "assert_no_library_calls"):
        assert secret not in text, secret


def test_a_visible_test_after_a_hidden_one_reports_a_generic_failure():
    """The learner's code may keep what a hidden test passed it and put it in a later visible test's message."""
    source, graded = _graded_tiny()
    _cell(graded, "test-total")["outputs"] = [_err("AssertionError", "I kept [1.5, -2.0, 1e30]")]
    fb = sanitize.feedback_notebook(graded, source)
    assert _cell(fb, "test-total")["outputs"] == [sanitize._failure(sanitize.HIDDEN_FAILED)]


def test_a_demonstration_after_the_tests_shows_the_graders_note_and_a_learners_claim_to_one_is_ignored():
    """A demonstration the grader left out (named by the instructor notebook) shows the grader's note, whatever the
    graded copy holds; the learner's answer cell that calls itself one still shows only the after-tests note."""
    from mlsys.runtime.notebook import DEMO_NOTE

    source, graded = _graded_tiny()
    demo = {"cell_type": "code", "id": "bench", "execution_count": None, "source": "plot()",
            "metadata": {"nbgrader": {"grade_id": "bench", "locked": True, "grade": False, "solution": False},
                         "mlsys": {"demo": True}}}
    source["cells"].append(copy.deepcopy(demo))
    demo["outputs"] = [_out("1e30 smuggled\n")]
    graded["cells"].append(demo)
    _cell(graded, "total").setdefault("metadata", {})["mlsys"] = {"demo": True}  # the submission's claim
    fb = sanitize.feedback_notebook(graded, source)
    assert _cell(fb, "bench")["outputs"] == [_out(DEMO_NOTE)]
    assert _cell(fb, "total")["outputs"] == [_out(sanitize.AFTER_TESTS)]
    assert "smuggled" not in json.dumps(fb)


def test_leaks_finds_hidden_tests_in_a_page_as_nbgrader_writes_it():
    source = TINY
    assert sanitize.leaks("<span>### BEGIN HIDDEN TESTS</span>", source) == ["### BEGIN HIDDEN TESTS"]
    line = 'assert_no_library_calls(total, {"numpy.*", "math.fsum"})'
    assert sanitize.leaks(f"<pre>{line.replace(chr(34), '&quot;')}</pre>", source) == [line]
    assert sanitize.leaks("<pre>assert total([1, 2, 3]) == 6</pre>", source) == []  # a visible line


def test_feedback_without_the_instructor_notebook_is_refused(tmp_path):
    from mlsys.grader.nbgrader_hooks import instructor_notebook

    with pytest.raises(FileNotFoundError, match="cannot tell which lines are hidden tests"):
        instructor_notebook(tmp_path, "lab0_tiny", "lab0_tiny")


def test_a_folder_nbgrader_removed_is_put_back_only_when_the_run_did_not_write_it_again(tmp_path):
    import logging

    from mlsys.grader.nbgrader_hooks import _restore

    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "lab.ipynb").write_text("graded by make grade")
    (saved / "old.txt").write_text("a file the new release no longer has")
    dest = tmp_path / "dest"
    log = logging.getLogger("test")
    _restore({dest: saved}, log, failed=True)  # removed by nbgrader's failure handler: put back whole
    assert (dest / "lab.ipynb").read_text() == "graded by make grade"
    (dest / "lab.ipynb").write_text("graded again")
    (dest / "old.txt").unlink()
    _restore({dest: saved}, log, failed=False)  # a run that succeeded keeps its output, whatever it left out
    assert (dest / "lab.ipynb").read_text() == "graded again" and not (dest / "old.txt").exists()
    (dest / "lab.ipynb").unlink()
    _restore({dest: saved}, log, failed=True)  # a failed run that removed the notebook: put back
    assert (dest / "lab.ipynb").read_text() == "graded by make grade"


# ------------------------------------------------------------------ one gradebook: teacher's scores into the CSV


def _row(**kw) -> teach.Row:
    row = teach.Row("ann", "lab1_roofline", correctness_score=9.0, correctness_max=11.0, performance="none",
                    manual_max=2.0, total_score=9.0)
    for k, v in kw.items():
        setattr(row, k, v)
    return row


def test_written_answers_graded_in_formgrader_reach_the_row():
    row = _row()
    cells = [gradebook.CellScore("test_a", 9.0, None, 11.0, False),
             gradebook.CellScore("written_a", None, 1.5, 1.0 + 1.0, True)]
    teach._take_teacher_scores(row, cells)
    assert (row.manual_score, row.total_score) == (1.5, 10.5)
    assert row.summary == "9 / 11 autograded; written answers 1.5 / 2"


def test_a_teachers_override_of_an_autograded_cell_counts_and_pending_answers_are_named():
    row = _row()
    cells = [gradebook.CellScore("test_a", 4.0, 6.0, 6.0, False), gradebook.CellScore("test_b", 5.0, None, 5.0, False),
             gradebook.CellScore("written_a", None, 1.0, 1.0, True), gradebook.CellScore("written_b", None, None, 1.0, True)]
    teach._take_teacher_scores(row, cells)
    # 9 autograded, test_a raised from 4 to 6 by the teacher: 11; one written answer of 1 point graded, one pending
    assert (row.correctness_score, row.manual_score, row.total_score) == (11.0, 1.0, 12.0)
    assert row.summary.endswith("written answers 1 / 2 graded so far (1 points pending)")


def test_nbgrader_exports_csv_at_the_report_path_is_replaced_not_read_as_rows(tmp_path):
    path = tmp_path / "grades.csv"
    path.write_text("assignment,duedate,timestamp,student_id,raw_score,score,max_score\n"
                    "lab2_tiled_matmul,,,ann,10,10,14\n")
    teach.write_csv([_row()], path, keep_other_labs=True)
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["student"], r["lab"]) for r in rows] == [("ann", "lab1_roofline")]


def test_nbgrader_export_is_configured_away_from_the_report():
    text = (LABS / "nbgrader_config.py").read_text()
    assert 'c.CsvExportPlugin.to = "nbgrader_grades.csv"' in text
    assert "c.GenerateFeedback.preprocessors = [GetGrades, _Feedback, CSSHTMLHeaderPreprocessor]" in text


# ------------------------------------------------------------------ rows keyed by the grader (48 item 7)


def test_grader_digest_changes_with_the_configuration_and_the_device(tmp_path, monkeypatch):
    from mlsys.grader import rowstore

    config = tmp_path / "nbgrader_config.py"
    config.write_text(LABS.joinpath("nbgrader_config.py").read_text())
    first = grader_digest(config)
    assert grader_digest(config) == first  # the same grader, the same digest
    config.write_text(config.read_text() + "\nc.Execute.timeout = 60\n")
    assert grader_digest(config) != first
    second = grader_digest(config)
    monkeypatch.setattr(rowstore, "_device", lambda: "GPU 0: NVIDIA H200 (UUID: GPU-1)")
    assert grader_digest(config) != second


def _tiny_with_row(tmp_path: Path) -> tuple[Path, dict, teach.Submission]:
    """A tiny course with ann's submission graded: its stored row, graded notebook and clean feedback page."""
    root = tmp_path / "course"
    (root / "source" / "lab0_tiny").mkdir(parents=True)
    shutil.copy2(LABS / "nbgrader_config.py", root / "nbgrader_config.py")
    (root / "source" / "lab0_tiny" / "lab0_tiny.ipynb").write_text(json.dumps(TINY))
    sub_dir = root / "submitted" / "ann" / "lab0_tiny"
    sub_dir.mkdir(parents=True)
    (sub_dir / "lab0_tiny.ipynb").write_text(json.dumps(TINY))
    settings = teach._settings_key(perf="off", use_sandbox=True, timeout=60, cell_timeout=None, feedback=True,
                                   root=root)
    [sub] = teach.plan(root, settings=settings).todo
    RowStore(root).put("ann", "lab0_tiny", sub.key, {"student": "ann", "lab": "lab0_tiny", "status": "ok"},
                       grader=settings["grader"])
    for folder, name in (("autograded", "lab0_tiny.ipynb"), ("feedback", "lab0_tiny.html")):
        (root / folder / "ann" / "lab0_tiny").mkdir(parents=True)
        (root / folder / "ann" / "lab0_tiny" / name).write_text("<html>3 / 3 autograded</html>")
    return root, settings, sub


def test_a_row_is_kept_only_while_its_grader_and_its_returned_files_are_the_same(tmp_path):
    root, settings, _ = _tiny_with_row(tmp_path)
    plan = teach.plan(root, settings=settings)
    assert [s.student for s in plan.done] == ["ann"] and not plan.todo
    other = dict(settings, grader="0" * 64)  # a patched grader, a new library, another GPU
    plan = teach.plan(root, settings=other)
    assert [s.student for s in plan.todo] == ["ann"]
    assert plan.again == {"graded by another grader (its code, configuration, libraries or device changed)": 1}


def test_a_leaky_or_deleted_returned_file_is_graded_again_never_kept(tmp_path):
    root, settings, _ = _tiny_with_row(tmp_path)
    page = root / "feedback" / "ann" / "lab0_tiny" / "lab0_tiny.html"
    page.write_text("<pre>### BEGIN HIDDEN TESTS\nassert total([0.5] * 10) == 5.0</pre>")  # nbgrader's own page
    plan = teach.plan(root, settings=settings)
    assert [s.student for s in plan.todo] == ["ann"] and "showed hidden tests" in next(iter(plan.again))
    page.write_text("<html>clean</html>")
    (root / "autograded" / "ann" / "lab0_tiny" / "lab0_tiny.ipynb").unlink()  # formgrader's failed Autograde
    plan = teach.plan(root, settings=settings)
    assert [s.student for s in plan.todo] == ["ann"] and "graded notebook was missing" in next(iter(plan.again))


def test_a_slurm_task_grades_every_submission_of_its_run_even_with_an_older_row(tmp_path):
    """`--slurm --regrade`: a row stored before the run's manifest does not make a task skip its submission;
    one stored by an earlier attempt of the same run does."""
    root, settings, sub = _tiny_with_row(tmp_path)
    store = RowStore(root)
    manifest = {"written_at": time.time() + 1}
    assert not teach._stored_in_run(store, sub, manifest)
    store.put(sub.student, sub.lab, sub.key, {"status": "ok"})
    assert teach._stored_in_run(store, sub, {"written_at": time.time() - 1})
    other = teach.Submission(sub.student, sub.lab, sub.notebook, sub.folder, "another key")
    assert not teach._stored_in_run(store, other, {"written_at": 0})


# ------------------------------------------------------------------ smaller: clear errors


def test_a_misspelled_lab_exits_non_zero_naming_the_labs(capsys):
    for argv in (["check-release", "lab1_rooflne"], ["release", "lab9_missing"]):
        assert teach.main(argv) == 2
        err = capsys.readouterr().err
        assert "unknown lab 'lab" in err and "lab1_roofline" in err and "lab2_tiled_matmul" in err, err


def test_grading_a_misspelled_lab_or_a_missing_folder_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="unknown lab 'lab9_missing'; the labs are lab1_roofline"):
        teach.grade(LABS, labs=["lab9_missing"], use_sandbox=False, verbose=False)
    with pytest.raises(ValueError, match="no such folder"):
        teach.grade(LABS, submitted=tmp_path / "nowhere", use_sandbox=False, verbose=False)


def test_a_failed_autograde_says_which_exception_not_see_the_traceback():
    log = ("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
           "nbformat.validator.NotebookValidationError: the notebook has no cells\n"
           "[AutogradeApp | ERROR] Please see the the above traceback for details on the specific errors\n")
    why = teach._reason(1, log, 60)
    assert "NotebookValidationError: the notebook has no cells" in why and "above traceback" not in why


def test_an_empty_notebook_says_why_it_was_not_graded(tmp_path):
    path = tmp_path / "lab1_roofline.ipynb"
    path.write_text(json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    why = teach._validate_submission(path)
    assert why is not None and why.startswith("empty notebook: it has no cells") and "traceback" not in why


def test_a_release_whose_source_is_missing_is_reported(tmp_path):
    root = tmp_path / "course"
    (root / "source").mkdir(parents=True)
    (root / "release" / "lab5_attention").mkdir(parents=True)
    with pytest.raises(ValueError, match="no lab found"):
        teach.check_release(root=root)


# ------------------------------------------------------------------ nbgrader's CLI, as a teacher types it

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _sandbox_or_skip() -> None:
    from mlsys.grader import sandbox

    try:
        sandbox.check()
    except sandbox.SandboxUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI must grade in the sandbox: {exc}")
        pytest.skip(f"bubblewrap cannot run here: {exc}")


def _tiny_course(tmp: Path) -> Path:
    root = tmp / "course"
    (root / "source" / "lab0_tiny").mkdir(parents=True)
    shutil.copy2(LABS / "nbgrader_config.py", root / "nbgrader_config.py")
    (root / "source" / "lab0_tiny" / "lab0_tiny.ipynb").write_text(json.dumps(TINY))
    shutil.copy2(CORPUS / "source" / "lab0_tiny" / "perf.toml", root / "source" / "lab0_tiny" / "perf.toml")
    return root


def _submit(root: Path, student: str, nb: dict) -> None:
    folder = root / "submitted" / student / "lab0_tiny"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lab0_tiny.ipynb").write_text(json.dumps(nb))


def _nbgrader(root: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess:
    """``nbgrader ARGS`` from the course folder, as a teacher runs it: the venv's nbgrader, with ``path`` as PATH
    (default: the venv's bin first, as an activated venv)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLSYS_SANDBOX")}
    env["PYTHONPATH"] = str(REPO)
    env["PATH"] = path if path is not None else os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)


def _files(root: Path) -> dict[str, bytes]:
    """Every file a teacher keeps in the course folder (not the grader's run folders or the gradebook)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and ".grading" not in p.parts and p.name != "gradebook.db"}


def _no_leak(root: Path, source: dict) -> None:
    pages = list((root / "feedback").rglob("*.html"))
    assert pages
    for page in pages:
        assert sanitize.leaks(page.read_text(encoding="utf-8"), source) == [], page


@pytest.mark.slow
def test_nbgrader_cli_refuses_before_it_deletes(tmp_path):
    """generate_assignment --force without the venv on PATH works; a failing generate_assignment and a refused
    autograde --force (no bubblewrap) leave the release and the graded notebook as they were."""
    root = _tiny_course(tmp_path)
    proc = _nbgrader(root, "generate_assignment", "lab0_tiny", "--force", path="/usr/bin:/bin")
    assert proc.returncode == 0, proc.stderr[-3000:]
    release = root / "release" / "lab0_tiny" / "lab0_tiny.ipynb"
    released = release.read_bytes()
    broken = copy.deepcopy(TINY)  # two cells with one grade id: nbgrader stops after removing the release
    _cell(broken, "test-total")["metadata"]["nbgrader"]["grade_id"] = "test_double"
    (root / "source" / "lab0_tiny" / "lab0_tiny.ipynb").write_text(json.dumps(broken))
    proc = _nbgrader(root, "generate_assignment", "lab0_tiny", "--force", path="/usr/bin:/bin")
    assert proc.returncode != 0 and "Removing existing assignment" in proc.stderr, proc.stderr[-3000:]
    assert release.read_bytes() == released and "restored it as it was" in proc.stderr
    (root / "source" / "lab0_tiny" / "lab0_tiny.ipynb").write_text(json.dumps(TINY))
    _submit(root, "mallory", TINY)
    graded = root / "autograded" / "mallory" / "lab0_tiny" / "lab0_tiny.ipynb"
    graded.parent.mkdir(parents=True)
    graded.write_text('{"graded": "by make grade"}')
    proc = _nbgrader(root, "autograde", "lab0_tiny", "--student", "mallory", "--create", "--force",
                     path=str(Path(sys.executable).parent))  # no bwrap on PATH: refused
    assert proc.returncode != 0 and "refusing to run student code outside" in proc.stderr, proc.stderr[-3000:]
    assert graded.read_text() == '{"graded": "by make grade"}'


@pytest.mark.slow
def test_a_first_run_seeds_the_course_gradebook_and_never_replaces_one(tmp_path):
    """A course without a gradebook gets the scratch course's (its labs generated, nobody graded yet) instead of a
    second generate_assignment; a gradebook that exists is left as it is, and no temporary file stays behind."""
    from mlsys.grader.nbgraderrun import seed_gradebook

    scratch, root = tmp_path / "scratch", tmp_path / "course"
    scratch.mkdir()
    root.mkdir()
    assert not seed_gradebook(root, scratch)  # nothing generated: nothing to seed
    (scratch / "gradebook.db").write_bytes(b"generated labs")
    assert seed_gradebook(root, scratch)
    assert (root / "gradebook.db").read_bytes() == b"generated labs"
    (root / "gradebook.db").write_bytes(b"formgrader scores")
    assert not seed_gradebook(root, scratch)
    assert (root / "gradebook.db").read_bytes() == b"formgrader scores"
    assert sorted(p.name for p in root.iterdir()) == ["gradebook.db"]


def test_nbgrader_feedback_and_export_after_teach_grade_leak_nothing_and_agree(tmp_path):
    """teach grade; nbgrader generate_feedback --force; nbgrader export; teach grade again: no hidden test in any
    feedback page (one learner prints what the hidden tests passed it), no file deleted, the two CSVs agree."""
    _sandbox_or_skip()
    root = _tiny_course(tmp_path)
    _submit(root, "ann", json.loads((CORPUS / "good.nb.json").read_text()))
    spy = json.loads((CORPUS / "good.nb.json").read_text())
    at = [c.get("id") for c in spy["cells"]].index("double")
    spy["cells"][at]["source"] = ("SEEN = []\n\ndef double(x):\n    SEEN.append(repr(x))\n    print('double got', x)\n"
                                  "    return 2 * x\n")
    spy["cells"].insert(at + 2, {"cell_type": "code", "id": "spy", "metadata": {}, "outputs": [],
                                 "execution_count": None, "source": "print('SPY', SEEN)"})
    _submit(root, "spy", spy)
    teach.grade(root, timeout=300, perf="off", verbose=False)
    assert (root / "gradebook.db").is_file()
    proc = _nbgrader(root, "generate_feedback", "lab0_tiny", "--force")
    assert proc.returncode == 0, proc.stderr[-3000:]
    _no_leak(root, TINY)
    page = (root / "feedback" / "spy" / "lab0_tiny" / "lab0_tiny.html").read_text()
    # what the spy's cells printed (its source, shown highlighted, has the words but not these outputs)
    graded = (root / "autograded" / "spy" / "lab0_tiny" / "lab0_tiny.ipynb").read_text()
    assert "e+30" in graded  # the spy did see the hidden test's input: the teacher's copy shows it
    for printed in ("e+30", "1e30", "SPY [", "double got 3", "double got [", "double got 1"):
        assert printed not in page, printed
    assert sanitize.AFTER_TESTS.strip() in page
    assert _nbgrader(root, "export").returncode == 0
    with open(root / "nbgrader_grades.csv", newline="") as fh:
        exported = {r["student_id"]: float(r["score"]) for r in csv.DictReader(fh)}
    with open(root / "grades.csv", newline="") as fh:
        ours = {r["student"]: float(r["total_score"]) for r in csv.DictReader(fh)}
    assert exported == ours == {"ann": 3.0, "spy": 3.0}
    before = _files(root)
    teach.grade(root, timeout=300, perf="off", verbose=False)
    after = _files(root)
    assert set(before) <= set(after), set(before) - set(after)
    with open(root / "grades.csv", newline="") as fh:
        assert {r["student"]: float(r["total_score"]) for r in csv.DictReader(fh)} == ours


# ------------------------------------------------------------------ formgrader in Chromium: the newcomer's sequence

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


def _chromium_or_skip():
    chromium = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if chromium is None or sync_playwright is None:
        why = "no Chromium (apt-get install chromium)" if chromium is None else "playwright is not installed"
        if IN_CI:
            pytest.fail(f"CI drives formgrader in Chromium: {why}")
        pytest.skip(why)
    return chromium, sync_playwright


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_formgrader(root: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """A Jupyter server with nbgrader's formgrader, started in the course folder as a teacher does (no token)."""
    import urllib.request

    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLSYS_SANDBOX")}
    env.update(PYTHONPATH=str(REPO), PATH=os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]]),
               JUPYTER_CONFIG_DIR=str(root.parent / "jupyter-config"), HOME=str(root.parent))
    proc = subprocess.Popen([sys.executable, "-m", "jupyter", "server", "--no-browser", f"--port={port}",
                             "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=", "--ServerApp.password=",
                             "--allow-root", f"--ServerApp.root_dir={root}"],
                            cwd=root, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/api/status", timeout=5)
            return proc, url
        except OSError:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
    proc.kill()
    raise AssertionError(f"the Jupyter server did not start: {log.read_text()[-3000:]}")


def _button(page, url: str, student: str, column: str, done: str) -> None:
    """Press formgrader's ``column`` button (autograde, generate-feedback) of ``student`` and wait for ``done``."""
    page.goto(url)
    row = page.locator("tr", has=page.locator("td.student-id", has_text=student))
    row.locator(f"td.{column} a").click()
    page.get_by_text(done).wait_for(timeout=300_000)
    page.keyboard.press("Escape")


def _csv_scores(path: Path, student: str, score: str) -> dict[str, float]:
    with open(path, newline="") as fh:
        return {r[student]: float(r[score]) for r in csv.DictReader(fh)}


@pytest.mark.slow
def test_the_newcomers_sequence_with_formgrader_in_chromium(tmp_path):
    """make release; teach grade (two students of Lab 1); formgrader's Autograde button, a written answer graded
    by hand, Generate Feedback; nbgrader export; teach grade again. No hidden test in any feedback page, no file
    deleted, and grades.csv agrees with nbgrader's export, the hand-graded points included."""
    _sandbox_or_skip()
    chromium, sync_playwright = _chromium_or_skip()
    lab = "lab1_roofline"
    root = tmp_path / "course"
    shutil.copytree(LABS / "source" / lab, root / "source" / lab)
    shutil.copy2(LABS / "nbgrader_config.py", root / "nbgrader_config.py")
    teach.release([lab], root=root)  # `make release`: also registers the lab in root/gradebook.db
    assert gradebook.has_assignment(root, lab)
    source = json.loads((root / "source" / lab / f"{lab}.ipynb").read_text())
    for student, nb in (("ada", root / "source" / lab / f"{lab}.ipynb"), ("bea", root / "release" / lab / f"{lab}.ipynb")):
        (root / "submitted" / student / lab).mkdir(parents=True)
        shutil.copy2(nb, root / "submitted" / student / lab / f"{lab}.ipynb")
    rows = {r.student: r for r in teach.grade(root, labs=[lab], timeout=600, perf="off", jobs=2, verbose=False)}
    assert rows["ada"].correctness_score == rows["ada"].correctness_max == 11 and rows["ada"].manual_max == 2, rows
    _readme_example_is(root / "grades.csv")
    before = _files(root)
    server, url = _start_formgrader(root, tmp_path / "jupyter.log")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
            page = browser.new_page()
            manage = f"{url}/formgrader/manage_submissions/{lab}"
            _button(page, manage, "bea", "autograde", f"Successfully autograded '{lab}' for student 'bea'")
            with gradebook_for(root) as gb:
                nb_id = gb.find_submission_notebook(lab, lab, "ada").id
            page.goto(f"{url}/formgrader/submissions/{nb_id}/?index=0")
            page.wait_for_load_state("networkidle", timeout=120_000)  # its scripts bind the score inputs on load
            score = page.locator("input.score#explain_gaps")
            score.wait_for(timeout=120_000)
            score.fill("1.5")
            score.press("Tab")  # formgrader saves a score when its input changes
            _wait_for_manual_score(root, lab, "ada", "explain_gaps", 1.5)
            for student in ("ada", "bea"):
                _button(page, manage, student, "generate-feedback",
                        f"Successfully generated feedback for '{lab}' for student '{student}'")
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    # formgrader's Autograde wrote bea's graded notebook: the teacher's copy, sanitised as make grade's is
    bea = json.loads((root / "autograded" / "bea" / lab / f"{lab}.ipynb").read_text())
    assert "BEGIN HIDDEN TESTS" not in json.dumps(bea)
    assert {k for c in bea["cells"] for o in c.get("outputs", []) for k in o.get("data", {})} <= set(sanitize.INERT_MIME)
    proc = _nbgrader(root, "export")
    assert proc.returncode == 0, proc.stderr[-3000:]
    teach.grade(root, labs=[lab], timeout=600, perf="off", jobs=2, verbose=False)
    after = _files(root)
    assert set(before) <= set(after), sorted(set(before) - set(after))
    _no_leak(root, source)
    ours = _csv_scores(root / "grades.csv", "student", "total_score")
    assert ours == _csv_scores(root / "nbgrader_grades.csv", "student_id", "score") == {"ada": 12.5, "bea": 0.0}
    with open(root / "grades.csv", newline="") as fh:
        ada = next(r for r in csv.DictReader(fh) if r["student"] == "ada")
    assert ada["manual_score"] == "1.5" and "written answers 1.5 / 2" in ada["summary"], ada


def gradebook_for(root: Path):
    from nbgrader.api import Gradebook

    return Gradebook(gradebook.db_url(root))


def _readme_example_is(report: Path) -> None:
    """The README's worked example (the instructor notebook handed in as ``ada``) shows this run's header and row."""
    block = (REPO / "README.md").read_text(encoding="utf-8").split("cat labs/grades.csv\n", 1)[1].split("```", 1)[0]
    shown = [ln[2:] for ln in block.splitlines() if ln.startswith(("# student,", "# ada,"))]
    lines = report.read_text(encoding="utf-8").splitlines()
    assert shown == [lines[0], next(ln for ln in lines if ln.startswith("ada,"))], (shown, lines)


@pytest.mark.slow
def test_check_release_says_what_it_checked_and_names_a_release_without_its_source(tmp_path, monkeypatch, capsys):
    root = _tiny_course(tmp_path)
    teach.release(root=root)
    monkeypatch.setattr(teach, "labs_root", lambda: root)
    assert teach.main(["check-release"]) == 0
    assert "check-release: 1 lab(s) checked (lab0_tiny)" in capsys.readouterr().out
    stray = root / "release" / "lab5_attention"
    stray.mkdir()
    (stray / "lab5_attention.ipynb").write_text("{}")
    assert teach.main(["check-release"]) == 1
    err = capsys.readouterr().err
    assert f"{stray} has no instructor version" in err and "source is missing" in err, err


def _wait_for_manual_score(root: Path, lab: str, student: str, grade_id: str, score: float) -> None:
    """Wait until formgrader has saved ``score`` for the cell in the gradebook (its save is asynchronous; on the
    loaded 2-core CI machine, with three test workers grading, 60 s was once not enough)."""
    deadline, found = time.monotonic() + 240, None
    while time.monotonic() < deadline:
        with gradebook_for(root) as gb:
            found = gb.find_grade(grade_id, lab, lab, student).manual_score
        if found == score:
            return
        time.sleep(0.5)
    raise AssertionError(f"formgrader did not save {student}'s {grade_id} score {score} (gradebook: {found})")
