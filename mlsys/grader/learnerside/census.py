"""Which processes are alive in the sandbox while the grader runs test cells: work done elsewhere, seen from outside.

The op record of a checked call is made in the learner's process, so work handed to *another* process (a
pool or a server started by an answer cell, a child forked inside the call) is in no record. The grader
(:mod:`mlsys.grader.learnerside.cellrunner`) cannot stop that, but it can see it: the sandbox has a PID namespace of its
own, so ``/proc`` lists every process the submission started, and no code of the learner's can take a live
process off that list. :class:`Census` polls it every :data:`POLL_S` seconds from a thread of the grader.

While a test cell runs in the grader (and until the kernel runs its next cell), the processes that may be
alive are:

* the sandbox's init (PID 1), the grader, its ancestors and its own children (the kernel among them, or the
  template a forked kernel comes from: :mod:`mlsys.grader.learnerside.kernelfork`), and the kernel;
* the kernel's children born during that test cell (the checks' own: the guarded call's child on a CPU,
  Lab 4's ranks), and never their children;
* compilers a Triton kernel's build runs (``ptxas``, ``gcc``...; identified by the executable itself, a link
  the kernel sets, not by a name the process gives itself).

torch.compile's compile workers are not on that list: a process's arguments are the learner's to write
(``python helper.py torch/_inductor/compile_worker/__main__.py``), and a real compile worker runs whatever
its parent sends it. A sandbox sets ``TORCHINDUCTOR_COMPILE_THREADS=1`` (:func:`mlsys.grader.sandbox.command`),
so torch.compile compiles in the learner's own process and honest work starts no such process at all.

Anything else (a kernel child that was already alive when the test cell started, a grandchild, an
orphan re-parented to PID 1) alive at two looks in a row is a **stranger**, reported once with its
parent and command line; ``make
grade`` turns it into a ``process`` flag. Processes alive only between two polls of a call made in the
kernel itself can be missed; making one takes an import the static audit flags (``os``,
``multiprocessing``, ``torch.multiprocessing``...). While the kernel runs a cell nothing is judged: course
cells may start processes (Lab 4's demonstrations).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["POLL_S", "TOOLCHAIN", "Census", "Proc", "processes"]

POLL_S = 0.1
"""Seconds between two looks at ``/proc`` (each costs well under a millisecond in a sandbox of ten processes)."""

TOOLCHAIN = frozenset({"ptxas", "gcc", "cc", "cc1", "cc1plus", "as", "ld", "ld.bfd", "ld.gold", "collect2", "clang",
                       "ldconfig", "ldconfig.real", "nvdisasm", "cuobjdump"})
"""Executables a Triton kernel's build (or ``ctypes.util.find_library``) runs: they run no learner code."""

@dataclass(frozen=True)
class Proc:
    """One live process: its PID, its parent's, its executable (``""`` where it cannot be read) and arguments."""

    pid: int
    ppid: int
    exe: str
    argv: tuple[str, ...]

    @property
    def cmd(self) -> str:
        return " ".join(self.argv)


def processes(proc: Path = Path("/proc")) -> dict[int, Proc]:
    """Every live (not zombie) process in ``proc``'s PID namespace, by PID."""
    out: dict[int, Proc] = {}
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            state, ppid = stat[stat.rindex(")") + 2:].split()[:2]  # the command name may hold spaces and ')'
            if state in ("Z", "X"):
                continue
            argv = tuple(a.decode("utf-8", "replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a)
        except (OSError, ValueError):
            continue  # it ended while we looked
        try:
            exe = os.readlink(entry / "exe")
        except OSError:
            exe = ""  # not ours to read (made non-dumpable): never taken for a compiler
        out[int(entry.name)] = Proc(int(entry.name), int(ppid), exe, argv)
    return out


def _harmless(p: Proc) -> bool:
    """A compiler: identified by the executable that runs (``/proc/<pid>/exe``), never by its arguments."""
    return os.path.basename(p.exe.removesuffix(" (deleted)")) in TOOLCHAIN


def _ancestors(pid: int, procs: dict[int, Proc]) -> set[int]:
    seen: set[int] = set()
    while pid in procs and pid not in seen:
        seen.add(pid)
        pid = procs[pid].ppid
    return seen


class Census:
    """Polls ``/proc`` in a thread; :meth:`test` and :meth:`cell` say what the grader is doing.

    ``report(proc, test)`` is called once per stranger (see the module doc), from the polling thread."""

    def __init__(self, report: Callable[[Proc, str], None], proc: Path = Path("/proc"), poll_s: float = POLL_S) -> None:
        self.report, self.proc, self.poll_s = report, proc, poll_s
        self.me = os.getpid()
        self.kernel: int | None = None
        self._test: str | None = None
        self._before: set[int] = set()  # the kernel's children when the test cell started
        self._reported: set[int] = set()
        self._pending: set[int] = set()  # strangers seen at the last look
        self._lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="census", daemon=True)

    def start(self) -> Census:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped = True
        self._thread.join(timeout=5)

    def test(self, grade_id: str, kernel: int | None) -> None:
        """The grader starts test cell ``grade_id``; ``kernel``: the learner's kernel's PID. A kernel child alive
        now was not started by this cell's checks (theirs end before their call returns)."""
        with self._lock:
            self.kernel = kernel
            self._before = {p.pid for p in processes(self.proc).values() if p.ppid == kernel}
            self._test = grade_id
        self.look()

    def cell(self) -> None:
        """The kernel runs a cell: nothing is judged until the next test cell."""
        self.look()  # what ran since the last poll
        with self._lock:
            self._test = None

    def look(self) -> None:
        """One poll: report the strangers alive now (while a test cell is being graded)."""
        with self._lock:
            test, kernel, before = self._test, self.kernel, set(self._before)
        if test is None:
            return
        procs = processes(self.proc)
        allowed = _ancestors(self.me, procs) | {1} | ({kernel} if kernel is not None else set())  # a forked kernel's
        # parent is the template (mlsys.grader.learnerside.kernelfork), a child of the grader
        seen: set[int] = set()
        for p in procs.values():
            if p.pid in allowed or p.pid in self._reported or p.ppid == self.me or _harmless(p):
                continue
            if kernel is not None and p.ppid == kernel and p.pid not in before:
                continue  # started by a check of this test cell
            seen.add(p.pid)
            if p.pid in self._pending:  # alive at two looks in a row: not a check's child on its way out
                self._reported.add(p.pid)
                self.report(p, test)
        self._pending = seen

    def _run(self) -> None:
        while not self._stopped:
            time.sleep(self.poll_s)
            try:
                self.look()
            except Exception:  # noqa: BLE001 - the census is evidence for a person; it never stops grading
                continue
