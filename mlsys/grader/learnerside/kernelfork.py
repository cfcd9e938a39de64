"""The learner's kernel forked from a process that imported torch before it read anything of the grading.

A kernel started afresh imports torch again, after the cell runner imported it for the test cells: about 2
CPU-seconds of every graded submission of a lab that uses torch. On a CPU grader the cell runner
(:mod:`mlsys.grader.learnerside.cellrunner`) instead imports the modules the course's imports name (only those of
:data:`PRELOADABLE`) at its very start, **before it reads its job** (the hidden tests, the nonce, the course's
cells), and forks a :class:`Template` from itself. Each kernel the grading needs is then forked from the template:
it holds a copy of a process that has read nothing of the grading, so nothing of it is in the kernel's memory.

The template

* points its standard input, output and error at ``/dev/null`` and closes every other descriptor it inherited but
  its end of a socket to the cell runner (the job, still unread on standard input, never reaches it);
* makes itself non-dumpable, so code in a kernel (the same user) can neither ``ptrace`` it nor read its memory,
  and ignores ``SIGCHLD`` (its kernels are reaped by the system);
* forks one kernel per request (the command, environment and folder jupyter_client would start it with) and
  answers with the kernel's PID and a pidfd of it (``SCM_RIGHTS``), through which the cell runner polls, waits
  for and signals the kernel (:class:`ForkedKernel`, what :class:`subprocess.Popen` is to jupyter_client);
* exits when the cell runner's end of the socket closes.

The kernel starts a session of its own, is dumpable again, takes the request's environment, folder and
arguments, and runs ``ipykernel_launcher`` as ``python -m`` does (:func:`runpy.run_module`).

Where a kernel's start differs in what it may see, forking is off: only on a machine without an NVIDIA device (a
CUDA driver does not survive a fork) and with ``MLSYS_GRADER_FORK_KERNEL`` not ``0`` (:func:`may_fork`). A request
the template cannot serve (another interpreter, a dead template) starts the kernel as jupyter_client does.
"""

from __future__ import annotations

import atexit
import glob
import json
import os
import select
import signal
import socket
import subprocess
import sys
from typing import Any

from mlsys.runtime.processes import close_all_but, null_stdio, set_dumpable

__all__ = ["FORK_ENV", "FORK_TIMEOUT_S", "PRELOADABLE", "ForkedKernel", "Template", "manager_class", "may_fork", "preload_for"]

FORK_ENV = "MLSYS_GRADER_FORK_KERNEL"
"""``0``: start every kernel afresh, even where it could be forked (:func:`may_fork`)."""

PRELOADABLE = ("torch",)
"""Modules a cell runner may import before it forks the template: what costs seconds to import and reads nothing
of the environment that a notebook sets before importing it (Triton reads ``TRITON_INTERPRET`` and matplotlib
picks its backend at import: those are imported by the kernel itself)."""

FORK_TIMEOUT_S = 30.0
"""Seconds the cell runner waits for the template's answer before it starts the kernel as jupyter_client does."""

def may_fork() -> bool:
    """Whether kernels may be forked here: no NVIDIA device on this machine and forking not turned off."""
    return not glob.glob("/dev/nvidia*") and os.environ.get(FORK_ENV, "1") != "0"


def preload_for(course_imports: str) -> list[str]:
    """The modules of :data:`PRELOADABLE` that the course's import lines (``import torch``, ``from torch import
    nn``...) import; each line is one statement."""
    wanted = set()
    for line in course_imports.splitlines():
        words = line.replace(",", " ").split()
        if words[:1] == ["import"]:
            names = [w.split(".")[0] for w in words[1:] if w != "as"]
        elif words[:1] == ["from"] and len(words) > 1:
            names = [words[1].split(".")[0]]
        else:
            continue
        wanted.update(n for n in names if n in PRELOADABLE)
    return sorted(wanted)


class ForkedKernel:
    """A forked kernel as jupyter_client's provisioner uses a :class:`subprocess.Popen`: through a pidfd (the kernel
    is the template's child, so its exit status is not ours to read: ``returncode`` is ``-1`` once it ended)."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid, self.pidfd = pid, pidfd
        self.returncode: int | None = None

    def _ended(self, timeout: float | None) -> bool:
        if self.returncode is None and select.select([self.pidfd], [], [], timeout)[0]:
            self.returncode = -1
            os.close(self.pidfd)
        return self.returncode is not None

    def poll(self) -> int | None:
        self._ended(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout or 0)
        return -1

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            signal.pidfd_send_signal(self.pidfd, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Template:
    """The cell runner's handle on its template (module doc): :meth:`start` it before reading the job."""

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self.sock, self.pid = sock, pid

    @classmethod
    def start(cls, preload: list[str]) -> Template | None:
        """Import ``preload`` (names of :data:`PRELOADABLE` only) here, then fork the template; None where a fork
        is not possible."""
        import importlib

        for name in preload:
            if name not in PRELOADABLE:
                raise ValueError(f"preload: {name!r} is not one of {PRELOADABLE}")
            importlib.import_module(name)
        mine, theirs = socket.socketpair()
        try:
            pid = os.fork()
        except OSError:
            mine.close()
            theirs.close()
            return None
        if pid == 0:
            mine.close()
            _serve(theirs)  # never returns
        theirs.close()
        mine.set_inheritable(False)
        return cls(mine, pid)

    def fork(self, argv: list[str], env: dict[str, str] | None, cwd: str | None) -> ForkedKernel | None:
        """A kernel forked from the template for jupyter_client's command ``argv``; None where the command is not
        ``<this python> -m ipykernel_launcher ...`` or the template does not answer."""
        if len(argv) < 3 or argv[1:3] != ["-m", "ipykernel_launcher"] or \
                os.path.realpath(argv[0]) != os.path.realpath(sys.executable):
            return None
        request = {"argv": argv, "env": dict(os.environ if env is None else env), "cwd": cwd or os.getcwd()}
        try:
            self.sock.settimeout(FORK_TIMEOUT_S)  # a template stopped by a kernel of the same user: start one afresh
            self.sock.sendall(json.dumps(request).encode() + b"\n")
            msg, fds, _, _ = socket.recv_fds(self.sock, 64, 1)
        except OSError:
            return None
        if not fds:
            return None
        return ForkedKernel(int(msg.decode()), fds[0])


def _serve(sock: socket.socket) -> None:
    """The template's life: detach from everything of the cell runner's, then fork a kernel per request."""
    code = 0
    try:
        null_stdio()
        close_all_but({0, 1, 2, sock.fileno()})
        set_dumpable(False)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        for request in _requests(sock):
            pid = os.fork()
            if pid == 0:
                _become_kernel(request, sock)  # never returns
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:  # it has ended already (and been reaped): the cell runner starts one itself
                sock.sendall(b"0")
                continue
            socket.send_fds(sock, [str(pid).encode()], [pidfd])
            os.close(pidfd)
    except BaseException:  # noqa: BLE001 - the template only ever exits
        code = 1
    finally:
        os._exit(code)


def _requests(sock: socket.socket) -> Any:
    """The cell runner's requests, one JSON line each, until its end closes. Read with ``recv`` into a buffer of
    this function's: a file object over the socket would keep its descriptor open in a kernel after ``close``."""
    pending = b""
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            yield json.loads(line)


def _become_kernel(request: dict[str, Any], sock: socket.socket) -> None:
    """In a fresh fork of the template: become ``python -m ipykernel_launcher <args>`` as jupyter_client asked."""
    code: Any = 1
    try:
        sock.close()
        os.setsid()
        set_dumpable(True)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["ipykernel_launcher", *request["argv"][3:]]
        sys.orig_argv = list(request["argv"])
        import runpy

        runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def manager_class(template: Template) -> type:
    """A jupyter_client kernel manager whose kernels are forked from ``template`` (jupyter_client's own start where
    the template cannot serve the command)."""
    from jupyter_client.manager import AsyncKernelManager

    class ForkedKernelManager(AsyncKernelManager):
        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            kernel = template.fork(kernel_cmd, kw.get("env"), kw.get("cwd"))
            if kernel is None:
                await super()._async_launch_kernel(kernel_cmd, **kw)
                return
            prov: Any = self.provisioner
            prov.process, prov.pid, prov.pgid = kernel, kernel.pid, kernel.pid
            prov.cwd = kw.get("cwd") or os.getcwd()
            self._reconcile_connection_info(prov.connection_info)

    return ForkedKernelManager
