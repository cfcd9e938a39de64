"""The verdict's workers: the learner's process (here, or in a sandbox the grader's host starts), the clean
baseline and replay workers (:mod:`mlsys.grader.clean.perfworker`), groups of ranks, and the in-process
stand-in the notebook's preview uses; spoken to through :mod:`mlsys.grader.clean.perfwire`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from mlsys.grader import learnerbox
from mlsys.grader.clean.workerfork import fork_worker, may_fork

# ----------------------------------------------------------------------------------------------
# workers: the learner's process, and a clean one for the baseline


ROUND_LIMIT_S = 300.0
"""Longest a worker may take to answer one round (its compilation and autotuning on first calls included)."""

SHARED_BYTES = learnerbox.SHARED_BYTES
"""Size of the shared region a worker writes a round's outputs into (sparse: pages exist once written)."""

class _RemoteBox:
    """A learner sandbox started by the grader's host (:mod:`mlsys.grader.learnerbox`): paused by its cgroup."""

    def __init__(self, client: Any, box: int) -> None:
        self.client, self.box, self.stopped, self.dead = client, box, False, False

    def pause(self, stop: bool) -> None:
        if not self.dead and stop != self.stopped:
            self.client.pause(self.box, stop)
            self.stopped = stop

    def kill(self) -> None:
        if not self.dead:
            self.dead = True
            try:
                self.client.kill(self.box)
            except (OSError, ValueError, ConnectionError):
                pass


class _Forked:
    """A clean worker forked from the verdict process: its own session, the pipes as its standard input and
    output, nothing else of this process's open files but the shared region; then
    :func:`mlsys.grader.clean.perfworker.main` as if started with ``args`` (role and flags)."""

    def __init__(self, args: list[str], region: int | None) -> None:
        import torch  # noqa: F401 - imported once, here (the verdict needs it too), not again in the worker

        to_child, self.w = os.pipe()
        self.r, from_child = os.pipe()
        self.pid = fork_worker(args, to_child, from_child, region, own_session=True, quiet=True)
        os.close(to_child)
        os.close(from_child)

    def wait(self) -> int:
        """Reap the worker and close this side's pipe ends (as a Popen's pipes close with it); its wait status."""
        status = os.waitpid(self.pid, 0)[1]
        for fd in (self.w, self.r):
            os.close(fd)
        return status


class _ProcWorker:
    """A worker process (:mod:`mlsys.grader.clean.perfworker`) spoken to through :mod:`mlsys.grader.clean.perfwire`:
    started here (a clean worker, or a learner worker where there is no sandbox), or, given ``ends``, the
    pipes of a learner worker the grader's host started in a sandbox of its own (``box``)."""

    def __init__(self, role: str, fake: bool, ends: tuple[int, int, int] | None = None, box: _RemoteBox | None = None) -> None:
        import subprocess

        self.role, self.box, self.proc, self.shm = role, box, None, None
        if ends is not None:
            self.w, self.r, region = ends
            try:
                import mmap

                if os.fstat(region).st_size == SHARED_BYTES:
                    self.shm = (region, mmap.mmap(region, SHARED_BYTES))
            except (OSError, ValueError):
                pass
            if self.shm is None:
                os.close(region)
        else:
            argv = [sys.executable, "-P", "-m", "mlsys.grader.clean.perfworker", role] + (["--fake"] if fake else [])
            region = learnerbox.shared_region()
            if region is not None:
                import mmap

                self.shm = (region, mmap.mmap(region, SHARED_BYTES))
                argv.append(f"--shm={region}:{SHARED_BYTES}")
            if role != "learner" and may_fork(fake):
                self.proc = _Forked(argv[4:], region)
                self.w, self.r = self.proc.w, self.proc.r
            else:
                self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=subprocess.DEVNULL, start_new_session=True,
                                             pass_fds=(region,) if region is not None else ())
                self.w, self.r = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        try:  # larger pipes: outputs of tens of MiB cross in fewer, larger writes (Linux only; else as is)
            import fcntl

            for fd in (self.w, self.r):
                fcntl.fcntl(fd, 1031, 1 << 20)  # F_SETPIPE_SZ, up to /proc/sys/fs/pipe-max-size (1 MiB by default)
        except (ImportError, OSError):
            pass

    def send(self, msg: dict[str, Any], blobs: list[Any] = ()) -> None:
        from mlsys.grader.clean import perfwire

        perfwire.send(self.w, msg, blobs)

    def recv(self, deadline: float) -> tuple[dict[str, Any], list[bytes]]:
        from mlsys.grader.clean import perfwire

        return perfwire.recv(self.r, deadline)

    def pause(self, stop: bool) -> None:
        """Pause or resume the worker with everything it started, so the learner's processes sleep while
        the baseline is timed: its sandbox's cgroup frozen (a learner box), else SIGSTOP / SIGCONT of its session."""
        import signal

        if self.box is not None:
            self.box.pause(stop)
            return
        try:
            os.killpg(self.proc.pid, signal.SIGSTOP if stop else signal.SIGCONT)
        except OSError:
            pass

    def kill(self) -> None:
        """SIGKILL the worker's session without waiting (a CUDA context takes a moment to tear down: the
        verdict kills every worker first, then waits for them all in :meth:`close`)."""
        import signal

        if self.box is not None:
            self.box.kill()
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass

    def close(self) -> None:
        self.kill()
        if self.proc is not None:
            self.proc.wait()
        else:
            for fd in (self.w, self.r):
                try:
                    os.close(fd)
                except OSError:
                    pass
        if self.shm is not None:
            try:
                self.shm[1].close()
                os.close(self.shm[0])
            except (BufferError, OSError):
                pass
            self.shm = None


class _RankGroup:
    """``world`` workers of one role, one per rank of a process group, spoken to as one worker.

    A round's seeds are dealt out by call: call ``i`` of rank ``r`` gets ``seeds[i * world + r]``; the
    ranks' answers are merged back in that order (fingerprints, outputs, inputs), their op records kept
    rank by rank (``rank_ops``), their kernel traces summed. Each rank is its own process, started with
    :class:`_ProcWorker`; only this, the verdict process, sees all of them."""

    def __init__(self, role: str, fake: bool, world: int, ranks: list[_ProcWorker] | None = None) -> None:
        from mlsys.runtime.launch import free_port

        self.world, self.calls = world, 0
        self.port = free_port()
        self.ranks = ranks or [_ProcWorker(role, fake) for _ in range(world)]

    def send(self, msg: dict[str, Any]) -> None:
        if msg.get("op") == "setup":
            for r, w in enumerate(self.ranks):
                w.send(dict(msg, dist={"rank": r, "world": self.world, "port": self.port,
                                       "timeout": float(msg.get("cell_timeout") or 120)}))
        elif msg.get("op") == "round":
            seeds = list(msg["seeds"])
            self.calls = len(seeds) // self.world
            for r, w in enumerate(self.ranks):
                w.send(dict(msg, seeds=seeds[r::self.world]))
        else:
            for w in self.ranks:
                w.send(msg)

    def _interleave(self, lists: list[list[Any]]) -> list[Any]:
        """Rank-major lists of per-call items -> call-major (call i of rank 0, of rank 1, ...)."""
        if not self.calls or any(len(x) % self.calls for x in lists):
            return [x for part in lists for x in part]  # malformed: left in rank order, the checks refuse it
        per = [len(x) // self.calls for x in lists]
        return [x for i in range(self.calls) for part, n in zip(lists, per, strict=True) for x in part[i * n:(i + 1) * n]]

    def recv(self, deadline: float) -> tuple[dict[str, Any], list[bytes]]:
        parts = [w.recv(deadline) for w in self.ranks]
        heads = [h for h, _ in parts]
        first = heads[0]
        if "tensors" in first:
            descs = [list(h.get("tensors") or []) for h in heads]
            blobs = [list(b) for _, b in parts]
            return {"tensors": self._interleave(descs)}, self._interleave(blobs)
        if "done" in first:
            return {"done": all(h.get("done") for h in heads),
                    "error": next((f"rank {r}: {h['error']}" for r, h in enumerate(heads) if h.get("error")), ""),
                    "fingerprints": self._interleave([list(h.get("fingerprints") or []) for h in heads]),
                    "ops": sorted({str(o) for h in heads for o in (h.get("ops") or [])}),
                    "rank_ops": [list(h.get("ops") or []) for h in heads],
                    **({"ran_share": min(float(h["ran_share"]) for h in heads)}
                       if all(isinstance(h.get("ran_share"), (int, float)) for h in heads) else {}),
                    **({"harness_gpu_s": max(float(h["harness_gpu_s"]) for h in heads)}
                       if all(isinstance(h.get("harness_gpu_s"), (int, float)) for h in heads) else {})}, []
        if "kernels" in first:
            if any(not isinstance(h.get("kernels"), dict) for h in heads):
                return {"kernels": None, "error": next((str(h.get("error")) for h in heads if h.get("error")), "")}, []
            total: dict[str, list[float]] = {}
            for h in heads:
                for name, (n, us) in h["kernels"].items():
                    c = total.setdefault(name, [0, 0.0])
                    c[0] += n
                    c[1] += us
            return {"kernels": total}, []
        if "armed" in first:
            return {"armed": all(h.get("armed") for h in heads),
                    "error": next((str(h["error"]) for h in heads if h.get("error")), "")}, []
        return {"device": first.get("device"), "cells_s": max(float(h.get("cells_s") or 0) for h in heads),
                "notes": [f"rank {r}: {n}" for r, h in enumerate(heads) for n in (h.get("notes") or [])]}, []

    def pause(self, stop: bool) -> None:
        for w in self.ranks:
            w.pause(stop)

    def kill(self) -> None:
        for w in self.ranks:
            w.kill()

    def close(self) -> None:
        for w in self.ranks:
            w.close()


def _workers(role: str, fake: bool, world: int, host: Any = None) -> Any:
    """One worker of ``role``, or a group of ``world`` ranks of it. With ``host`` (a
    :class:`mlsys.grader.learnerbox.LearnerClient`), learner workers run in a sandbox of their own that the
    grader's host starts, as another user; clean workers always start here."""
    if host is not None and role == "learner":
        box_id, ends = host.start(world, fake)
        box = _RemoteBox(host, box_id)
        ranks = [_ProcWorker(role, fake, e, box) for e in ends]
        return ranks[0] if world == 1 else _RankGroup(role, fake, world, ranks)
    return _ProcWorker(role, fake) if world == 1 else _RankGroup(role, fake, world)


class _LocalWorker:
    """The same protocol in this process: only for the learner's preview in the notebook."""

    def __init__(self, namespace: dict[str, Any], device: str) -> None:
        self.namespace, self.device, self.pending = namespace, device, []

    def send(self, msg: dict[str, Any]) -> None:
        import torch

        from mlsys.grader.clean import perfwire
        from mlsys.grader.clean.perfworker import _recorder, build_function, run_calls

        if msg.get("op") == "arm":
            self.pending.append(({"armed": False}, []))
            return
        head: dict[str, Any] = {"done": True, "fingerprints": [], "error": "", "ops": []}
        outs: list[Any] = []
        inputs: list[tuple] = []
        try:
            fn = build_function(torch, msg["fn"], self.namespace, self.device)
            seen: set[str] = set()
            outs, head["fingerprints"], inputs = run_calls(torch, fn, msg["shapes"], getattr(torch, msg["dtype"]),
                                                           msg["seeds"], self.device, dict(msg.get("kwargs") or {}),
                                                           _recorder(torch, seen) if msg.get("record_ops") else None,
                                                           None, bool(msg.get("same_storage")), bool(msg.get("flush_l2")))
            head["ops"] = sorted(seen)
        except Exception as exc:
            head["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        self.pending.append((head, []))

        def wire(tensors: list[Any]) -> Any:  # copied when received: after the round's "done", as a worker does
            def later() -> tuple[dict[str, Any], list[bytes]]:
                pairs = [perfwire.tensor_bytes(t) for t in tensors]
                return {"tensors": [p[0] for p in pairs]}, [bytes(p[1]) for p in pairs]
            return later
        if msg.get("send_outputs") and not head["error"]:
            self.pending.append(wire(outs))
        if msg.get("send_inputs") and not head["error"]:
            self.pending.append(wire([t for args in inputs for t in args]))

    def recv(self, deadline: float) -> tuple[dict[str, Any], list[bytes]]:
        """The next answer; a round's outputs and inputs are copied to the host only now, outside the round's
        time (the verdict's clock stops at "done"; timing the copies made Lab 2's preview 0.0036 on an H200)."""
        item = self.pending.pop(0)
        return item() if callable(item) else item

    def pause(self, stop: bool) -> None:
        pass

    def close(self) -> None:
        pass
