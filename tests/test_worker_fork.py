"""A clean worker forked from the verdict process (mlsys.grader.decide.perfboxes._Forked): on a CPU grader with the
fake timer, the baseline and replay workers are forks of the verdict after its ``import torch`` (about 2 CPU-s saved a
grading), holding nothing of the verdict's open files but their pipes and the shared region; the learner's worker is
never forked from it."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlsys.grader.clean import workerfork

REPO = Path(__file__).resolve().parents[1]

# Run in a fresh process (as the verdict runs): a fork of a test worker would copy its threads' locks.
# A file the "verdict" holds open stands for its private result descriptor: the worker must not hold it.
PROBE = r'''
import json, os, sys, time
from mlsys.grader.decide import perfboxes
secret = os.open(sys.argv[1], os.O_RDONLY)
out = {}
for role in ("baseline", "learner"):
    w = perfboxes._ProcWorker(role, fake=True)
    w.send({"op": "setup", "cells": [], "fake": True})
    head, _ = w.recv(time.monotonic() + 120)
    fds = {}
    for fd in os.listdir(f"/proc/{w.proc.pid}/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/{w.proc.pid}/fd/{fd}")
        except OSError:
            pass
    cmd = open(f"/proc/{w.proc.pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    out[role] = {"device": head.get("device"), "fds": fds, "cmd": cmd, "forked": type(w.proc).__name__ == "_Forked"}
    w.close()
print(json.dumps(out))
'''


def _probe(tmp_path: Path, **env: str) -> dict:
    secret = tmp_path / "verdict-private.txt"
    secret.write_text("the verdict's own file")
    proc = subprocess.run([sys.executable, "-P", "-c", PROBE, str(secret)], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]) | {"secret": str(secret)}


@pytest.mark.slow  # two workers and a verdict: ~5 s of CPU
def test_a_forked_baseline_answers_and_holds_only_its_pipes_and_region(tmp_path):
    got = _probe(tmp_path)
    base, learner = got["baseline"], got["learner"]
    if glob.glob("/dev/nvidia*"):  # a GPU machine: CUDA does not survive a fork, every worker starts afresh
        assert not base["forked"] and "perfworker baseline" in base["cmd"], base
        return
    assert base["forked"] and base["device"] == "cpu", base
    assert "perfworker" not in base["cmd"], base["cmd"]  # a fork of the verdict, not a fresh interpreter
    # 0 and 1 are /dev/null (perfworker.main moves the pipes off them), 2 /dev/null, then the pipes and the region
    assert got["secret"] not in base["fds"].values(), base["fds"]
    kinds = sorted(t.split(":")[0] if ":" in t else t for t in base["fds"].values())
    assert kinds.count("pipe") == 2 and all(k in ("pipe", "/dev/null") or "memfd" in k for k in kinds), kinds
    # the learner's worker is always a fresh interpreter
    assert not learner["forked"] and "perfworker learner" in learner["cmd"], learner


@pytest.mark.slow
def test_forking_can_be_turned_off_and_never_happens_without_the_fake_timer(tmp_path, monkeypatch):
    got = _probe(tmp_path, **{workerfork.FORK_ENV: "0"})
    assert not got["baseline"]["forked"] and "perfworker baseline" in got["baseline"]["cmd"], got["baseline"]
    monkeypatch.delenv(workerfork.FORK_ENV, raising=False)
    assert workerfork.may_fork(False) is False  # a real timer: on a GPU machine CUDA does not survive a fork
    monkeypatch.setenv(workerfork.FORK_ENV, "0")
    assert workerfork.may_fork(True) is False


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.slow  # a launcher and two learner workers: ~4 s of CPU
@pytest.mark.parametrize("fork", ["1", "0"])
def test_the_ranks_launcher_forks_each_learner_worker_holding_only_its_own_pipes(fork):
    """The ranks launcher (``mlsys.grader.clean.ranks``) with two ranks (as the learner's sandbox starts Lab 4's): each worker answers on its own
    pipes; forked from the launcher on a CPU grader with the fake timer, it holds neither the other rank's pipes nor
    anything else of the launcher's; turned off (or on a GPU machine), each is a fresh interpreter."""
    import select

    from mlsys.grader.clean import perfwire

    ends, keep, spec = [], [], []
    for _ in range(2):
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        ends.append((to_w, from_r))
        keep += [to_r, from_w]
        spec.append(f"{to_r}:{from_w}:-1")
    proc = subprocess.Popen([sys.executable, "-P", "-m", "mlsys.grader.clean.ranks", ",".join(spec), "--fake"],
                            pass_fds=keep, cwd=REPO, env={**os.environ, workerfork.FORK_ENV: fork}, stderr=subprocess.DEVNULL)
    for fd in keep:
        os.close(fd)
    try:
        for to_w, from_r in ends:
            perfwire.send(to_w, {"op": "setup", "cells": ["x = 1"], "fake": True})
            assert select.select([from_r], [], [], 240)[0], "a worker did not answer"
            head, _ = perfwire.recv(from_r)
            assert head.get("device") == "cpu" and not head.get("notes"), head
        workers = _children(proc.pid)
        assert len(workers) == 2, workers
        forked = fork == "1" and not glob.glob("/dev/nvidia*")
        for pid in workers:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            assert ("clean.ranks" in cmd) == forked and ("perfworker learner" in cmd) == (not forked), cmd
            pipes = [t for t in (os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd"))
                     if t.startswith("pipe:")]
            assert len(pipes) == 2, f"worker {pid} holds {pipes}: its two pipes and nothing of the other rank's"
    finally:
        for to_w, _ in ends:
            perfwire.send(to_w, {"op": "exit"})
    assert proc.wait(timeout=60) == 0
