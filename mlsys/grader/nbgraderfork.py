"""One nbgrader process per grading run, started once and forked for every nbgrader command of the run.

Every graded submission costs two nbgrader commands (``autograde``, then ``generate_feedback``), and each
command started afresh spends about 1.5 CPU-seconds importing nbgrader, nbconvert, SQLAlchemy and the course's
executor before it does any work: three of a tiny lab's nine CPU-seconds, 15 CPU-minutes for 300 students.
A *fork server* imports them once; each command is a fork of it that sets its own session, working folder,
environment, log, CPU cores and ``sys.argv`` and runs nbgrader's ``main``. What the command does is what
``python -m nbgrader ARGS`` does: the same code, the same configuration read from its working folder.

The server is the grader's own process: it never runs learner code (that runs in sandboxes the commands
start, as before) and it holds nothing of any submission, so a fork of it starts as clean as a fresh
process. It stays single-threaded (it refuses to start if an import started a thread) because only a
single-threaded process forks safely.

Protocol (one JSON object per line): the grader writes ``{"id", "args", "cwd", "env", "log", "cores"}``;
the server answers ``{"id", "pid"}`` once forked and ``{"pid", "rc"}`` when that command ends (``rc`` as
:attr:`subprocess.Popen.returncode`: negative for a signal).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PRELOAD = ("nbgrader.apps.nbgraderapp", "nbgrader.apps.autogradeapp", "nbgrader.apps.generatefeedbackapp",
           "nbgrader.converters.autograde", "nbgrader.converters.generate_feedback", "nbgrader.api",
           "nbconvert.exporters.html", "jupyter_client.manager", "mlsys.grader.sandboxed_execute")
"""What every command imports anyway: imported once, by the server (a module missing here is imported by the
command that needs it, as before)."""


class ForkServer:
    """The grader's side: starts the server, forks commands through it, waits for them (thread-safe)."""

    def __init__(self, env: dict[str, str]) -> None:
        self._proc = subprocess.Popen([sys.executable, "-P", "-m", "mlsys.grader.nbgraderfork"], env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      start_new_session=True)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._out, self._in = self._proc.stdin, self._proc.stdout
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._pids: dict[int, int] = {}  # request id -> pid
        self._rcs: dict[int, int] = {}  # pid -> return code
        self._next = 0
        self._alive = self._in.readline().strip() == b"ready"
        threading.Thread(target=self._read, daemon=True, name="nbgraderfork-replies").start()

    @property
    def alive(self) -> bool:
        with self._lock:
            return self._alive

    def _read(self) -> None:
        for line in self._in:
            msg = json.loads(line)
            with self._cond:
                if "rc" in msg:
                    self._rcs[msg["pid"]] = msg["rc"]
                else:
                    self._pids[msg["id"]] = msg["pid"]
                self._cond.notify_all()
        with self._cond:
            self._alive = False
            self._cond.notify_all()

    def spawn(self, args: list[str], cwd: Path, env: dict[str, str], log: Path, cores: list[int] | None) -> int:
        """Fork ``nbgrader ARGS`` (run in ``cwd`` with exactly ``env``, output appended to ``log``, pinned to
        ``cores``); its pid. Raises :class:`OSError` if the server has ended."""
        request = {"args": args, "cwd": str(cwd), "env": env, "log": str(log), "cores": cores}
        with self._cond:
            if not self._alive:
                raise OSError("the nbgrader fork server has ended")
            self._next += 1
            rid = request["id"] = self._next
            self._out.write(json.dumps(request).encode() + b"\n")
            self._out.flush()
            self._cond.wait_for(lambda: rid in self._pids or not self._alive)
            if rid not in self._pids:
                raise OSError("the nbgrader fork server ended before forking")
            return self._pids.pop(rid)

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """``pid``'s return code, or ``None`` if it is still running after ``timeout`` seconds (or the server
        ended: its commands are then ended by :func:`~mlsys.runtime.processes.kill_tree`)."""
        with self._cond:
            self._cond.wait_for(lambda: pid in self._rcs or not self._alive, timeout)
            return self._rcs.pop(pid, None)

    def close(self) -> None:
        """End the server (the commands it forked were waited for by their callers)."""
        with contextlib.suppress(OSError):
            self._out.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


_ACTIVE: list[ForkServer] = []
_ACTIVE_LOCK = threading.Lock()


@contextlib.contextmanager
def session(env: dict[str, str]) -> Iterator[None]:
    """Within it, nbgrader commands of this process fork from one server started with ``env`` (nested sessions
    share the outer one). ``MLSYS_GRADER_FORK_NBGRADER=0`` turns it off: every command starts afresh."""
    if _ACTIVE or os.environ.get("MLSYS_GRADER_FORK_NBGRADER") == "0":
        yield
        return
    server = ForkServer(env)
    with _ACTIVE_LOCK:
        _ACTIVE.append(server)
    try:
        yield
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.remove(server)
        server.close()


def active() -> ForkServer | None:
    """The server of the session this process is in, if it is running."""
    with _ACTIVE_LOCK:
        server = _ACTIVE[0] if _ACTIVE else None
    return server if server is not None and server.alive else None


# ------------------------------------------------------------------------------ the server's side


def _command(request: dict[str, Any]) -> int:
    """In the fork: become ``python -m nbgrader ARGS`` run as the request says; its exit status."""
    os.setsid()
    fd = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    limit = os.sysconf("SC_OPEN_MAX")
    os.closerange(3, limit if limit > 0 else 4096)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if request.get("cores"):
        os.sched_setaffinity(0, request["cores"])
    sys.argv = ["nbgrader", *request["args"]]
    sys.path.insert(0, request["cwd"])  # as ``python -m`` puts its working folder first
    from nbgrader.apps.nbgraderapp import main

    try:
        main()
        return 0
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)


def _fork(request: dict[str, Any]) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.set_wakeup_fd(-1)  # the server's wake-up on its children's ends is not the command's
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            code = _command(request)
        except BaseException:  # noqa: BLE001 - the command's own traceback, to its log, as Python would print it
            import traceback

            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    return pid


def _reply(msg: dict[str, Any]) -> None:
    os.write(1, json.dumps(msg).encode() + b"\n")


def serve() -> None:
    """Import nbgrader once, then fork a command per request until the grader closes the pipe; a command's end
    (SIGCHLD, through a wake-up pipe) is answered as soon as it happens."""
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    if threading.active_count() != 1:  # forking a threaded process is unsafe: the grader starts commands afresh
        return
    wake, wake_w = os.pipe()
    for fd in (wake, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to be woken: the loop below reaps
    os.write(1, b"ready\n")
    children: set[int] = set()
    buf, closed = b"", False
    while not closed or children:
        ready, _, _ = select.select(([] if closed else [0]) + [wake], [], [])
        if wake in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake, 1 << 12)
        if 0 in ready:
            chunk = os.read(0, 1 << 16)
            closed, buf = not chunk, buf + chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                request = json.loads(line)
                children.add(pid := _fork(request))
                _reply({"id": request["id"], "pid": pid})
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                _reply({"pid": pid, "rc": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve()
