"""The grading sandbox (bubblewrap): what student code can and cannot reach, and its limits.

Each test runs a small Python program through :func:`mlsys.grader.sandbox.command` and asserts what
it saw. Tests that need bubblewrap skip, saying why, where it cannot run (not installed, or user
namespaces disabled); the error-path tests run everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlsys.grader import sandbox, scratch, teach


def _bwrap_or_skip() -> None:
    try:
        sandbox.check()
    except sandbox.SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap cannot run here: {exc}")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return sandbox.build_site(tmp_path_factory.mktemp("site"))


PROBE = r'''
import json, os, socket, sys, pathlib
out = {}
def attempt(name, fn):
    try:
        out[name] = ["ok", str(fn())[:200]]
    except BaseException as exc:
        out[name] = [type(exc).__name__, str(exc)[:200]]
secret = sys.argv[1]
attempt("read_secret", lambda: open(secret).read())
attempt("write_outside", lambda: open(os.path.join(os.path.dirname(secret), "planted.txt"), "w").write("x"))
attempt("write_etc", lambda: open("/etc/planted", "w").write("x"))
attempt("write_scratch", lambda: open("mine.txt", "w").write("x"))
attempt("network", lambda: socket.create_connection(("1.1.1.1", 53), timeout=3))
attempt("mlsys_file", lambda: __import__("mlsys").__file__)
attempt("uid", lambda: os.getuid())
attempt("pid", lambda: os.getpid())
attempt("repo_labs", lambda: os.listdir(str(pathlib.Path(__import__("mlsys").__file__).parents[1] / "labs")))
print(json.dumps(out))
'''


def _probe(tmp_path: Path, site: Path, **kw) -> dict:
    secret = tmp_path / "teacher" / "solutions.txt"
    secret.parent.mkdir()
    secret.write_text("the answers")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "probe.py").write_text(PROBE)
    sandbox.own_scratch(scratch)
    cmd = sandbox.command([sys.executable, "-P", "probe.py", str(secret)], scratch, site, **kw)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    seen["_scratch"] = scratch
    seen["_outside"] = secret.parent
    return seen


def test_student_code_sees_only_its_scratch_folder(tmp_path, site):
    _bwrap_or_skip()
    seen = _probe(tmp_path, site)
    assert seen["read_secret"][0] == "FileNotFoundError", seen["read_secret"]
    assert seen["write_outside"][0] in ("FileNotFoundError", "OSError", "PermissionError"), seen["write_outside"]
    assert not (seen["_outside"] / "planted.txt").exists()
    assert seen["write_etc"][0] in ("OSError", "PermissionError"), seen["write_etc"]  # read-only file system
    assert seen["write_scratch"][0] == "ok" and (seen["_scratch"] / "mine.txt").read_text() == "x"
    assert seen["network"][0] != "ok", f"the network was reachable: {seen['network']}"
    # mlsys is the installed copy, not the repository; the repository's labs folder does not exist
    assert seen["mlsys_file"][1] == "/sandbox/site/mlsys/__init__.py", seen["mlsys_file"]
    assert seen["repo_labs"][0] == "FileNotFoundError", seen["repo_labs"]
    assert seen["uid"][1] == str(sandbox.SANDBOX_UID)  # not root inside
    assert int(seen["pid"][1]) < 10  # its own process-id namespace: nothing outside is visible or killable


def test_memory_cap_stops_a_large_allocation(tmp_path, site):
    _bwrap_or_skip()
    scratch = tmp_path / "s"
    scratch.mkdir()
    sandbox.own_scratch(scratch)
    code = "try:\n    b = bytearray(3 * 2**30)\n    print('allocated')\nexcept MemoryError:\n    print('MemoryError')\n"
    cmd = sandbox.command([sys.executable, "-c", code], scratch, site, limits=sandbox.Limits(memory_bytes=2**30))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "MemoryError", (proc.stdout, proc.stderr[-500:])


def test_processes_end_with_the_sandbox(tmp_path, site):
    """A detached child (new session, parent exits) dies when the sandbox's first process ends."""
    _bwrap_or_skip()
    scratch = tmp_path / "s"
    scratch.mkdir()
    sandbox.own_scratch(scratch)
    code = ("import subprocess\nsubprocess.Popen(['sleep', '31339'], start_new_session=True, "
            "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\nprint('started')\n")
    proc = subprocess.run(sandbox.command([sys.executable, "-c", code], scratch, site), capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.strip() == "started"
    import time

    time.sleep(0.5)
    alive = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if b"31339" in (d / "cmdline").read_bytes():
                alive.append(d.name)
        except OSError:
            continue
    assert not alive, f"processes outlived the sandbox: {alive}"


ROOT_PROBE = r'''
import json, os
out = {"ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), sorted(os.getgroups())]}
for path in ("/etc/shadow", "/etc/gshadow", "root_only.txt"):
    try:
        out[path] = open(path).read()[:20]
    except OSError as exc:
        out[path] = type(exc).__name__
out["etc"] = sorted(os.listdir("/etc"))
out["caps"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith(("CapEff", "CapPrm", "CapBnd"))]
print(json.dumps(out))
'''


def test_a_root_grader_runs_student_code_unprivileged(tmp_path, site):
    """Started by a root grader, the sandbox runs as an unprivileged uid with no capabilities: root-only files
    (/etc/shadow, a 0600 root file in its own folder) are unreadable, and /etc holds only what Python needs."""
    _bwrap_or_skip()
    import os

    if os.geteuid() != 0:
        pytest.skip("the grader is not root here: the user-namespace path is tested by the other tests")
    scratch = tmp_path / "s"
    scratch.mkdir()
    sandbox.own_scratch(scratch)
    secret = scratch / "root_only.txt"
    secret.write_text("root's secret")
    os.chown(secret, 0, 0)
    secret.chmod(0o600)
    proc = subprocess.run(sandbox.command([sys.executable, "-c", ROOT_PROBE], scratch, site), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    uid = sandbox.SANDBOX_UID
    assert seen["ids"] == [uid, uid, uid, uid, [uid]] or seen["ids"] == [uid, uid, uid, uid, []], seen["ids"]
    assert seen["/etc/shadow"] in ("FileNotFoundError", "PermissionError"), seen["/etc/shadow"]
    assert seen["/etc/gshadow"] in ("FileNotFoundError", "PermissionError"), seen["/etc/gshadow"]
    assert seen["root_only.txt"] == "PermissionError", seen["root_only.txt"]
    assert seen["caps"] == ["0000000000000000"] * 3, seen["caps"]
    assert "shadow" not in seen["etc"] and "sudoers" not in seen["etc"] and "passwd" in seen["etc"], seen["etc"]
    # even if /etc/shadow were bound in, the uid could not read it: it is not root outside either
    assert Path("/etc/shadow").exists()


def test_tasks_are_capped_per_sandbox_by_a_cgroup(tmp_path, site):
    """A cgroup per sandbox caps its processes together (not per process, not per user id)."""
    _bwrap_or_skip()
    limits = sandbox.Limits(processes=40)
    cgroup = sandbox.Cgroup.create(limits)
    if cgroup is None:
        pytest.skip(f"no cgroup can be made here: {sandbox.cgroup_note()}")
    scratch = tmp_path / "s"
    scratch.mkdir()
    sandbox.own_scratch(scratch)
    code = ("import subprocess\nstarted = 0\nprocs = []\nfor _ in range(120):\n    try:\n"
            "        procs.append(subprocess.Popen(['sleep', '30']))\n        started += 1\n"
            "    except OSError:\n        break\nprint(started)\nfor p in procs:\n    p.kill()\n")
    try:
        proc = subprocess.run(sandbox.command([sys.executable, "-c", code], scratch, site, limits=limits, cgroup=cgroup),
                              capture_output=True, text=True, timeout=120)
    finally:
        cgroup.close()
    assert proc.returncode == 0, proc.stderr[-2000:]
    started = int(proc.stdout.strip().splitlines()[-1])
    assert 0 < started < 40, f"expected the cgroup to stop the sandbox below 40 tasks, it started {started}"
    assert not any(p.exists() for p in cgroup.paths), "the cgroup was not removed"


def test_site_is_an_install_of_the_package_only(site):
    assert (site / "mlsys" / "__init__.py").is_file()
    assert not (site / "labs").exists() and not list(site.rglob("*.ipynb"))
    assert not list(site.rglob("*.pth")) and not any(p.is_symlink() for p in site.rglob("*"))


def test_missing_bwrap_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(sandbox.SandboxUnavailable, match="apt-get install bubblewrap"):
        sandbox.check()
    assert teach.main(["grade", "--submitted", "/nonexistent-folder"]) == 2


def test_limits_reject_nonsense():
    with pytest.raises(ValueError, match="memory_bytes"):
        sandbox.Limits(memory_bytes=0)


def test_no_sandbox_is_logged_loudly(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sandbox, "build_site", lambda dest: dest)  # nothing to grade: skip the install
    root = tmp_path / "course"
    (root / "source").mkdir(parents=True)
    (root / "nbgrader_config.py").write_text("c = get_config()\n")
    rows = teach.grade(root, use_sandbox=False, verbose=False)
    assert rows == []
    err = capsys.readouterr().err
    assert "--no-sandbox" in err and "not trustworthy" in err


# ------------------------------------------------------------------ the report


def test_summary_counts_ungraded_performance_and_pending_written_answers_apart():
    row = teach.Row("ann", "lab1", correctness_score=11.0, correctness_max=11.0, performance_max=2.0,
                    performance="not graded (no GPU)", performance_score="", manual_max=2.0)
    assert teach.summarize(row) == ("11 / 11 autograded; performance (2 points) not graded here (no GPU); "
                                    "2 points of written answers pending")
    row = teach.Row("ann", "lab2", correctness_score=8.0, correctness_max=12.0, performance_max=4.0,
                    performance_score=1.5)
    assert teach.summarize(row) == "8 / 12 autograded; performance 1.5 / 4"


def test_grading_one_lab_keeps_the_other_labs_rows(tmp_path):
    path = tmp_path / "grades.csv"
    teach.write_csv([teach.Row("ann", "lab1", correctness_score=5.0), teach.Row("ann", "lab2", correctness_score=1.0),
                     teach.Row("ben", "lab2", correctness_score=2.0)], path)
    teach.write_csv([teach.Row("ann", "lab2", correctness_score=7.0)], path, keep_other_labs=True)
    import csv

    with open(path, newline="") as fh:
        rows = {(r["student"], r["lab"]): r for r in csv.DictReader(fh)}
    assert set(rows) == {("ann", "lab1"), ("ann", "lab2")}  # lab2 regraded as a whole: ben's old row is gone
    assert rows["ann", "lab1"]["correctness_score"] == "5" and rows["ann", "lab2"]["correctness_score"] == "7"
    assert "flags" in rows["ann", "lab1"] and "summary" in rows["ann", "lab1"]


def test_kernel_cannot_reach_the_runners_result_stream(tmp_path, site):
    """Code in the kernel can neither open the runner's descriptors nor read its memory (the nonce)."""
    _bwrap_or_skip()
    import time

    import nbformat

    from mlsys.grader.sandboxed_execute import run_in_sandbox

    probe = ("import os\nppid = os.getppid()\nout = {}\n"
             "for what in ('mem', 'environ'):\n"
             "    try:\n        out[what] = str(open(f'/proc/{ppid}/{what}', 'rb').read(10))\n"
             "    except Exception as exc:\n        out[what] = type(exc).__name__\n"
             "opened = []\n"
             "for n in range(64):\n"
             "    try:\n        open(f'/proc/{ppid}/fd/{n}', 'wb').close()\n        opened.append(n)\n"
             "    except Exception:\n        pass\n"
             "out['fd'] = opened\n"
             "os.write(1, b'FORGED {\"done\": true}\\n')\nimport json\nprint('PROBE' + json.dumps(out) + 'END')\n")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(probe)])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    nbformat.write(nb, str(scratch / "nb.ipynb"))
    settings = {"mode": "bwrap", "site": str(site), "perf": "off"}
    results, ended = run_in_sandbox("mlsys.grader.learnerside.cellrunner", {"notebook": "nb.ipynb", "timeout": 120}, scratch,
                                    settings, deadline=time.monotonic() + 180, log=tmp_path / "log")
    assert ended == "done" and not (scratch / "nb.ipynb").exists()  # the notebook (hidden tests) is gone from disk
    [cell] = [r for r in results if "index" in r]
    text = "".join(o.get("text", "") for o in cell["outputs"])
    # the forged line lands in the cell's own output (ipykernel forwards fd 1), never in the result stream
    import re

    seen = json.loads(re.search(r"PROBE(.*?)END", text).group(1))  # the probe's dict
    # the runner's parent is the kernel's parent: its descriptors and memory are closed to the kernel
    assert seen["fd"] == [] and seen["mem"] == "PermissionError" and seen["environ"] == "PermissionError", seen


def test_a_course_under_tmp_or_home_stays_visible(tmp_path, monkeypatch, site):
    """A venv under /tmp or /home (a clone in /tmp/ci, a teacher's ~/course/.venv) is bound read-only
    *after* /tmp and /home are emptied: bwrap applies its arguments in order, so a tmpfs mounted later
    would hide the interpreter and every submission would fail to start."""
    venv = str(tmp_path / "course" / ".venv")  # pytest's tmp_path lies under /tmp
    Path(venv).mkdir(parents=True)
    assert venv.startswith("/tmp/")
    monkeypatch.setattr(sys, "prefix", venv)
    cmd = sandbox.command(["python", "-c", "pass"], tmp_path, site, bwrap="/usr/bin/bwrap")
    tmpfs = [i for i, a in enumerate(cmd) if a == "--tmpfs" and cmd[i + 1] in ("/tmp", "/home")]
    bind = next(i for i, a in enumerate(cmd) if a == "--ro-bind" and cmd[i + 1] == venv)
    assert len(tmpfs) == 2 and max(tmpfs) < bind, cmd


def test_where_no_cgroup_can_be_made_the_note_says_so_and_per_process_caps_still_hold(tmp_path, site, monkeypatch,
                                                                                      capsys):
    """The branch a machine without systemd or a writable cgroup file system takes: a clear note, once, and the
    sandbox still starts with its per-process caps (address space, tasks above the user's count), which hold."""
    monkeypatch.setattr(sandbox, "SYSTEMD_DIR", tmp_path / "no-systemd")
    monkeypatch.setattr(sandbox, "CGROUP_FS", tmp_path / "no-cgroup-fs")
    monkeypatch.setattr(sandbox, "_CGROUP_NOTE", [])
    limits = sandbox.Limits(memory_bytes=2 * 2**30, processes=40)
    assert sandbox.Cgroup.create(limits) is None
    note = sandbox.cgroup_note()
    assert note.startswith("no cgroup per sandbox here") and "no cgroup file system" in note, note
    assert "capped per process only" in note and "not per sandbox" in note, note
    assert capsys.readouterr().err.count("NOTE: " + note) == 1
    assert sandbox.Cgroup.create(limits) is None and "NOTE" not in capsys.readouterr().err  # said once per process
    scratch = tmp_path / "s"
    scratch.mkdir()
    sandbox.own_scratch(scratch)
    code = ("import sys\ntry:\n    big = bytearray(3 * 2**30)\n    print('allocated')\nexcept MemoryError:\n"
            "    print('refused')\nsmall = bytearray(100 * 2**20)\nprint('small ok')\n")
    argv = sandbox.command([sys.executable, "-c", code], scratch, site, limits=limits, cgroup=None)
    assert f"--as={2 * 2**30}" in argv and any(a.startswith("--nproc=") for a in argv), argv
    _bwrap_or_skip()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["refused", "small", "ok"], proc.stdout  # 3 GiB over a 2 GiB cap; 100 MiB under it


def test_a_submissions_writes_are_capped_in_all_not_only_per_file(tmp_path, site):
    """Round 4: one submission wrote 2.1 GB into the grader's disk in files each under the per-file cap. Its
    scratch is a tmpfs of a fixed size (a root grader): the third 4 MiB file of an 8 MiB scratch does not fit."""
    _bwrap_or_skip()
    folder = tmp_path / "scratch"
    folder.mkdir()
    if not scratch.scratch_fs(folder, size=8 * 2**20):
        pytest.skip("this grader cannot mount a tmpfs (not root): the per-file cap is all there is")
    try:
        sandbox.own_scratch(folder)
        code = ("import errno\nwritten = 0\nfor i in range(3):\n    try:\n"
                "        open(f'f{i}', 'wb').write(b'x' * (4 << 20))\n        written += 1\n"
                "    except OSError as exc:\n        print('refused', errno.errorcode[exc.errno])\nprint('written', written)\n")
        proc = subprocess.run(sandbox.command([sys.executable, "-c", code], folder, site), capture_output=True,
                              text=True, timeout=120, cwd=folder)
        assert "refused ENOSPC" in proc.stdout and "written 2" in proc.stdout, proc.stdout + proc.stderr
    finally:
        scratch.release_scratch(folder)


def test_only_the_slots_gpu_nodes_are_bound(monkeypatch):
    """Under --jobs N a sandbox gets the driver's control nodes and its slot's GPU only, never a neighbour's."""
    every = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
             "/dev/nvidia-modeset", "/dev/nvidia-caps/nvidia-cap1"]
    monkeypatch.setattr(sandbox.Path, "glob", lambda self, pattern: [sandbox.Path(p) for p in every])
    assert sandbox.gpu_nodes("1") == ["/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-modeset", "/dev/nvidia-uvm",
                                      "/dev/nvidia-uvm-tools", "/dev/nvidia1", "/dev/nvidiactl"]
    assert "/dev/nvidia0" not in sandbox.gpu_nodes("") and "/dev/nvidia2" not in sandbox.gpu_nodes("")
    assert sandbox.gpu_nodes("GPU-1234abcd") == sorted(every)  # a UUID names no node: no slot to keep to


def test_a_sandbox_cannot_widen_its_cores_past_its_cgroups_cpuset(tmp_path, site):
    """Round 4: a submission widened its affinity to the neighbour's core (taskset is undoable from inside). The
    sandbox's cgroup holds the slot's cores as a cpuset, which sched_setaffinity inside cannot reach past."""
    _bwrap_or_skip()
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core here: nothing to widen to")
    mine = os.sched_getaffinity(0)
    one = {min(mine)}
    os.sched_setaffinity(0, one)  # the slot's share, as teach's taskset gives it
    try:
        cgroup = sandbox.Cgroup.create(sandbox.Limits())
    finally:
        os.sched_setaffinity(0, mine)
    if cgroup is None or not any("cpuset" in str(p) or (p / "cpuset.cpus").is_file() for p in cgroup.paths):
        pytest.skip(f"no cpuset cgroup can be made here: {sandbox.cgroup_note() or 'cpuset controller not delegated'}")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = (f"import os\ntry:\n    os.sched_setaffinity(0, {sorted(mine)!r})\nexcept OSError as exc:\n    print('refused', exc)\n"
            "print(sorted(os.sched_getaffinity(0)))\n")
    try:
        proc = subprocess.run(sandbox.command([sys.executable, "-c", code], scratch, site, cgroup=cgroup),
                              capture_output=True, text=True, timeout=120)
    finally:
        cgroup.close()
    assert proc.stdout.strip().splitlines()[-1] == str(sorted(one)), proc.stdout + proc.stderr


def test_a_root_grader_enters_a_private_scratch_folder(tmp_path, site):
    """A scratch folder made by ``tempfile.mkdtemp`` (mode 0700) is entered: bwrap changes into it as root
    without capabilities, before dropping to the sandbox's uid (on the lent H200, 2026-12-02, the trust-boundary
    checks failed with "Can't chdir to /home/student: Permission denied")."""
    _bwrap_or_skip()
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("the grader is not root here: its own folders are its own inside the user namespace")
    scratch = Path(tempfile.mkdtemp(dir=tmp_path))
    assert scratch.stat().st_mode & 0o777 == 0o700
    sandbox.own_scratch(scratch)
    probe = "import os; print(os.getcwd(), os.getuid())"
    proc = subprocess.run(sandbox.command([sys.executable, "-c", probe], scratch, site), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [str(sandbox.INSIDE_HOME), str(sandbox.SANDBOX_UID)]
    assert scratch.stat().st_mode & 0o777 == 0o711  # others may enter, not list


def test_the_verdict_runner_needs_no_nbgrader():
    """The GPU checks of the trust boundaries run the verdict process on a machine without nbgrader or Jupyter:
    the runner and everything it starts import none of them."""
    blocked = "import sys\nfor m in ('nbgrader', 'nbclient', 'jupyter_client', 'zmq', 'ipykernel'): sys.modules[m] = None\n"
    code = blocked + "import mlsys.grader.sandboxrun, mlsys.grader.decide.trusted, mlsys.grader.learnerbox, mlsys.grader.clean.perfworker"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def _mounted(path: Path) -> bool:
    mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()  # a space in a mount point reads \\040
    return any(line.split()[4] == str(path).replace(" ", "\\040") for line in mountinfo)


def test_a_grading_folder_is_removed_with_the_scratch_a_killed_grading_left_mounted():
    """An interrupted run SIGKILLs its gradings; one killed between mounting its scratch and unmounting it left the
    run's temporary folder unremovable ("Device or resource busy": CI, 2026-12-03). The run's folder releases every
    mount below it, deepest first, then goes."""
    if os.geteuid() != 0:
        pytest.skip("mounting a scratch file system needs a root grader (CI runs as root)")
    with scratch.grading_folder("mlsys-test-") as tmp:
        outer, inner = tmp / "scratch" / "sub-a", tmp / "scratch" / "sub-a" / "deeper dir"
        outer.mkdir(parents=True)
        assert scratch.scratch_fs(outer, 1 << 20), "could not mount a tmpfs as root"
        inner.mkdir()
        assert scratch.scratch_fs(inner, 1 << 20)
        (inner / "file").write_text("a submission's write")
        assert _mounted(outer) and _mounted(inner)
    assert not tmp.exists(), "the run's folder was not removed"
    assert not _mounted(outer) and not _mounted(inner)
