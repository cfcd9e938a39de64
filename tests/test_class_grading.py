"""Grading a whole class: slots on one machine, a Slurm job array, resuming, nbgrader's own paths.

Fast tests check the pieces (slots, the row store and its keys, the CSV's escaping, the plan's rows
for awkward input). Slow tests grade the corpus' tiny lab for real: through a local run and through
Slurm (the two CSVs must be equal byte for byte), through an interrupted and resumed run, and
through ``nbgrader autograde`` called directly. Tests that need Slurm fail under CI (``CI=true``,
where ``.ci/run`` starts a single-node Slurm with ``.ci/slurm-up``) and skip elsewhere, saying why.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlsys.grader import slurm, teach
from mlsys.grader.rowstore import RowStore, submission_key
from mlsys.grader.slots import make_slots
from mlsys.runtime.processes import live_processes_with

REPO = Path(__file__).resolve().parent.parent
LABS = REPO / "labs"
CORPUS = Path(__file__).resolve().parent / "bad_submissions"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _tiny_course(tmp: Path) -> Path:
    """A course root with the real nbgrader_config.py and the corpus' tiny lab (2 + 1 points, 1 perf point)."""
    root = tmp / "course"
    (root / "source" / "lab0_tiny").mkdir(parents=True)
    shutil.copy2(LABS / "nbgrader_config.py", root / "nbgrader_config.py")
    shutil.copy2(CORPUS / "source" / "lab0_tiny" / "lab0_tiny.nb.json", root / "source" / "lab0_tiny" / "lab0_tiny.ipynb")
    shutil.copy2(CORPUS / "source" / "lab0_tiny" / "perf.toml", root / "source" / "lab0_tiny" / "perf.toml")
    return root


def _good() -> dict:
    return json.loads((CORPUS / "good.nb.json").read_text())


def _put(root: Path, student: str, nb: dict, *, loose: bool = False) -> Path:
    folder = root / "submitted" / student if loose else root / "submitted" / student / "lab0_tiny"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lab0_tiny.ipynb").write_text(json.dumps(nb))
    return folder / "lab0_tiny.ipynb"


def _duplicated_test_cell() -> dict:
    nb = _good()
    at = [c.get("id") for c in nb["cells"]].index("test-double")
    nb["cells"].insert(at + 1, copy.deepcopy(nb["cells"][at]))
    return nb


def _awkward_corpus(root: Path) -> None:
    """Honest work in awkward shapes: an option-like name, a formula-like name with a duplicated test
    cell, a notebook saved without its lab folder, a lab folder whose one notebook has another name, and one
    with two notebooks named for nothing (a failed row that names them)."""
    _put(root, "--help", _good())
    _put(root, "=1+2", _duplicated_test_cell())
    _put(root, "loose", _good(), loose=True)
    folder = root / "submitted" / "fay" / "lab0_tiny"  # the lab folder's one notebook, saved under another name
    folder.mkdir(parents=True)
    (folder / "lab0_tiny (1).ipynb").write_text(json.dumps(_good()))
    folder = root / "submitted" / "gus" / "lab0_tiny"  # two notebooks, neither named for the lab: which one?
    folder.mkdir(parents=True)
    for name in ("draft.ipynb", "final.ipynb"):
        (folder / name).write_text(json.dumps(_good()))


def _sandbox_or_skip() -> None:
    from mlsys.grader import sandbox

    try:
        sandbox.check()
    except sandbox.SandboxUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI must grade in the sandbox: {exc}")
        pytest.skip(f"bubblewrap cannot run here: {exc}")


def _slurm_or_skip() -> None:
    why = slurm.available()
    if why is None:
        return
    if IN_CI:
        pytest.fail(f"Slurm is needed under CI (.ci/run starts it with .ci/slurm-up): {why}")
    pytest.skip(f"no Slurm here ({why}); `sudo .ci/slurm-up` starts a single-node one")




# ------------------------------------------------------------------ slots: every GPU of one machine


def test_slots_give_each_job_its_own_gpu_and_an_equal_share_of_cores():
    slots = make_slots(2, gpus=["0", "1"], timed_on_gpu=True, cores=[0, 1, 2, 3])
    assert [s.cores for s in slots] == [(0, 1), (2, 3)]
    assert [s.env()["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0", "1"]
    assert [s.env()["OMP_NUM_THREADS"] for s in slots] == ["2", "2"]
    # 8 GPUs, 16 cores (a DGX-like node): 2 cores each, GPU i for slot i
    eight = make_slots(8, gpus=[str(i) for i in range(8)], timed_on_gpu=True, cores=list(range(16)))
    assert [s.gpu for s in eight] == [str(i) for i in range(8)]
    assert sorted(c for s in eight for c in s.cores) == list(range(16))


def test_slots_refuse_two_timings_on_one_gpu():
    with pytest.raises(ValueError, match="needs 3 GPUs, found 2"):
        make_slots(3, gpus=["0", "1"], timed_on_gpu=True, cores=[0, 1, 2, 3])
    # correctness only: more jobs than GPUs is fine; a CPU machine runs N sandboxed gradings, cores shared
    cpu = make_slots(4, gpus=[], timed_on_gpu=False, cores=[0, 1])
    assert [s.cores for s in cpu] == [(0,), (1,), (0,), (1,)]
    assert all(s.env()["CUDA_VISIBLE_DEVICES"] == "" for s in cpu)
    with pytest.raises(ValueError, match="positive integer"):
        make_slots(0, gpus=[], timed_on_gpu=False)


def test_slot_prefix_pins_a_process_to_its_cores():
    slot = make_slots(1, gpus=[], timed_on_gpu=False, cores=[sorted(os.sched_getaffinity(0))[0]])[0]
    if not slot.prefix():
        pytest.skip("taskset (util-linux) is not installed")
    out = subprocess.run([*slot.prefix(), sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == list(slot.cores)


# ------------------------------------------------------------------ the row store and its keys


def test_row_store_keeps_a_row_only_for_the_same_key(tmp_path):
    store = RowStore(tmp_path)
    store.put("ann", "lab1", "k1", {"student": "ann", "status": "ok"}, seconds=1.5)
    assert store.get("ann", "lab1", "k1") == {"student": "ann", "status": "ok"}
    assert store.get("ann", "lab1", "k2") is None
    assert store.seconds("ann", "lab1") == 1.5
    assert [p.name for p in (tmp_path / ".grading" / "rows" / "lab1").iterdir()] == ["ann.json"]  # no temp left
    for bad in ("", "..", "a/b"):
        with pytest.raises(ValueError):
            store.path(bad, "lab1")


def test_submission_key_changes_with_files_lab_and_settings(tmp_path):
    sub, lab = tmp_path / "s" / "lab", tmp_path / "src" / "lab"
    sub.mkdir(parents=True)
    lab.mkdir(parents=True)
    (sub / "lab.ipynb").write_text("{}")
    (lab / "lab.ipynb").write_text("{1}")
    key = submission_key([sub], sub.parent, lab, {"perf": "off"})
    assert key == submission_key([sub], sub.parent, lab, {"perf": "off"})
    assert key != submission_key([sub], sub.parent, lab, {"perf": "fake"})
    (sub / "data.csv").write_text("1")
    key2 = submission_key([sub], sub.parent, lab, {"perf": "off"})
    assert key2 != key
    (lab / "lab.ipynb").write_text("{2}")
    assert submission_key([sub], sub.parent, lab, {"perf": "off"}) != key2
    (sub / ".ipynb_checkpoints").mkdir()
    (sub / ".ipynb_checkpoints" / "x").write_text("cache")  # caches do not count
    assert submission_key([sub], sub.parent, lab, {"perf": "off"}) == submission_key([sub], sub.parent, lab,
                                                                                   {"perf": "off"})


# ------------------------------------------------------------------ input handling (issue 26, item 7)


def test_csv_cells_a_spreadsheet_would_read_as_formulas_are_escaped(tmp_path):
    out = tmp_path / "grades.csv"
    rows = [teach.Row(name, "lab1", reason=why) for name, why in
            (("=1+2", ""), ("--help", "-3 points"), ("@SUM(A1)", ""), ("+x", ""), ("ada", "=HYPERLINK(1)"))]
    teach.write_csv(rows, out)
    got = list(csv.DictReader(io.StringIO(out.read_text())))
    assert sorted(r["student"] for r in got) == ["'+x", "'--help", "'=1+2", "'@SUM(A1)", "ada"]
    assert {r["student"]: r["reason"] for r in got}["ada"] == "'=HYPERLINK(1)"
    assert {r["student"]: r["reason"] for r in got}["'--help"] == "'-3 points"
    before = out.read_bytes()
    teach.write_csv([teach.Row("bob", "lab2")], out, keep_other_labs=True)  # kept rows are not escaped twice
    assert [r["student"] for r in csv.DictReader(io.StringIO(out.read_text())) if r["lab"] == "lab1"] == \
        [r["student"] for r in csv.DictReader(io.StringIO(before.decode()))]


def test_plan_gives_every_notebook_a_row(tmp_path):
    root = _tiny_course(tmp_path)
    _put(root, "ann", _good())
    _put(root, "-rf", _good())
    _put(root, "loose", _good(), loose=True)
    (root / "submitted" / "cid" / "lab9_missing").mkdir(parents=True)
    (root / "submitted" / "dan").mkdir()
    (root / "submitted" / "eve").mkdir()
    (root / "submitted" / "eve" / "homework.ipynb").write_text("{}")
    (root / "submitted" / "stray.ipynb").write_text("{}")
    (root / "submitted" / "fay" / "lab0_tiny").mkdir(parents=True)  # the one notebook of the lab folder, renamed
    (root / "submitted" / "fay" / "lab0_tiny" / "lab0_tiny (1).ipynb").write_text("{}")
    os.makedirs(os.path.join(bytes(root / "submitted"), b"g\xffl", b"lab0_tiny"))  # not UTF-8: no CSV can hold it
    long_name = "x" * 250  # a row file <name>.json would pass the 255 bytes a file name holds
    _put(root, long_name, _good())
    p = teach.plan(root)
    assert sorted((s.student, s.lab, s.folder is None) for s in p.todo) == [
        ("-rf", "lab0_tiny", False), ("ann", "lab0_tiny", False), ("fay", "lab0_tiny", False),
        ("loose", "lab0_tiny", True), (long_name, "lab0_tiny", False)]
    assert "without its lab folder" in next(s.note for s in p.todo if s.student == "loose")
    fay = next(s for s in p.todo if s.student == "fay")
    assert fay.notebook.name == "lab0_tiny (1).ipynb" and "named 'lab0_tiny (1).ipynb'" in fay.note
    problems = {r.student: r for r in p.problems}
    assert sorted(problems) == ["cid", "dan", "eve", "g\\xffl", "stray"]
    assert "not valid UTF-8" in problems["g\\xffl"].reason
    store = RowStore(root)
    store.put(long_name, "lab0_tiny", "k", {"student": long_name})
    assert store.get(long_name, "lab0_tiny", "k") == {"student": long_name}
    assert all(r.status == "failed" and r.reason for r in problems.values())
    assert "unknown lab 'lab9_missing'" in problems["cid"].reason
    assert "nothing to grade" in problems["dan"].reason
    assert "homework.ipynb" in problems["eve"].reason and "<lab>/<lab>.ipynb" in problems["eve"].reason
    assert "directly in submitted/" in problems["stray"].reason
    assert p.done == []


# ------------------------------------------------------------------ graded for real


def _csv_rows(path: Path) -> dict[str, dict]:
    return {r["student"]: r for r in csv.DictReader(io.StringIO(path.read_text()))}


def _check_awkward_rows(report: dict[str, dict]) -> None:
    assert sorted(report) == ["'--help", "'=1+2", "fay", "gus", "loose"]
    gus = report.pop("gus")
    assert gus["status"] == "failed" and "found draft.ipynb, final.ipynb" in gus["reason"], gus
    for row in report.values():
        assert row["status"] == "ok" and row["correctness_score"] == "3", row
    assert "cell test_double appears 2 times" in report["'=1+2"]["reason"]
    assert "saved without its lab folder" in report["loose"]["reason"]
    assert "named 'lab0_tiny (1).ipynb'" in report["fay"]["reason"]


@pytest.mark.slow
@pytest.mark.xdist_group("slurm")  # one Slurm node of 2 CPUs: one test at a time
def test_local_and_slurm_grading_give_the_same_csv(tmp_path):
    """Five awkward submissions graded locally (2 at a time) and as a Slurm job array: the
    same grades.csv byte for byte, every row graded in full, feedback under the real names. The
    course folder's path has a space and a comma in it, as a teacher's folder may."""
    _sandbox_or_skip()
    _slurm_or_skip()
    local, cluster = _tiny_course(tmp_path / "local"), _tiny_course(tmp_path / "slurm, fall 2026")
    for root in (local, cluster):
        _awkward_corpus(root)
    teach.grade(local, timeout=300, verbose=False, perf="fake", jobs=2)
    rows = teach.grade(cluster, timeout=300, verbose=False, perf="fake",
                       slurm_options=slurm.SlurmOptions(time="20:00", max_running=2), batch=2)
    assert (local / "grades.csv").read_bytes() == (cluster / "grades.csv").read_bytes()
    _check_awkward_rows(_csv_rows(cluster / "grades.csv"))
    assert all(r.performance == "graded" and r.performance_score == 1 for r in rows if r.student != "gus")
    for student in ("--help", "=1+2", "loose"):
        assert (cluster / "feedback" / student / "lab0_tiny" / "lab0_tiny.html").is_file()
        assert (cluster / "autograded" / student / "lab0_tiny" / "lab0_tiny.ipynb").is_file()
    # the tasks ran on the scheduler: their logs are in the run folder, one per batch of two of the five
    # submission folders (2 + 2 + 1), each naming the rows it graded
    logs = list((cluster / ".grading" / "runs").glob("*/task-*.log"))
    assert len(logs) == 3, logs
    assert sum(p.read_text().count("lab0_tiny: ok") for p in logs) == 4, [p.read_text()[-400:] for p in logs]


@pytest.mark.slow
@pytest.mark.xdist_group("slurm")  # one Slurm node of 2 CPUs: one test at a time
def test_slurm_task_that_fails_is_reported_with_its_reason(tmp_path):
    """A task that ends without its row (here: cancelled as soon as it is queued) leaves a pending row
    whose reason names the task and its state; the next run grades it."""
    _sandbox_or_skip()
    _slurm_or_skip()
    root = _tiny_course(tmp_path)
    _put(root, "ann", _good())
    real_submit = slurm.submit

    def submit_then_lose(script, cwd):  # the task is cancelled before it can grade (a node lost, an admin)
        job = real_submit(script, cwd)
        subprocess.run(["scancel", job], check=True)
        return job

    mp = pytest.MonkeyPatch()
    mp.setattr(teach.slurm, "submit", submit_then_lose)
    try:
        [row] = teach.grade(root, timeout=120, verbose=False, perf="off", feedback=False,
                            slurm_options=slurm.SlurmOptions(time="5:00"))
    finally:
        mp.undo()
    assert row.status == "pending", row
    assert re.search(r"Slurm task \d+_0 ended", row.reason) and "run again" in row.reason, row.reason
    assert "CANCELLED" in row.reason, row.reason
    [again] = teach.grade(root, timeout=120, verbose=False, perf="off", feedback=False,
                          slurm_options=slurm.SlurmOptions(time="5:00"))
    assert again.status == "ok" and again.correctness_score == 3, again


@pytest.mark.slow
@pytest.mark.xdist_group("slurm")  # one Slurm node of 2 CPUs: one test at a time
def test_slurm_regrade_grades_every_submission_again(tmp_path):
    """`teach grade --slurm --regrade`: every task grades its submissions again (none says "already graded,
    kept"), and every stored row is newer than the run."""
    _sandbox_or_skip()
    _slurm_or_skip()
    root = _tiny_course(tmp_path)
    for name in ("ann", "ben"):
        _put(root, name, _good())
    options = slurm.SlurmOptions(time="10:00", max_running=2)
    first = teach.grade(root, timeout=300, verbose=False, perf="off", feedback=False, slurm_options=options)
    assert [r.status for r in first] == ["ok", "ok"], first
    stored = {n: RowStore(root).stored(n, "lab0_tiny")["stored_at"] for n in ("ann", "ben")}
    started = time.time()
    again = teach.grade(root, timeout=300, verbose=False, perf="off", feedback=False, slurm_options=options,
                        regrade=True)
    assert [(r.status, r.correctness_score) for r in again] == [("ok", 3), ("ok", 3)], again
    for name in ("ann", "ben"):
        assert RowStore(root).stored(name, "lab0_tiny")["stored_at"] > max(started, stored[name])
    [run] = sorted((root / ".grading" / "runs").iterdir())[-1:]
    logs = "".join(p.read_text() for p in run.glob("task-*.log"))
    assert "already graded" not in logs and logs.count("lab0_tiny: ok") == 2, logs[-2000:]


@pytest.mark.slow
def test_interrupted_run_resumes_without_regrading_finished_rows(tmp_path):
    """SIGINT (Ctrl-C) in the middle of `teach grade`: finished rows are stored, the rest reported as
    pending, nothing the run started lives on; the next run grades only the rest and leaves the
    finished rows, their autograded notebooks and the CSV lines byte for byte."""
    _sandbox_or_skip()
    root = _tiny_course(tmp_path)
    _put(root, "ann", _good())
    # ben's and cid's gradings each take 8 s more, so the interrupt lands in one of them however busy the machine
    # is (a fresh-clone CI on a loaded machine graded all three in 19 s while this test slept 2 s, 2026-11-28)
    slow = _good()
    at = [c.get("id") for c in slow["cells"]].index("double")
    slow["cells"][at]["source"] += "\nimport time\n\ntime.sleep(8)\n"
    for name in ("ben", "cid"):
        _put(root, name, slow)
    cmd = [sys.executable, "-m", "mlsys.grader.teach", "grade", "--root", str(root), "--timeout", "300",
           "--perf", "off", "--no-feedback"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    rows_dir = root / ".grading" / "rows" / "lab0_tiny"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and not (rows_dir.is_dir() and any(rows_dir.glob("*.json"))):
        assert proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)  # ann's row is stored, ben's grading has begun
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 130, out
    assert "run the same command again" in out
    finished = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in rows_dir.glob("*.json")}
    assert 1 <= len(finished) < 3, out
    report = _csv_rows(root / "grades.csv")
    assert sorted(report) == ["ann", "ben", "cid"]
    pending = [s for s, r in report.items() if r["status"] == "pending"]
    assert len(pending) == 3 - len(finished) and all("run the same command again" in report[s]["reason"]
                                                     for s in pending)
    time.sleep(1)
    assert not live_processes_with(str(root)), "a process of the interrupted run lives on"
    done_before = {f[:-5] for f in finished}
    graded = {s: (root / "autograded" / s / "lab0_tiny" / "lab0_tiny.ipynb").stat().st_mtime_ns for s in done_before}
    p = teach.plan(root, settings=teach._settings_key(perf="off", use_sandbox=True, timeout=300.0, cell_timeout=None,
                                                      feedback=False, root=root))  # the grader of root's config
    assert {s.student for s in p.done} == done_before and {s.student for s in p.todo} == set(pending)
    rows = teach.grade(root, timeout=300, verbose=False, perf="off", feedback=False)
    assert all(r.status == "ok" and r.correctness_score == 3 for r in rows), rows
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in rows_dir.glob("*.json")
            if p.name in finished} == finished
    assert {s: (root / "autograded" / s / "lab0_tiny" / "lab0_tiny.ipynb").stat().st_mtime_ns
            for s in done_before} == graded
    # a third run grades nothing and rewrites the CSV to the same bytes
    csv_bytes = (root / "grades.csv").read_bytes()
    teach.grade(root, timeout=300, verbose=False, perf="off", feedback=False)
    assert (root / "grades.csv").read_bytes() == csv_bytes


# ------------------------------------------------------------------ nbgrader's own paths


def _hostile(root: Path) -> int:
    """A submission whose answer cell reports where it runs and tries to write into the course root."""
    nb = _good()
    at = [c.get("id") for c in nb["cells"]].index("double")
    nb["cells"][at]["source"] += (
        "\nimport os, socket\nprint('HOST', socket.gethostname(), 'UID', os.getuid())\n"
        f"for target in ['../../../PWNED', {str(root / 'PWNED')!r}]:\n"
        "    try:\n        open(target, 'w').write('x')\n    except OSError as e:\n"
        "        print('BLOCKED', target, type(e).__name__)\n")
    _put(root, "mallory", nb)
    return at


def _nbgrader(root: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLSYS_SANDBOX")}
    env["PYTHONPATH"] = str(REPO)
    env["PATH"] = path if path is not None else os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
def test_nbgrader_autograde_called_directly_runs_in_the_sandbox(tmp_path):
    """What formgrader's Autograde button runs: `nbgrader autograde` with the course's config and no
    `make grade` around it. The answer cell runs in the sandbox (its host name, an unprivileged uid,
    the course root out of reach) and the test cells are still graded."""
    _sandbox_or_skip()
    root = _tiny_course(tmp_path)
    at = _hostile(root)
    assert _nbgrader(root, "generate_assignment", "lab0_tiny", "--force").returncode == 0
    proc = _nbgrader(root, "autograde", "lab0_tiny", "--student", "mallory", "--create", "--force")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    graded = json.loads((root / "autograded" / "mallory" / "lab0_tiny" / "lab0_tiny.ipynb").read_text())
    text = "".join("".join(o.get("text", "")) for o in graded["cells"][at]["outputs"])
    # the sandbox's uid is unprivileged: 1000 inside a user namespace, 65534 (nobody) where a root grader
    # drops privileges with setpriv (mlsys.grader.sandbox); never 0
    found = re.search(r"HOST sandbox UID (\d+)", text)
    assert found and int(found.group(1)) != 0, text
    assert f"BLOCKED {root / 'PWNED'}" in text and not (root / "PWNED").exists()
    scores = [c for c in graded["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "test_double"]
    assert scores and not any(o.get("output_type") == "error" for o in scores[0]["outputs"])
    # the teacher's copy that formgrader shows is sanitised as make grade's is (mlsys.grader.nbgrader_hooks)
    assert "BEGIN HIDDEN TESTS" not in json.dumps(graded)


@pytest.mark.slow
def test_nbgrader_autograde_refuses_where_no_sandbox_can_run(tmp_path):
    """Without bubblewrap (here: not on PATH) direct autograde refuses, naming `make grade`; the
    answer cell never runs."""
    root = _tiny_course(tmp_path)
    _hostile(root)
    assert _nbgrader(root, "generate_assignment", "lab0_tiny", "--force").returncode == 0
    proc = _nbgrader(root, "autograde", "lab0_tiny", "--student", "mallory", "--create", "--force",
                     path=str(Path(sys.executable).parent))
    log = proc.stdout + proc.stderr
    assert "refusing to run student code outside the course's sandbox" in log and "make grade" in log, log[-3000:]
    graded = root / "autograded" / "mallory" / "lab0_tiny" / "lab0_tiny.ipynb"
    assert not graded.exists() or "HOST" not in graded.read_text()
    assert not (root / "PWNED").exists()


# ------------------------------------------------------------------ a teacher's fork tests itself


def _readme_fork_ci_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("### Your fork's CI", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.split("#", 1)[0].strip()]


def test_fork_workflow_runs_the_readmes_commands_on_push_and_pull_request():
    import yaml

    wf = yaml.safe_load((REPO / ".github" / "workflows" / "labs.yml").read_text(encoding="utf-8"))
    triggers = wf.get("on", wf.get(True))  # YAML 1.1 reads the key `on` as True
    assert "push" in triggers and "pull_request" in triggers
    [job] = wf["jobs"].values()
    runs = [step["run"].strip() for step in job["steps"] if "run" in step]
    assert runs == _readme_fork_ci_commands()
    # the nbval check covers both versions of every lab, and the fast tests run
    assert any("--nbval-lax" in r and "labs/source" in r and "labs/release" in r for r in runs)
    assert "make test-fast" in runs
    # the maintainers' README command for the labs is the same nbval command
    nbval = next(r for r in runs if "--nbval-lax" in r)
    assert (REPO / "README.md").read_text(encoding="utf-8").count(nbval) == 2


# ------------------------------------------------------------------ progress and the job array's script


def test_progress_line_counts_and_estimates_time_left():
    out = io.StringIO()
    bar = teach.Progress(10, 2, stream=out)
    bar.durations = [10.0, 20.0]  # mean 15 s; 8 left, 2 at a time: 60 s
    bar.show(2, 1, 2)
    line = out.getvalue().strip()
    assert "2/10 graded" in line and "1 failed" in line and "2 running" in line
    assert "about 1 min 00 s left" in line
    assert line.count("#") == 4  # 2 of 10 of a 24-wide bar, rounded down
    bar.show(2, 1, 2)  # unchanged: not printed again
    assert out.getvalue().count("\n") == 1


def test_sbatch_script_is_one_array_with_the_teachers_options(tmp_path):
    opts = slurm.SlurmOptions(partition="gpu", gres="gpu:1", time="30:00", cpus_per_task=4, max_running=2,
                              extra=("--account=cs598",))
    text = slurm.batch_script(["/venv/bin/python", "-m", "mlsys.grader.teach", "grade-task", "/c/m.json"],
                              env={"PYTHONPATH": "/c o"}, log_dir=tmp_path, tasks=300, name="g", options=opts)
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    for want in ("#SBATCH --array=0-299%2", "#SBATCH --partition=gpu", "#SBATCH --gres=gpu:1", "#SBATCH --time=30:00",
                 "#SBATCH --cpus-per-task=4", "#SBATCH --account=cs598",
                 "export PYTHONPATH='/c o'"):
        assert want in lines, want
    assert lines[-1] == 'exec /venv/bin/python -m mlsys.grader.teach grade-task /c/m.json "$SLURM_ARRAY_TASK_ID"'
    proc = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr


def test_settings_key_is_the_same_from_the_command_line_and_from_python():
    cli = teach._settings_key(perf="off", use_sandbox=True, timeout=300.0, cell_timeout=None, feedback=False)
    assert cli == teach._settings_key(perf="off", use_sandbox=True, timeout=300, cell_timeout=None, feedback=False)


def test_readme_class_times_are_the_recorded_measurement():
    """The teacher's table and sentence quote data/grading/lab1_throughput.json (scripts/grading_throughput.py)."""
    rec = json.loads((REPO / "data" / "grading" / "lab1_throughput.json").read_text())
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("### Grading a whole class", 1)[1].split("### Your fork's CI", 1)[0]
    by = {r["config"]: r for r in rec["results"]}
    assert {"local --jobs 1", "local --jobs 2", "slurm, 2 slots"} <= set(by)
    n = by["local --jobs 1"]["submissions"]
    assert all(r["full_marks"] == r["submissions"] == n for r in rec["results"]), "every honest submission: full marks"
    for name in ("local --jobs 1", "local --jobs 2", "slurm, 2 slots"):
        assert f"{by[name]['wall']['value']:g} s" in section, name
    assert f"{rec['slurm_overhead_per_submission']['value']:g} s per submission" in section
    per = by["local --jobs 1"]["wall"]["value"] / n
    assert f"{300 * per / 3600:.1f} h" in section  # a class of 300 on one machine, from the same run
