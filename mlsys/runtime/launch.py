"""Start ``world_size`` torch.distributed processes from one Python call, and get their results back.

    from mlsys.runtime.launch import launch
    sums = launch(my_function, 4, tensor)      # runs my_function(tensor) on ranks 0..3, returns 4 results

Each rank is a child process that joins a process group (``gloo`` on CPUs, ``nccl`` on CUDA
GPUs, rank ``r`` on GPU ``r``) before calling ``fn(*args, **kwargs)``; inside ``fn``,
``torch.distributed.get_rank()`` and ``get_world_size()`` say who it is. No ``torchrun``, no
environment variables to set by hand: the launcher picks a free local port.

What a lab needs from it, beyond starting processes:

* a **deadline**: a ring in which every rank sends before anyone receives can wait forever.
  After ``timeout`` seconds the launcher kills every rank and raises :class:`LaunchTimeout`
  naming the ranks that never finished, so a deadlock costs one check, not the notebook;
* **errors come home**: an exception on any rank is raised here as :class:`LaunchError` with
  that rank's traceback; a rank that dies (segfault, ``os._exit``) is reported with its exit code;
* results are pickled back (CUDA tensors are moved to the CPU first);
* a **send to or receive from a rank that does not exist** (a neighbour computed without ``% p``)
  raises :class:`InvalidRank` in that rank at once, naming both ranks, instead of waiting for the
  deadline (the process group's own timeout is set past the launcher's, so one message, the
  launcher's, reports a deadlock whichever timer would have fired first).

Processes are forked where the OS allows (functions defined in a notebook need not be
importable); pass ``start_method="spawn"`` for module-level functions on CUDA when the parent has
already used the GPU (CUDA cannot be used in a child forked after the parent initialised it; the
launcher refuses that case with a clear message). The NVLink-multicast switches that shared GPU
machines require (``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``,
``NVSHMEM_DISABLE_NVLS=1``) are set in every child unless the caller's environment sets them.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import socket
import sys
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.connection import wait
from typing import Any

__all__ = ["BACKENDS", "InvalidRank", "LaunchError", "LaunchTimeout", "launch", "default_backend", "free_port",
           "deadlock_message"]

BACKENDS = ("gloo", "nccl")

# CUDA availability checked through NVML does not initialise CUDA in this process, so children
# forked later can still use the GPU (torch reads this variable at call time).
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

CHILD_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


class LaunchError(RuntimeError):
    """A rank raised, died or could not start; the message names the rank and says what happened."""


class LaunchTimeout(LaunchError):
    """Some ranks did not finish within the deadline (a deadlock, or far too slow); all were killed."""


class InvalidRank(ValueError):
    """A point-to-point call named a peer outside ``0 .. world_size - 1``."""


# Once a rank is stuck this long past the launcher's deadline, gloo's own receive timeout would fire;
# keeping it later than the deadline means the launcher, not gloo, reports every deadlock.
_PG_TIMEOUT_MARGIN = 60.0

# What a rank's traceback says when the backend gave up waiting for a partner (gloo, NCCL).
_PEER_GONE_SIGNS = ("connection closed by peer", "connection reset by peer", "broken pipe")
"""What gloo says on a rank whose partner's process has gone (the consequence, not the cause)."""
_BACKEND_TIMEOUT_SIGNS = ("timed out waiting", "timeout waiting", "wait timeout", "operation timed out",
                          "watchdog caught collective operation timeout")


def deadlock_message(label: str, ranks: list[int], world_size: int, timeout: float) -> str:
    """The one message for a run whose ranks waited past the deadline, whichever timer noticed it."""
    return (f"{label}: ranks {ranks} of {world_size} did not finish within {timeout:g} s and were stopped. "
            "A deadlock? Blocking sends and receives must pair up: if every rank first calls a blocking recv() "
            "(or a blocking send() of a large message), each waits for a partner that never comes; post both "
            "with isend/irecv or batch_isend_irecv, wait() on every request, and make every rank issue the "
            "same sequence of calls (the same number of steps) with matching sizes and dtypes.")


def _peer_checked(orig: Callable[..., Any], kind: str) -> Callable[..., Any]:
    """``orig`` (isend, irecv, send or recv) that first checks its peer rank against the group's size."""
    import functools

    towards = "to" if "send" in kind else "from"
    keys = ("dst", "group_dst") if "send" in kind else ("src", "group_src")

    @functools.wraps(orig)
    def checked(*args: Any, **kwargs: Any) -> Any:
        import torch.distributed as dist

        peer = args[1] if len(args) > 1 else next((kwargs[k] for k in keys if kwargs.get(k) is not None), None)
        group = args[2] if len(args) > 2 else kwargs.get("group")
        if peer is not None and dist.is_initialized():
            p = dist.get_world_size(group)
            if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < p:
                me = dist.get_rank(group)
                hint = " (a neighbour computed without % p? e.g. (r + 1) % p and (r - 1) % p)" \
                    if isinstance(peer, int) and peer in (-1, p) else ""
                raise InvalidRank(f"rank {me} of {p} called {kind} {towards} rank {peer!r}, which does not exist: "
                                  f"the ranks are 0 to {p - 1}{hint}")
        return orig(*args, **kwargs)

    return checked


def _install_peer_checks() -> None:
    """Wrap the point-to-point calls of ``torch.distributed`` in this (child) process.

    The same wrapper object replaces the name in ``torch.distributed`` and in ``distributed_c10d``,
    so ``P2POp(dist.isend, ...)`` still passes torch's own check that its op is isend or irecv.
    """
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    for kind in ("isend", "irecv", "send", "recv"):
        orig = getattr(c10d, kind, None)
        if orig is None or getattr(orig, "_mlsys_checked", False):
            continue
        wrapped = _peer_checked(orig, kind)
        wrapped._mlsys_checked = True  # type: ignore[attr-defined]
        setattr(c10d, kind, wrapped)
        if getattr(dist, kind, None) is orig:
            setattr(dist, kind, wrapped)


def _pg_timeout(timeout: float) -> timedelta:
    """How long the group's store and backend wait for a peer: the launch's own deadline and a margin past it, so
    that the launch's deadline, not the backend's, ends a hung group."""
    return timedelta(seconds=max(1.0, timeout) + _PG_TIMEOUT_MARGIN)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_backend() -> str:
    """``"nccl"`` if CUDA GPUs are visible, else ``"gloo"``."""
    from . import device

    return "nccl" if device.has_cuda() else "gloo"


def _to_cpu(obj: Any) -> Any:
    if type(obj).__module__.startswith("torch") and hasattr(obj, "detach") and hasattr(obj, "cpu"):
        return obj.detach().cpu()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    return obj


def _worker(rank: int, world_size: int, told: Any, backend: str, timeout: float, threads: int,
            fn: Callable[..., Any], args: tuple, kwargs: dict, conn: Any) -> None:
    for key, value in CHILD_ENV.items():
        os.environ.setdefault(key, value)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # sandboxes often cannot resolve their hostname
    status, payload = "error", ""
    dist = store = None
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(threads)
        kw: dict[str, Any] = {}
        if backend == "nccl":
            torch.cuda.set_device(rank)
            kw["device_id"] = torch.device("cuda", rank)
        pg_timeout = _pg_timeout(timeout)
        port = told.recv()  # the port of the store the launcher hosts for this group alone
        told.close()
        store = dist.TCPStore("127.0.0.1", port, world_size, False, timeout=pg_timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=pg_timeout, **kw)
        _install_peer_checks()
        result = fn(*args, **kwargs)
        if backend == "nccl":
            torch.cuda.synchronize()
        status, payload = "ok", pickle.dumps(_to_cpu(result))
    except BaseException:  # every failure is reported to the parent, with its traceback
        payload = traceback.format_exc(limit=12)
    try:
        conn.send((status, payload))
    except Exception as exc:  # e.g. an unpicklable result
        conn.send(("error", f"could not send the result back: {exc}"))
    conn.close()
    _leave_together(store, rank, world_size)
    try:
        if dist is not None and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass
    os._exit(0)  # skip interpreter teardown, which can hang on a broken process group


def _leave_together(store: Any, rank: int, world_size: int) -> None:
    """Wait until every rank has reported before this one exits (bounded by the store's timeout): a rank that
    exits while a peer is still connecting its group or reading from it closes their socket, and the peer fails
    with Gloo's "Connection closed by peer" (a rank with no collective to run ends first; seen in CI, 2026-12-03,
    and in 7 of 160 launches, four at once, on the 2-core machine)."""
    if store is None:
        return
    try:
        store.set(f"mlsys/left/{rank}", b"1")
        store.wait([f"mlsys/left/{r}" for r in range(world_size)])
    except Exception:  # a peer that failed never arrives; the launcher has its report and ends this rank
        pass


def launch(fn: Callable[..., Any], world_size: int, *args: Any, backend: str | None = None, timeout: float = 60.0,
           start_method: str | None = None, threads: int = 1, **kwargs: Any) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` ranks of a fresh process group; one result per rank.

    ``backend``: ``"gloo"`` (CPU processes, the default on every machine: the labs' correctness checks
    build CPU tensors and run at world sizes a GPU machine may not have GPUs for; seen on 2 H200s,
    2026-11-23, where an nccl default failed every check) or ``"nccl"`` (one CUDA GPU per rank, asked
    for explicitly by the performance cell and the NCCL experiments). ``timeout`` (seconds) bounds the whole run: past it every rank is killed
    and :class:`LaunchTimeout` raised. Each child uses ``threads`` CPU threads. Results come back
    in rank order; an exception on a rank raises :class:`LaunchError` with its traceback.
    """
    method = _start_method(world_size, backend or "gloo", timeout, start_method)
    procs, conns, store = _spawn(mp.get_context(method), fn, world_size, args, kwargs, backend=backend or "gloo",
                                 timeout=timeout, threads=threads)
    try:
        results = _wait(procs, conns, timeout)
    finally:
        _stop(procs, conns)
        del store  # the group's rendezvous, kept until every rank has ended
    return _collect(getattr(fn, "__name__", "function"), results, world_size, timeout)


def _start_method(world_size: int, backend: str, timeout: float, start_method: str | None) -> str:
    """Check ``launch``'s arguments; the start method of its children (fork where the OS allows)."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an integer number of processes >= 1, got {world_size!r}")
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    method = start_method or ("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    if backend == "nccl":
        import torch

        if world_size > torch.cuda.device_count():
            raise ValueError(f"nccl needs one GPU per rank: world_size {world_size}, "
                             f"but {torch.cuda.device_count()} CUDA GPUs are visible")
        if method == "fork" and torch.cuda.is_initialized():
            raise LaunchError("this process has already used CUDA, so forked children cannot; launch before touching "
                              "the GPU here, or pass start_method='spawn' with a function importable from a module")
    return method


def _spawn(ctx: Any, fn: Callable[..., Any], world_size: int, args: tuple, kwargs: dict, *, backend: str,
           timeout: float, threads: int) -> tuple[list[Any], list[Any], Any]:
    """Start one child per rank (:func:`_worker`), then the group's store, here, on a port the OS picks (no port
    chosen first and bound later, which a concurrent launch could take in between and share, mixing two groups),
    its port sent to every rank.
    Returns the processes, the ends of the pipes they answer on, and the store (kept until they end)."""
    from torch.distributed import TCPStore

    procs, conns, tells = [], [], []
    for rank in range(world_size):
        parent, child = ctx.Pipe(duplex=False)
        told, tell = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_worker, args=(rank, world_size, told, backend, timeout, threads, fn, args, kwargs, child),
                        daemon=True, name=f"mlsys-rank{rank}")
        p.start()  # before the store exists: a forked rank inherits none of its threads or sockets
        child.close()
        told.close()
        procs.append(p)
        conns.append(parent)
        tells.append(tell)
    store = TCPStore("127.0.0.1", 0, None, True, timeout=_pg_timeout(timeout), wait_for_workers=False)
    for tell in tells:
        tell.send(store.port)
        tell.close()
    return procs, conns, store


def _receive(proc: Any, conn: Any, from_pipe: bool) -> tuple[str, Any]:
    """What one rank reported: ``(status, payload)`` from its pipe, or ``("died", exit code)``."""
    if from_pipe or conn.poll():
        try:
            return conn.recv()
        except (EOFError, OSError):
            pass
    proc.join(1)
    return ("died", proc.exitcode)


def _wait(procs: list[Any], conns: list[Any], timeout: float) -> dict[int, tuple[str, Any]]:
    """Each rank's report, in the order the ranks finished, until all are in or the deadline passes; once a rank
    has failed, the others get five seconds more (a rank missing from the result never finished)."""
    world_size = len(procs)
    results: dict[int, tuple[str, Any]] = {}
    deadline = time.monotonic() + timeout
    grace: float | None = None  # once a rank has failed, the others get a little longer, then are killed
    while len(results) < world_size:
        now = time.monotonic()
        limit = min(deadline, grace) if grace is not None else deadline
        if now >= limit:
            break
        waiting = {conns[r]: r for r in range(world_size) if r not in results}
        sentinels = {procs[r].sentinel: r for r in waiting.values()}
        for obj in wait(list(waiting) + list(sentinels), timeout=limit - now):
            r = waiting.get(obj, sentinels.get(obj))
            if r in results:
                continue
            results[r] = _receive(procs[r], conns[r], obj in waiting)
            if results[r][0] != "ok" and grace is None:
                grace = time.monotonic() + 5.0
    return results


def _stop(procs: list[Any], conns: list[Any]) -> None:
    """Kill every rank still running, reap them all and close the pipes."""
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(5)
    for c in conns:
        c.close()


def _collect(label: str, results: dict[int, tuple[str, Any]], world_size: int, timeout: float) -> list[Any]:
    """The ranks' results in rank order, or the one error that names the cause (LaunchError, LaunchTimeout)."""
    # the first rank to fail is the cause; the others usually fail because it left
    failed = [(r, v) for r, v in results.items() if v[0] != "ok"]
    # a rank that gave up waiting for its partner (the backend's own timer) is a deadlock, reported as one
    timed_out = [r for r, (status, payload) in failed
                 if status == "error" and any(s in str(payload).lower() for s in _BACKEND_TIMEOUT_SIGNS)]
    if failed and len(timed_out) == len(failed):
        missing = sorted(set(timed_out) | {r for r in range(world_size) if r not in results})
        raise LaunchTimeout(deadlock_message(label, missing, world_size, timeout))
    if failed:
        _raise_first(label, _by_cause(failed), world_size)
    missing = [r for r in range(world_size) if r not in results]
    if missing:
        raise LaunchTimeout(deadlock_message(label, missing, world_size, timeout))
    return [pickle.loads(results[r][1]) for r in range(world_size)]


def _by_cause(failed: list[tuple[int, tuple[str, Any]]]) -> list[tuple[int, tuple[str, Any]]]:
    """The failed ranks, the likely cause first: an invalid rank, then the rest in the order they finished, and
    last the ranks whose peer had gone."""
    # a rank whose peer vanished ("Connection closed by peer") failed because another rank left first: on a
    # loaded machine its report can arrive before the report of the rank that raised, so it goes last
    left = [(r, v) for r, v in failed if v[0] == "error" and any(s in str(v[1]).lower() for s in _PEER_GONE_SIGNS)]
    failed = [f for f in failed if f not in left] + left
    invalid = [(r, v) for r, v in failed if v[0] == "error" and "InvalidRank" in str(v[1])]
    if invalid:  # the cause, even when another rank noticed first that its partner had gone
        failed = invalid + [f for f in failed if f not in invalid]
    return failed


def _raise_first(label: str, failed: list[tuple[int, tuple[str, Any]]], world_size: int) -> None:
    """Raise :class:`LaunchError` for the first of ``failed``, naming the ranks that failed after it."""
    r, (status, payload) = failed[0]
    also = f" (then ranks {[f for f, _ in failed[1:]]} failed too)" if len(failed) > 1 else ""
    if status == "died":
        hint = {-6: ": aborted, as gloo does when a received message is larger than the buffer posted for it "
                    "(send and receive buffers of different lengths or dtypes, or steps that do not pair up)",
                -11: ": a segmentation fault (a buffer freed or resized while a request on it was pending?)"}
        raise LaunchError(f"{label}: rank {r} of {world_size} died (exit code {payload}{hint.get(payload, '')}) "
                          f"before returning a result{also}")
    if status == "error" and "InvalidRank" in str(payload):
        reason = str(payload).strip().splitlines()[-1].split("InvalidRank: ", 1)[-1]
        raise LaunchError(f"{label}: {reason}{also}")
    raise LaunchError(f"{label}: rank {r} of {world_size} raised an exception{also}:\n{payload}")
