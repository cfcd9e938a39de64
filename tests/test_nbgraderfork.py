"""nbgrader commands forked from one pre-imported process per grading run (mlsys.grader.nbgraderfork): each runs
as ``python -m nbgrader ARGS`` would (its working folder and its own configuration, exactly the environment given,
its own session, the slot's cores, its log, its exit status), holds none of the server's pipes, is ended by the
time limit with all it started, and nothing outlives the session."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from mlsys.grader import nbgraderfork, nbgraderrun
from mlsys.grader.slots import Slot

# nbgrader reads the nbgrader_config.py of its working folder: this one reports the process it runs in
PROBE = r'''
import json, os, time
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
json.dump({"cwd": os.getcwd(), "x": os.environ.get("MLSYS_PROBE_X"), "pid": os.getpid(), "ppid": os.getppid(), "sid": os.getsid(0),
           "cores": sorted(os.sched_getaffinity(0)), "fds": fds}, open("probe.json", "w"))
print("probe ran", flush=True)
time.sleep(float(os.environ.get("MLSYS_PROBE_SLEEP", "0")))
'''


def _course(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "nbgrader_config.py").write_text(PROBE)
    return path


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_forked_command_runs_as_a_fresh_one_would(tmp_path):
    slot = Slot(0, (0,))
    results = {}
    for route in ("fresh", "forked"):
        course = _course(tmp_path / route)
        if route == "forked":
            with nbgraderfork.session(nbgraderrun.base_env()):
                server = nbgraderfork.active()
                assert server is not None, "no fork server in the session"
                rc, out = nbgraderrun._run(["db", "student", "list"], course, 120, course / "log",
                                           env={"MLSYS_PROBE_X": route}, slot=slot)
            assert nbgraderfork.active() is None
            assert server._proc.poll() is not None, "the fork server outlived its session"
        else:
            assert nbgraderfork.active() is None
            rc, out = nbgraderrun._run(["db", "student", "list"], course, 120, course / "log",
                                       env={"MLSYS_PROBE_X": route}, slot=slot)
        results[route] = rc, out, json.loads((course / "probe.json").read_text())
    for route, (rc, out, probe) in results.items():
        assert rc == 0 and "probe ran" in out and "There are 0 students" in out, (route, rc, out[-2000:])
        assert probe["cwd"] == str(tmp_path / route) and probe["x"] == route, probe
        assert probe["sid"] == probe["pid"] and probe["pid"] != os.getpid(), "not in a session of its own"
        assert probe["cores"] == [0], probe
        assert probe["fds"]["0"] == "/dev/null" and probe["fds"]["1"] == str(tmp_path / route / "log"), probe
    assert results["fresh"][2]["ppid"] == os.getpid()
    assert results["forked"][2]["ppid"] == server._proc.pid, "the command was not forked from the session's server"
    pipes = [t for t in results["forked"][2]["fds"].values() if t.startswith("pipe:")]
    assert not pipes, f"the forked command holds the server's pipes: {results['forked'][2]['fds']}"


def test_a_failing_command_gives_the_same_exit_status_either_way(tmp_path):
    fresh = nbgraderrun._run(["db", "student", "remove", "nobody"], _course(tmp_path / "a"), 120, tmp_path / "a" / "log")
    with nbgraderfork.session(nbgraderrun.base_env()):
        forked = nbgraderrun._run(["db", "student", "remove", "nobody"], _course(tmp_path / "b"), 120, tmp_path / "b" / "log")
    assert fresh[0] == forked[0] and fresh[0] not in (0, None), (fresh, forked)
    assert "nobody" in forked[1]


def test_the_time_limit_ends_a_forked_command(tmp_path):
    course = _course(tmp_path / "slow")
    t0 = time.monotonic()
    with nbgraderfork.session(nbgraderrun.base_env()):
        rc, out = nbgraderrun._run(["db", "student", "list"], course, 5, course / "log",
                                   env={"MLSYS_PROBE_SLEEP": "120"})
    pid = json.loads((course / "probe.json").read_text())["pid"]
    assert rc is None and "probe ran" in out, (rc, out[-2000:])
    assert time.monotonic() - t0 < 60 and not _alive(pid), "the command outlived its time limit"


def test_turned_off_every_command_starts_afresh(monkeypatch):
    monkeypatch.setenv("MLSYS_GRADER_FORK_NBGRADER", "0")
    with nbgraderfork.session(nbgraderrun.base_env()):
        assert nbgraderfork.active() is None


@pytest.mark.parametrize("name", nbgraderfork.PRELOAD)
def test_every_preloaded_module_exists(name):
    """A name that no longer imports would silently cost every command its import again."""
    import importlib

    importlib.import_module(name)
