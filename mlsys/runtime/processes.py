"""Stopping a process and everything it started.

Jupyter starts kernels in a new session and nbgrader starts Jupyter, so killing the process the course
started leaves grandchildren running. :func:`kill_tree` SIGKILLs a process, its process group and every
descendant found below it (``psutil`` where installed, else ``/proc``).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

__all__ = ["close_all_but", "descendants", "kill_tree", "live_processes_with", "null_stdio", "private_stdout",
           "set_dumpable"]


def descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (children, grandchildren, ...), read from /proc where it exists."""
    try:
        import psutil

        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except Exception:  # psutil missing, or the process already gone
        pass
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid``'s process group and every descendant (jupyter starts kernels in a new session)."""
    victims = descendants(pid)
    for target in (pid, *victims):
        for kill in (os.killpg, os.kill):
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass


def live_processes_with(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains ``marker``, read from /proc: how a test
    checks that nothing a grading run started outlived it."""
    found = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if marker in (d / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace"):
                if (d / "stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    found.append(int(d.name))
        except (OSError, IndexError):
            continue
    return found


def private_stdout() -> Any:
    """This process's stdout kept to itself: a copy of fd 1 that no child inherits (returned, line-buffered), with
    fds 0-2 pointed at ``/dev/null`` and the process made non-dumpable (``PR_SET_DUMPABLE`` 0: no ``ptrace``, no
    ``/proc/<pid>/mem`` or descriptor access by a process of the same uid). The grader's processes that share a
    sandbox with learner code (the cell runner) or start workers (the verdict) write their results here."""
    fd = os.dup(1)
    os.set_inheritable(fd, False)
    null_stdio()
    set_dumpable(False)  # /proc/<pid>/fd is no longer ours to share
    return os.fdopen(fd, "w", buffering=1, encoding="utf-8")


def null_stdio() -> None:
    """Point this process's fds 0-2 at ``/dev/null``."""
    null = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(null, std)
    if null > 2:
        os.close(null)


def set_dumpable(dumpable: bool) -> None:
    """``prctl(PR_SET_DUMPABLE)``: a non-dumpable process cannot be traced, nor its ``/proc/<pid>/mem`` or descriptors
    read, by a process of the same uid without privileges (a fork keeps the setting; ``True`` gives it back)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, int(dumpable), 0, 0, 0)  # 4: PR_SET_DUMPABLE
    except Exception:  # noqa: BLE001 - not Linux: the sandbox is Linux-only anyway
        pass


def close_all_but(keep: set[int]) -> None:
    """Close every descriptor of this process but those in ``keep`` (what a forked child that must hold nothing of
    its parent's does first)."""
    prev = -1
    for fd in sorted(keep) + [os.sysconf("SC_OPEN_MAX")]:
        if fd > prev + 1:  # an empty range would close from its start to the last descriptor
            os.closerange(prev + 1, fd)
        prev = fd
