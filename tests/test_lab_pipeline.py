"""The labs pipeline: releases are fresh and leak nothing; grading survives hostile submissions.

Parametrised over every lab found in labs/source (labs still being written are picked up when
their instructor notebook exists). Slow tests run nbgrader for real; they are marked ``slow``
and run in ``make test``.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_lab_validate import LABS as _validated_labs

from mlsys.grader import teach
from mlsys.runtime.notebook import DEMO_NOTE, demo_ids
from mlsys.runtime.processes import live_processes_with

REPO = Path(__file__).resolve().parent.parent
LABS = REPO / "labs"
CORPUS = Path(__file__).resolve().parent / "bad_submissions"
LAB_NAMES = teach.lab_names(LABS)
VALIDATED = set(_validated_labs)
COLAB = "https://colab.research.google.com/github/gpus-for-ml/gpus-for-ml/blob/main/labs/release/{lab}/{lab}.ipynb"

assert LAB_NAMES, f"no lab in {LABS / 'source'}: a missing notebook is a failure, never a skip"


def _nb(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _src(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def _course(tmp: Path, source: Path, labs: list[str]) -> Path:
    """A scratch nbgrader course root holding the real config and the given labs' sources."""
    root = tmp / "course"
    (root / "source").mkdir(parents=True)
    shutil.copy2(LABS / "nbgrader_config.py", root / "nbgrader_config.py")
    for lab in labs:
        shutil.copytree(source / lab, root / "source" / lab)
    return root


def _tiny_course(tmp: Path) -> Path:
    """A course with the corpus' tiny lab (stored as .nb.json so linters skip the corpus)."""
    root = _course(tmp, LABS / "source", [])
    (root / "source" / "lab0_tiny").mkdir()
    shutil.copy2(CORPUS / "source" / "lab0_tiny" / "lab0_tiny.nb.json", root / "source" / "lab0_tiny" / "lab0_tiny.ipynb")
    shutil.copy2(CORPUS / "source" / "lab0_tiny" / "perf.toml", root / "source" / "lab0_tiny" / "perf.toml")
    return root


def _tree_hashes(*folders: Path) -> dict[Path, bytes]:
    """Every file below ``folders`` with its content (what grading must leave as it was)."""
    out = {}
    for folder in folders:
        for p in sorted(folder.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                out[p] = p.read_bytes()
    return out




def _sandbox_or_skip() -> None:
    from mlsys.grader import sandbox

    try:
        sandbox.check()
    except sandbox.SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap cannot run here: {exc}")


def _release(lab: str) -> Path:
    """The committed release of ``lab``; a missing one fails (run ``make release``)."""
    path = LABS / "release" / lab / f"{lab}.ipynb"
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `make release`")
    return path


RELEASED = [lab for lab in LAB_NAMES if (LABS / "release" / lab / f"{lab}.ipynb").is_file()]


def _submit(root: Path, student: str, lab: str, notebook: Path) -> Path:
    dest = root / "submitted" / student / lab / f"{lab}.ipynb"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(notebook, dest)
    return dest


# ------------------------------------------------------------------ what learners get


def _leaks(source: dict, release: dict) -> list[str]:
    """Lines of solution or hidden-test regions of ``source`` that appear as whole lines in ``release``.

    Lines that also occur outside every region of the source (e.g. `return out`), short lines and
    comments are not counted as secret.
    """
    region = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)(.*?)### END \1", re.S)
    public, secret = set(), set()
    for cell in source["cells"]:
        text = _src(cell)
        public.update(ln.strip() for ln in region.sub("", text).splitlines())
        secret.update(ln.strip() for m in region.finditer(text) for ln in m.group(2).splitlines())
    secret = {ln for ln in secret - public if len(ln) > 12 and not ln.startswith("#")}
    assert secret, "expected the instructor notebook to contain solutions"
    release_lines = {ln.strip() for c in release["cells"] for ln in _src(c).splitlines()}
    release_lines |= {ln.strip() for c in release["cells"] for o in c.get("outputs", [])
                      for ln in "".join(o.get("text", "")).splitlines()}
    return sorted(secret & release_lines)


def test_leak_check_finds_a_leaked_solution_line():
    source = {"cells": [{"cell_type": "code", "source": "def f(x):\n    ### BEGIN SOLUTION\n"
                         "    return secret_formula(x) * 2\n    ### END SOLUTION\n"}]}
    release = {"cells": [{"cell_type": "code", "source": "def f(x):\n    return secret_formula(x) * 2\n"}]}
    assert _leaks(source, release) == ["return secret_formula(x) * 2"]
    release["cells"][0]["source"] = "def f(x):\n    raise NotImplementedError()\n"
    assert _leaks(source, release) == []


@pytest.mark.parametrize("lab", LAB_NAMES)
def test_release_leaks_no_solution_and_no_hidden_test(lab):
    """Every line inside a solution or hidden-test region is absent from the release."""
    release_path = _release(lab)
    leaked = _leaks(_nb(LABS / "source" / lab / f"{lab}.ipynb"), _nb(release_path))
    assert not leaked, f"solution or hidden-test lines found in {release_path}: {leaked[:5]}"
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in release_path.read_text(encoding="utf-8")


@pytest.mark.parametrize("lab", LAB_NAMES)
def test_release_cells_that_raise_are_tagged_and_say_what_to_do(lab):
    release = _nb(_release(lab))
    stubs = [c for c in release["cells"] if c["cell_type"] == "code" and "raise NotImplementedError" in _src(c)]
    assert stubs, "expected at least one unanswered solution cell"
    for cell in stubs:
        assert "YOUR CODE HERE" in _src(cell)
        # a stub at the top level raises when the cell runs (a stub inside a def raises only when called)
        if re.search(r"^raise NotImplementedError", _src(cell), re.M):
            assert "raises-exception" in cell["metadata"].get("tags", []), (
                f"cell {cell.get('id')} raises when run but is not tagged raises-exception")


@pytest.mark.parametrize("lab", LAB_NAMES)
def test_top_cell_opens_the_release_in_colab_and_first_code_cell_installs(lab):
    for kind, path in (("source", LABS / "source" / lab / f"{lab}.ipynb"), ("release", _release(lab))):
        cells = _nb(path)["cells"]
        assert cells[0]["cell_type"] == "markdown" and COLAB.format(lab=lab) in _src(cells[0]), (
            f"{kind}/{lab}: expected an 'Open in Colab' link to {COLAB.format(lab=lab)} in the first cell")
        first_code = next(c for c in cells if c["cell_type"] == "code")
        code = _src(first_code)
        assert "google.colab" in code and "pip" in code and "mlsys.labkit.device.setup()" in code, (
            f"{kind}/{lab}: the first code cell must install the course package in Colab and call mlsys.labkit.device.setup()")


@pytest.mark.parametrize("lab", LAB_NAMES)
def test_grade_ids_follow_the_convention(lab):
    cells = _nb(LABS / "source" / lab / f"{lab}.ipynb")["cells"]
    graded = [c["metadata"]["nbgrader"] for c in cells if c["metadata"].get("nbgrader", {}).get("grade")]
    auto = [m for m in graded if not m.get("solution")]
    assert auto, "expected autograded test cells"
    for m in auto:
        assert m["grade_id"].startswith(("test_", "perf_")), f"grade id {m['grade_id']!r}: expected test_* or perf_*"
        assert m["points"] > 0


@pytest.mark.slow
def test_committed_releases_are_what_make_release_generates():
    problems = teach.check_release(root=LABS)
    assert not problems, "\n".join(problems) + "\nrun `make release`"


# ------------------------------------------------------------------ grading real labs


@pytest.mark.slow
@pytest.mark.parametrize("lab,short", [("lab1_roofline", "lab1"), ("lab2_tiled_matmul", "lab2"), ("lab3_fusion", "lab3")])
def test_attacks_on_grader_side_test_cells_earn_nothing(lab, short, graded_lab):
    """tests/bad_submissions/<short>/ (make_grader_side.py): a blank release plus an input transformer, hooks, rebound
    globals, patched course helpers or a result that claims to be a tensor (each 0); the instructor's answers with
    library routines reached where no source check looks (the points of those exercises lost). ``message``: a
    piece of the test outputs that says why; ``flags``: a piece of the row's flags."""
    _sandbox_or_skip()
    expected = json.loads((Path(__file__).resolve().parent / "bad_submissions" / short / "expected.json").read_text())
    root, rows = graded_lab(lab)  # graded with the instructor and untouched rows, once per session
    for student, want in expected.items():
        row = rows[student]
        for key, value in want.items():
            if key == "message":
                graded = _nb(root / "autograded" / student / lab / f"{lab}.ipynb")
                assert value in json.dumps([c.get("outputs", []) for c in graded["cells"]]), f"{student}: no {value!r}"
            elif key == "flags":
                assert value in row.flags, f"{student}: expected a {value!r} flag, found {row.flags!r}"
            else:
                assert getattr(row, key) == value, f"{student}.{key}: expected {value!r}, got {getattr(row, key)!r} ({row})"


@pytest.mark.slow
@pytest.mark.parametrize("lab", LAB_NAMES)
def test_instructor_version_gets_full_marks_and_untouched_release_zero(lab, graded_lab):
    _sandbox_or_skip()
    assert lab in RELEASED, f"{lab} has no committed release: run `make release`"
    root, rows = graded_lab(lab)  # the lab's one graded course of the session (tests/conftest.py)
    good, blank = rows["instructor"], rows["untouched"]
    assert good.status == "ok" and blank.status == "ok", (good.reason, blank.reason)
    assert good.correctness_max > 0
    assert good.correctness_score == good.correctness_max, f"{lab}: instructor got {good}"
    assert blank.correctness_score == 0, f"{lab}: untouched release got {blank}"
    # no flag for honest work: neither the audit of its source nor the grader's census of its processes (Lab 3's
    # torch.compile workers, Lab 4's ranks and the guarded calls' children are the course's, not strangers)
    assert good.flags == "", f"{lab}: the instructor's answers were flagged: {good.flags}"
    if good.performance != "none":  # no GPU here: reported as not graded, never as a failure
        assert good.performance == "not graded (no GPU)"
        assert "not graded here (no GPU)" in good.summary and "0 /" not in good.summary.split(";")[1]
    assert good.summary.startswith(f"{good.correctness_max:g} / {good.correctness_max:g} autograded"), good.summary
    # the lab's demonstrations (benchmarks, plots) are not run by the grader, and say so to the learner
    graded = _nb(root / "autograded" / "instructor" / lab / f"{lab}.ipynb")["cells"]
    demos = demo_ids(_nb(LABS / "source" / lab / f"{lab}.ipynb")["cells"])
    shown = {c["metadata"]["nbgrader"]["grade_id"]: c.get("outputs", []) for c in graded
             if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") in demos}
    assert set(shown) == demos, (sorted(shown), sorted(demos))
    for gid, outputs in shown.items():
        assert [o.get("text") for o in outputs] == [DEMO_NOTE], (gid, outputs)
    with open(root / "grades.csv", newline="") as fh:
        assert {(r["student"], r["lab"]) for r in csv.DictReader(fh)} == {(s, lab) for s in rows}


# The instructor notebooks that tests/test_lab_validate.py runs through nbgrader's Validator (which also fails a
# cell that raised, nbval-lax's rule) are not run a second time here (each takes 15 to 50 s on the CI machine).
NBVAL_NOTEBOOKS = ([f"source/{lab}" for lab in LAB_NAMES if lab not in VALIDATED]
                   + [f"release/{lab}" for lab in LAB_NAMES])


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NBVAL_NOTEBOOKS)
def test_nbval_lax_passes_over_instructor_and_release_notebooks(notebook):
    """The teacher's CI command, pytest --nbval-lax labs/source labs/release, one notebook per test (every
    release notebook and the instructor notebooks the Validator test does not run; separate tests so that
    test workers can share them out)."""
    path = LABS / notebook / f"{Path(notebook).name}.ipynb"
    assert path.is_file(), f"{path} is missing" + (": run `make release`" if notebook.startswith("release/") else "")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "--nbval-cell-timeout=600",
         "-p", "no:cacheprovider", "-q", str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


# ------------------------------------------------------------------ the bad-submission corpus


CORPUS_SHARDS = 2
# Cases that compute until their cell's time limit stops them: graded in a class of their own whose cells have
# 6 s (every other cell of theirs is a line or two), not the 15 s that the others' performance cells need on a
# busy machine; a spinning kernel uses a core until its limit.
SPINNING = ("ignores_interrupt", "infinite_loop")
SHARDS = [*range(CORPUS_SHARDS), "spinning"]  # the two long shards first (make test starts them in this order)


def _shard(shard: str | int) -> tuple[list[str], int]:
    """(the cases of ``shard``, its per-cell time limit in seconds)."""
    every = sorted(name for name in _corpus_cases()[0] if name not in SPINNING)
    return (list(SPINNING), 6) if shard == "spinning" else (every[shard::CORPUS_SHARDS], 15)


def _corpus_cases() -> tuple[dict[str, dict], dict[str, str]]:
    """(the cases graded here by test_bad_submission_corpus, {case: where its attack is graded instead}).

    A case whose attack and defence are already graded elsewhere (a real lab's corpus graded through the
    same pipeline, or the same code in the verdict process) names that place as ``covered_by`` in
    expected.json and is not graded a second time here (each grading costs ~8 CPU-seconds)."""
    every = json.loads((CORPUS / "expected.json").read_text())
    covered = {name: want["covered_by"] for name, want in every.items() if "covered_by" in want}
    return {name: want for name, want in every.items() if name not in covered}, covered


@pytest.mark.slow
@pytest.mark.parametrize("shard", SHARDS)
def test_bad_submission_corpus(tmp_path, shard):
    """Each hostile submission gets its expected row; the good one beside them gets full marks.

    Performance cells are graded with the fake timer (no GPU here), so the trusted process's
    refusals are exercised for real. Nothing outside the run's output folders changes, and no
    process a submission started survives the run. The corpus is graded in shards (every case in
    exactly one, each shard a class of its own), so the test workers share it out.
    """
    _sandbox_or_skip()
    every = _corpus_cases()[0]
    names, cell_timeout = _shard(shard)
    expected = {name: every[name] for name in names}
    root = _tiny_course(tmp_path)
    for name in expected:
        _submit(root, name, "lab0_tiny", CORPUS / f"{name}.nb.json")
    import mlsys

    guarded = _tree_hashes(root / "source", root / "submitted", Path(mlsys.__file__).parent, LABS / "source",
                           CORPUS / "source")
    guarded[root / "nbgrader_config.py"] = (root / "nbgrader_config.py").read_bytes()
    rows = teach.grade(root, timeout=120, cell_timeout=cell_timeout, feedback=False, verbose=False, jobs=2, perf="fake")
    got = {r.student: r for r in rows}
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        row = got[name]
        assert row.status == want["status"], f"{name}: {row}"
        if "correctness_score" in want:
            assert row.correctness_score == want["correctness_score"], f"{name}: {row}"
        if "performance_score" in want:
            assert row.performance_score == want["performance_score"], f"{name}: {row}"
        if "reason" in want:
            assert want["reason"] in row.reason, f"{name}: expected a reason mentioning {want['reason']!r}, got {row}"
        if "performance" in want:
            assert row.performance == want["performance"]
        if "flags" in want:
            assert (want["flags"] in row.flags) if want["flags"] else row.flags == "", f"{name}: flags {row.flags!r}"
        assert row.correctness_max == 3 and row.performance_max == 1
        if name in SPINNING:  # stopped by the limit in the answer cell itself; test_total keeps its point
            assert "cell double timed out" in row.reason, f"{name}: {row}"
    changed = [str(p) for p, data in guarded.items() if not p.is_file() or p.read_bytes() != data]
    assert not changed, f"grading changed files outside its output folders: {changed[:5]}"
    if "background_process" in expected:  # its processes carry the marker; another shard grading at the same
        # time may be running it inside its own sandbox still, so only the shard that graded it looks
        assert not live_processes_with("31337"), "a process started by a submission outlived grading"
    if "enormous_output" in expected:  # the enormous output was cut down in what is handed back
        big = root / "autograded" / "enormous_output" / "lab0_tiny" / "lab0_tiny.ipynb"
        assert big.stat().st_size < 500_000
    with open(root / "grades.csv", newline="") as fh:
        report = {r["student"]: r for r in csv.DictReader(fh)}
    assert sorted(report) == sorted(expected)
    if "good" in expected:
        assert report["good"]["performance"] == "graded" and report["good"]["performance_score"] == "1"
        assert report["good"]["summary"] == "3 / 3 autograded; performance 1 / 1"
        kept = json.loads((root / ".grading" / "evidence" / "lab0_tiny" / "good.json").read_text())
        assert kept["perf"]["perf_speed"]["credit"] == 1.0  # the verdict with its evidence, for the teacher
        assert kept["perf"]["perf_speed"]["evidence"]["learner_rounds_s"], kept["perf"]["perf_speed"]
    if "steal_solution" in expected:
        assert "file" in report["steal_solution"]["flags"]
    if "malformed_json" in expected:
        assert report["malformed_json"]["status"] == "failed" and "malformed" in report["malformed_json"]["reason"]


def test_the_corpus_shards_cover_every_case_once():
    every = sorted(_corpus_cases()[0])
    shards = [_shard(s)[0] for s in SHARDS]
    assert sorted(sum(shards, [])) == every and all(shards)
    assert all(_corpus_cases()[0][name]["reason"] == "timed out" for name in SPINNING)
    assert {"good", "enormous_output", "steal_solution", "malformed_json"} <= set(every)  # the tail's checks run
    # every file of the corpus has its expected row, and every case is graded here or where expected.json says
    files = {p.name.removesuffix(".nb.json") for p in CORPUS.glob("*.nb.json")}
    assert files == set(every) | set(_corpus_cases()[1])


def test_every_case_not_graded_here_is_graded_where_it_says():
    """A case left out of test_bad_submission_corpus names a lab's corpus file with its expected row (which that
    lab's graded-course test checks), or a test that exists (so a rename or a deletion there shows up here)."""
    tests = Path(__file__).resolve().parent
    covered = _corpus_cases()[1]
    assert covered, "expected.json names no covering place: every case is graded here"
    for name, where in covered.items():
        if "::" in where:
            path, test = where.split("::")
            assert re.search(rf"^def {test}\(", (tests / path).read_text(encoding="utf-8"), re.M), f"{name}: no {where}"
        else:
            assert (CORPUS / where).is_file(), f"{name}: {where} is missing"
            folder = where.split("/")[0]
            expected = json.loads((CORPUS / folder / "expected.json").read_text())
            # every row of a lab's expected.json is checked in that lab's one graded course
            # (test_attacks_on_grader_side_test_cells_earn_nothing for Labs 1-3, test_lab5.py for Lab 5)
            assert Path(where).name.removesuffix(".nb.json") in expected, f"{name}: {where} has no expected row"


@pytest.mark.slow
def test_grade_cli_writes_feedback_and_reports_unknown_labs(tmp_path):
    _sandbox_or_skip()
    root = _tiny_course(tmp_path)
    _submit(root, "ann", "lab0_tiny", CORPUS / "good.nb.json")
    _submit(root, "ben", "lab9_missing", CORPUS / "good.nb.json")
    _submit(root, "cid", "lab0_tiny", CORPUS / "steal_solution.nb.json")
    rows = teach.grade(root, timeout=120, verbose=False, perf="off")
    got = {r.student: r for r in rows}
    assert got["ann"].status == "ok" and got["ann"].correctness_score == 3
    # the feedback header says what the CSV says: no GPU here, so performance is not counted as zero
    assert got["ann"].summary == "3 / 3 autograded; performance (1 points) not graded here (no GPU)"
    html = (root / "feedback" / "ann" / "lab0_tiny" / "lab0_tiny.html").read_text()
    assert f"({got['ann'].summary})</h4>" in html
    assert "Flagged for the teacher" in (root / "feedback" / "cid" / "lab0_tiny" / "lab0_tiny.html").read_text()
    assert got["ben"].status == "failed" and "unknown lab" in got["ben"].reason


@pytest.mark.slow  # nbgrader release: ~6 s of CPU
def test_corpus_untouched_is_the_tiny_labs_release(tmp_path):
    """The corpus' untouched submission is exactly what `make release` makes of the tiny lab."""
    root = _tiny_course(tmp_path)
    teach.release(root=root)
    assert (root / "release" / "lab0_tiny" / "lab0_tiny.ipynb").read_bytes() == (CORPUS / "untouched.nb.json").read_bytes()


@pytest.mark.slow
def test_whole_submission_time_limit_keeps_earlier_cells_and_ends_every_process(tmp_path):
    """Many cells, each under the per-cell limit, together over the per-submission limit: the run stops,
    cells graded before keep their points, the rest are marked not run, and nothing it started lives on."""
    _sandbox_or_skip()
    nb = _nb(CORPUS / "good.nb.json")
    stall = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
             "source": "import subprocess, time\n"
                       "subprocess.Popen(['sleep', '31338'], start_new_session=True)\ntime.sleep(4)\n"}
    at = next(i for i, c in enumerate(nb["cells"]) if c["metadata"].get("nbgrader", {}).get("grade_id") == "test_double")
    nb["cells"][at + 1:at + 1] = [dict(stall, id=f"stall-{i}") for i in range(30)]
    root = _tiny_course(tmp_path)
    dest = root / "submitted" / "slowpoke" / "lab0_tiny" / "lab0_tiny.ipynb"
    dest.parent.mkdir(parents=True)
    dest.write_text(json.dumps(nb))
    [row] = teach.grade(root, timeout=20, cell_timeout=6, feedback=True, verbose=False, perf="off")
    assert row.status == "ok" and "time limit of 20 s" in row.reason, row
    assert row.correctness_score == 2, f"test_double ran before the limit and keeps its 2 points: {row}"
    graded = _nb(root / "autograded" / "slowpoke" / "lab0_tiny" / "lab0_tiny.ipynb")
    last = next(c for c in graded["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "test_total")
    assert any(o.get("ename") == "NotRun" for o in last["outputs"]), last["outputs"]
    assert (root / "feedback" / "slowpoke" / "lab0_tiny" / "lab0_tiny.html").is_file()
    assert not live_processes_with("31338"), "a process started by the submission outlived grading"
