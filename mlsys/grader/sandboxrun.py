"""Run one of the grader's processes in a sandbox and collect its result lines: the learner's notebook
(:mod:`mlsys.grader.learnerside.cellrunner`) or the verdict process (:mod:`mlsys.grader.decide.trusted`) with its learner sandbox.

Needs no nbgrader: the nbgrader step (:mod:`mlsys.grader.sandboxed_execute`) and the GPU checks of the trust
boundaries (``scripts/gpu/grader_boundaries.py``, on a machine without nbgrader) both call it.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from mlsys.grader import sandbox
from mlsys.runtime.processes import kill_tree

__all__ = ["run_in_sandbox", "run_verdict"]


def _kill(proc: subprocess.Popen) -> None:
    kill_tree(proc.pid)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


def run_in_sandbox(module: str, job: dict[str, Any], scratch: Path, settings: dict[str, Any], *,
                   deadline: float, log: Path, on_result: Any = None, uid: int = sandbox.SANDBOX_UID,
                   pass_fds: tuple[int, ...] = (), args: tuple[str, ...] = ()) -> tuple[list[dict[str, Any]], str]:
    """Run ``python -P -m module *args`` on ``job`` in a sandbox over ``scratch``; collect its result lines.

    Returns (results, how it ended: "done" | "timeout" | "exited"). ``on_result`` is called with each
    result as it arrives. Lines count only with this run's random nonce, read from the process's
    private output (see :mod:`mlsys.grader.learnerside.cellrunner`). ``uid`` runs it as the learner
    (:data:`~mlsys.grader.sandbox.SANDBOX_UID`) or as the grader's clean side
    (:data:`~mlsys.grader.sandbox.CLEAN_UID`); ``pass_fds`` are inherited.
    """
    nonce = secrets.token_hex(16)
    argv = [sys.executable, "-P", "-m", module, *args]
    env = None
    cgroup = None
    if settings.get("mode") == "bwrap":
        limits = sandbox.Limits(**settings.get("limits", {}))
        cgroup = sandbox.Cgroup.create(limits)  # tasks and memory capped for the whole sandbox (None: a note says why)
        sandbox.own_scratch(scratch, uid)  # a root grader's sandboxed process is an unprivileged user: its folder is its own
        argv = sandbox.command(argv, scratch, Path(settings["site"]), limits=limits, cgroup=cgroup, uid=uid,
                               gpu=bool(settings.get("gpu")) or settings.get("perf") == "cuda")
    else:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLSYS_SANDBOX")}
        env.update(PYTHONPATH=settings["site"], HOME=str(scratch), MPLBACKEND="Agg", PYTHONHASHSEED="0")
    try:
        return _collect(argv, env, job, nonce, scratch, module, deadline, log, on_result, pass_fds)
    finally:
        if cgroup is not None:
            cgroup.close()  # whatever is left in it is killed, and it is removed


def _collect(argv: list[str], env: dict[str, str] | None, job: dict[str, Any], nonce: str, scratch: Path, module: str,
             deadline: float, log: Path, on_result: Any, pass_fds: tuple[int, ...] = ()) -> tuple[list[dict[str, Any]], str]:
    """Start the sandboxed process, send its job, collect its nonce-marked result lines until done."""
    with open(log, "ab") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=scratch,
                                env=env, start_new_session=True, pass_fds=pass_fds)
    lines: queue.Queue = queue.Queue()

    def reader() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            text = raw.decode("utf-8", "replace")
            if text.startswith(nonce + " "):
                try:
                    lines.put(json.loads(text[len(nonce) + 1:]))
                except ValueError:
                    continue
        lines.put(None)

    threading.Thread(target=reader, daemon=True).start()
    try:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(dict(job, nonce=nonce)).encode())
        proc.stdin.close()
    except OSError:
        pass
    results: list[dict[str, Any]] = []
    ended = "exited"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            ended = "timeout"
            break
        try:
            item = lines.get(timeout=remaining)
        except queue.Empty:
            ended = "timeout"
            break
        if item is None:
            break
        results.append(item)
        if on_result is not None:
            on_result(item)
        if item.get("done") or module.endswith("trusted"):
            ended = "done"
            break
    _kill(proc)  # whatever the sandbox still runs (detached processes included) ends here
    return results, ended


def run_verdict(job: dict[str, Any], work: Path, root: Path, settings: dict[str, Any],
                deadline: float) -> tuple[list[dict[str, Any]], str]:
    """The verdict process (:mod:`mlsys.grader.decide.trusted`) on ``job``, over the submission's files ``work``.

    In a sandbox (``mode`` "bwrap"), the verdict and its clean workers run as the grader's clean user over an
    empty folder of their own, and the learner's workers in sandboxes of their own over ``work``, started
    for the verdict by a :class:`~mlsys.grader.learnerbox.LearnerHost` here: the two sides share no uid,
    no writable folder, no compiler cache and no PID namespace. Without a sandbox, as before: one folder,
    the learner's workers started by the verdict."""
    if settings.get("mode") != "bwrap":
        return run_in_sandbox("mlsys.grader.decide.trusted", job, work, settings, deadline=deadline, log=root / "trusted.log")
    from mlsys.grader.learnerbox import LearnerHost

    clean = root / "verdict"
    clean.mkdir(parents=True, exist_ok=True)
    host = LearnerHost(settings, work, root / "learner.log")
    host.start()
    try:
        return run_in_sandbox("mlsys.grader.decide.trusted", dict(job, learner_host_fd=host.verdict_fd()), clean, settings,
                              deadline=deadline, log=root / "trusted.log", uid=sandbox.CLEAN_UID,
                              pass_fds=(host.verdict_fd(),))
    finally:
        host.close()
