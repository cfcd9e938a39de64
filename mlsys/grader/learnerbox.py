"""The learner's side of a performance grading: a sandbox of its own, another user, spoken to over pipes.

Trust boundaries are process and user boundaries (``docs/GRADING_PERFORMANCE.md``). The verdict
process (:mod:`mlsys.grader.decide.trusted`) and its clean workers (baseline, replay) run in one sandbox as
:data:`~mlsys.grader.sandbox.CLEAN_UID`; the learner's workers, which execute the answer cells, run in
another sandbox (:func:`mlsys.grader.sandbox.command`) as :data:`~mlsys.grader.sandbox.SANDBOX_UID`, with
their own ``/tmp``, ``HOME`` (the submission's files), compiler caches and PID namespace, in a cgroup of
their own. Nothing is shared but the pipes of :mod:`mlsys.grader.clean.perfwire` and, per worker, a sealed
memory region for outputs. So a learner's process cannot signal or trace a clean worker (another uid,
another PID namespace: it cannot even name it), and nothing it writes (a Triton cache module, a file in
``/tmp``) is in a file system a clean worker reads.

The verdict process cannot start a sandbox (it has no privileges), so the grader's host process, which
started both sandboxes, does it for it: :class:`LearnerHost` serves requests on a Unix socket whose other
end the verdict sandbox inherits, and answers with the new workers' pipe ends passed as file descriptors
(``SCM_RIGHTS``). Requests, one JSON line each; answers, one JSON line (with descriptors for ``start``):

- ``{"op": "start", "world": n, "fake": bool}`` -> ``{"box": id, "ranks": n}`` and, per rank, three
  descriptors: the worker's standard input (to write), its standard output (to read), its output region;
- ``{"op": "pause", "box": id, "stop": bool}`` -> ``{"paused": bool, "how": "cgroup" | "signals"}``: the box's
  cgroup frozen or thawed (every process in it, a ``setsid`` child included); where no freezer exists,
  SIGSTOP / SIGCONT of every process below the sandbox (its PID namespace is below it: a process cannot
  leave it);
- ``{"op": "kill", "box": id}`` -> ``{"killed": true}``.

:class:`LearnerClient` is the verdict's end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlsys.grader import sandbox

__all__ = ["LearnerHost", "LearnerClient", "SHARED_BYTES", "shared_region", "FD_ENV"]

SHARED_BYTES = 8 << 30
"""Size of the shared region a worker writes a round's outputs into (sparse: pages exist once written)."""

FD_ENV = "MLSYS_LEARNER_HOST_FD"
"""Where the verdict process finds its end of the host's socket (a descriptor number)."""


def shared_region() -> int | None:
    """A sealed memfd of :data:`SHARED_BYTES` (Linux), or None (outputs then cross the pipe).

    Sealed against shrinking and growing, so a worker cannot truncate it under the verdict's reads."""
    try:
        import fcntl

        fd = os.memfd_create("mlsys-perf-outputs", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, SHARED_BYTES)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        return fd
    except (AttributeError, OSError, ValueError):
        return None


@dataclass
class _Box:
    proc: subprocess.Popen
    cgroup: sandbox.Cgroup | None
    stopped: list[int] = field(default_factory=list)


class LearnerHost:
    """The grader's host-side server of learner sandboxes for one verdict process (see the module doc)."""

    def __init__(self, settings: dict[str, Any], scratch: Path, log: Path) -> None:
        self.settings, self.scratch, self.log = settings, Path(scratch), Path(log)
        self.mine, self.theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.boxes: dict[int, _Box] = {}
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def verdict_fd(self) -> int:
        """The descriptor the verdict sandbox inherits (then closed here once it has started)."""
        return self.theirs.fileno()

    def start(self) -> None:
        self.thread.start()

    def _serve(self) -> None:
        reader = self.mine.makefile("rb")
        for raw in reader:
            try:
                req = json.loads(raw)
                op = req.get("op")
                if op == "start":
                    self._start_box(int(req.get("world") or 1), bool(req.get("fake")))
                    continue
                box = self.boxes.get(int(req.get("box", -1)))
                if box is None:
                    answer: dict[str, Any] = {"error": f"no learner box {req.get('box')!r}"}
                elif op == "pause":
                    answer = {"paused": bool(req.get("stop")), "how": self._pause(box, bool(req.get("stop")))}
                elif op == "kill":
                    self._kill(box)
                    answer = {"killed": True}
                else:
                    answer = {"error": f"unknown op {op!r}"}
            except (ValueError, TypeError, OSError) as exc:
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            self.mine.sendall((json.dumps(answer) + "\n").encode())

    def _start_box(self, world: int, fake: bool) -> None:
        world = max(1, min(world, 16))
        keep: list[int] = []  # inherited by the sandbox
        give: list[int] = []  # passed over the socket to the verdict (a region is in both lists)
        specs = []
        for _ in range(world):
            to_r, to_w = os.pipe()
            from_r, from_w = os.pipe()
            shm = shared_region()
            keep += [to_r, from_w] + ([shm] if shm is not None else [])
            give += [to_w, from_r, shm if shm is not None else os.open(os.devnull, os.O_RDONLY)]
            specs.append(f"{to_r}:{from_w}:{shm if shm is not None else -1}")
        argv = [sys.executable, "-P", "-m", "mlsys.grader.clean.ranks", ",".join(specs)] + (["--fake"] if fake else [])
        limits = sandbox.Limits(**self.settings.get("limits", {}))
        cgroup = sandbox.Cgroup.create(limits)
        sandbox.own_scratch(self.scratch)
        argv = sandbox.command(argv, self.scratch, Path(self.settings["site"]), limits=limits, cgroup=cgroup,
                               gpu=bool(self.settings.get("gpu")) or self.settings.get("perf") == "cuda")
        with open(self.log, "ab") as err:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                    cwd=self.scratch, pass_fds=keep, start_new_session=True)
        for fd in set(keep) - set(give):
            os.close(fd)
        with self.lock:
            bid = len(self.boxes) + 1
            self.boxes[bid] = _Box(proc, cgroup)
        socket.send_fds(self.mine, [(json.dumps({"box": bid, "ranks": world}) + "\n").encode()], give)
        for fd in give:
            os.close(fd)

    def _pause(self, box: _Box, stop: bool) -> str:
        if box.cgroup is not None and box.cgroup.freeze(stop):
            return "cgroup"
        # no freezer: every process below the sandbox (its PID namespace, and so every process the learner
        # started, setsid or not, is below it), stopped until the set stops growing
        from mlsys.runtime.processes import descendants

        if not stop:
            for pid in box.stopped:
                _signal(pid, signal.SIGCONT)
            box.stopped = []
            return "signals"
        for _ in range(10):
            new = [p for p in descendants(box.proc.pid) if p not in box.stopped]
            if not new:
                break
            for pid in new:
                _signal(pid, signal.SIGSTOP)
            box.stopped += new
        return "signals"

    def _kill(self, box: _Box) -> None:
        from mlsys.runtime.processes import kill_tree

        if box.cgroup is not None:
            box.cgroup.close()  # thawed, then every process in it killed
            box.cgroup = None
        kill_tree(box.proc.pid)
        try:
            box.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        """Kill every learner box and close the socket."""
        for box in list(self.boxes.values()):
            self._kill(box)
        try:
            self.mine.shutdown(socket.SHUT_RDWR)  # the serving thread reads its end of file and ends
        except OSError:
            pass
        self.thread.join(5) if self.thread.is_alive() else None
        for s in (self.mine, self.theirs):
            try:
                s.close()
            except OSError:
                pass


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


class LearnerClient:
    """The verdict's end of :class:`LearnerHost`'s socket (inherited as descriptor ``fd``)."""

    def __init__(self, fd: int) -> None:
        self.sock = socket.socket(fileno=fd)
        self.lock = threading.Lock()

    def _ask(self, req: dict[str, Any], nfds: int = 0) -> tuple[dict[str, Any], list[int]]:
        with self.lock:
            self.sock.sendall((json.dumps(req) + "\n").encode())
            buf, fds = b"", []
            while not buf.endswith(b"\n"):
                data, got, _flags, _addr = socket.recv_fds(self.sock, 1 << 16, max(nfds, 1))
                if not data:
                    raise ConnectionError("the grader's learner host closed its socket")
                buf += data
                fds += got
        return json.loads(buf), fds

    def start(self, world: int, fake: bool) -> tuple[int, list[tuple[int, int, int]]]:
        """A new learner sandbox of ``world`` workers: (box id, per rank (write fd, read fd, region fd))."""
        head, fds = self._ask({"op": "start", "world": world, "fake": fake}, 3 * world)
        if "box" not in head or len(fds) != 3 * world:
            raise RuntimeError(f"the grader could not start the learner's sandbox: {head.get('error') or head}")
        return int(head["box"]), [(fds[3 * r], fds[3 * r + 1], fds[3 * r + 2]) for r in range(world)]

    def pause(self, box: int, stop: bool) -> str:
        head, _ = self._ask({"op": "pause", "box": box, "stop": stop})
        return str(head.get("how", ""))

    def kill(self, box: int) -> None:
        self._ask({"op": "kill", "box": box})
