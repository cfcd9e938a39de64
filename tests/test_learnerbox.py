"""The learner's side of a performance grading in a sandbox of its own (mlsys.grader.learnerbox).

Round 4 (issue 48): the learner worker, the baseline worker and the replay worker ran in one sandbox as one
uid with one /tmp, so an answer cell could overwrite Triton's cached native module that a clean worker then
loaded, and a ``setsid`` helper escaped the pause (a killpg of the session) and stopped the baseline. These
tests start a learner box as the grader does and look at it from the clean side and from the host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlsys.grader import sandbox
from mlsys.grader.clean import perfwire
from mlsys.grader.learnerbox import LearnerClient, LearnerHost

pytestmark = pytest.mark.slow  # each starts a sandboxed torch: ~5 CPU-seconds


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    try:
        sandbox.check()
    except sandbox.SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap cannot run here: {exc}")
    return sandbox.build_site(tmp_path_factory.mktemp("site"))


# an answer cell: poisons every cache it can reach, and starts a helper outside its session that counts
POISON = r'''
import os, time
for d in ("/tmp/triton", os.environ["TRITON_CACHE_DIR"], os.path.expanduser("~/.triton/cache"), "/tmp/inductor",
          os.environ["XDG_CACHE_HOME"], "/tmp"):
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "cuda_utils.so"), "wb").write(b"learner")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        n = 0
        while True:
            n += 1
            open(os.path.expanduser("~/count.tmp"), "w").write(str(n))
            os.replace(os.path.expanduser("~/count.tmp"), os.path.expanduser("~/count"))
            time.sleep(0.005)
    os._exit(0)
'''

CLEAN_VIEW = r'''
import json, os
seen = {}
for d in ("/tmp/triton", os.environ["TRITON_CACHE_DIR"], os.path.expanduser("~/.triton/cache"), "/tmp/inductor",
          os.environ["XDG_CACHE_HOME"], "/tmp"):
    seen[d] = os.path.exists(os.path.join(d, "cuda_utils.so"))
procs = []
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            procs.append(open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode())
        except OSError:
            pass
print(json.dumps({"poisoned": seen, "procs": procs, "uid": os.getuid()}))
'''


def _count(scratch: Path) -> int:
    try:
        return int((scratch / "count").read_text() or 0)
    except (OSError, ValueError):
        return 0


def test_the_learner_box_shares_no_cache_no_tmp_and_no_process_with_the_clean_side_and_freezes_whole(tmp_path, site):
    scratch = tmp_path / "learner"
    scratch.mkdir()
    host = LearnerHost({"mode": "bwrap", "site": str(site), "perf": "fake"}, scratch, tmp_path / "learner.log")
    host.start()
    client = LearnerClient(os.dup(host.verdict_fd()))
    try:
        box, ends = client.start(1, fake=True)
        w, r, _region = ends[0]
        perfwire.send(w, {"op": "setup", "cells": [POISON], "fake": True})
        head, _ = perfwire.recv(r, time.monotonic() + 240)
        assert head.get("notes") == [], head  # the cell ran without an error
        deadline = time.monotonic() + 30
        while _count(scratch) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _count(scratch) >= 5, "the learner's setsid helper never ran"

        # the clean side: another user, its own /tmp and caches, its own PID namespace
        clean = tmp_path / "clean"
        clean.mkdir()
        sandbox.own_scratch(clean, sandbox.CLEAN_UID)
        argv = sandbox.command([sys.executable, "-c", CLEAN_VIEW], clean, site, uid=sandbox.CLEAN_UID)
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=clean)
        view = json.loads(out.stdout.strip().splitlines()[-1])
        assert not any(view["poisoned"].values()), view["poisoned"]
        assert not any("perfworker" in p for p in view["procs"]), view["procs"]
        if os.geteuid() == 0:
            assert view["uid"] == sandbox.CLEAN_UID != sandbox.SANDBOX_UID

        # paused as a whole: the helper outside the worker's session stops counting, and resumes after
        how = client.pause(box, True)
        assert how in ("cgroup", "signals")
        time.sleep(0.1)
        frozen_at = _count(scratch)
        time.sleep(0.5)
        assert _count(scratch) == frozen_at, f"a setsid child kept running while the box was paused ({how})"
        client.pause(box, False)
        time.sleep(0.5)
        assert _count(scratch) > frozen_at, "the box did not resume"
        client.kill(box)
    finally:
        host.close()
