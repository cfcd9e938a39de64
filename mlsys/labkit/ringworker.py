"""Collectives (Lab 4), the ranks' side: the collectives a ring may not call, the dispatch recorder, each rank's
traffic, the worker-side runs of a ring all-reduce (plain and tagged) and the diagnosis of a wrong ring.

Moved out of :mod:`mlsys.labkit.checks` (issue 48, "a size it can keep"); ``checks`` re-exports its names,
the ones the labs' cells and the grader call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from mlsys.labkit.grading import GradingError
from mlsys.labkit.guardbuffers import _torch
from mlsys.labkit.proxy import HARNESS, RemoteFunction

COLLECTIVES = ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "all_gather", "all_gather_into_tensor",
               "reduce", "broadcast", "all_to_all", "all_to_all_single", "all_reduce_coalesced", "gather", "scatter")
"""The collectives of ``torch.distributed`` a hand-built ring must not call."""


PROCESS_GROUP_COLLECTIVES = ("allreduce", "allreduce_coalesced", "allgather", "allgather_into_tensor_coalesced",
                             "_allgather_base", "reduce_scatter", "_reduce_scatter_base", "alltoall", "alltoall_base")
"""The same collectives as methods of a process group or its backend (``dist.group.WORLD.allreduce``)."""


FORBIDDEN_COLLECTIVES = frozenset({f"torch.distributed*.{c}" for c in COLLECTIVES} | {f".{c}" for c in COLLECTIVES}
                                  | {f".{c}" for c in PROCESS_GROUP_COLLECTIVES})


C10D_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional", "_dtensor")
"""Operator namespaces of torch.distributed: every collective, however reached, dispatches one of their ops."""


POINT_TO_POINT_OPS = frozenset({"c10d::send", "c10d::recv_", "c10d::recv_any_source_"})
"""The dispatched ops of ``send``/``isend``/``recv``/``irecv`` (``batch_isend_irecv`` included)."""


RING_ALLOWED_OPS = POINT_TO_POINT_OPS | {"c10d::barrier", "c10d::monitored_barrier_"}
"""The torch.distributed ops a hand-built ring may dispatch: every other c10d op is a library collective."""


_TAG_BASE = 5
"""Rank r's diagnostic input is ``5**r * (1 + i % 7)``: a sum's base-5 digits count each rank's share
(exact in float32 for up to four ranks: at most 7 * (1 + 5 + 25 + 125) = 1092)."""


_RECORD: list[Any] = []


def dispatch_recorder() -> Any:
    """A torch dispatch mode whose ``ops`` collects the names of the operations dispatched under it
    (``aten::add``, ``c10d::send``, ``c10d::allreduce_``...); the course's own guard-buffer work is left out.

    The class opts out of torch's default of wrapping ``__torch_dispatch__`` in ``torch._disable_dynamo``,
    which imports Dynamo: 3-4 s of CPU in every process that first defines such a class (each rank a Lab 4
    check starts; measured on the 2-core grader, 2026-11-26)."""
    if not _RECORD:
        from torch.utils._python_dispatch import TorchDispatchMode

        class Record(TorchDispatchMode):
            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                return False

            def __init__(self) -> None:
                super().__init__()
                self.ops: set[str] = set()
                self.traffic: list[list[Any]] = []  # [op, peer (-1: none), elements] of each torch.distributed op

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
                if not HARNESS[0]:
                    name = str(func._schema.name) if hasattr(func, "_schema") else str(func)
                    self.ops.add(name)
                    if name.split("::")[0] in C10D_NAMESPACES and len(self.traffic) < 10_000:
                        self.traffic.append([name, *_traffic(name, args)])
                return func(*args, **(kwargs or {}))

        _RECORD.append(Record)
    return _RECORD[0]()


def _traffic(name: str, args: Sequence[Any]) -> tuple[int, int]:
    """(peer rank or -1, bytes of the tensors) of one dispatched torch.distributed op: what it moved, and where
    (``c10d::send(tensors, group, dstRank, tag)``, ``c10d::recv_(tensors, group, srcRank, tag)``). Bytes, not
    elements: data packed into a wider dtype (complex128) moves as many bytes."""
    torch = _torch()
    elements = 0
    for a in args:
        for t in (a if isinstance(a, (list, tuple)) else [a]):
            if isinstance(t, torch.Tensor):
                elements += t.numel() * t.element_size()
    peer = args[2] if name in ("c10d::send", "c10d::recv_") and len(args) > 2 and isinstance(args[2], int) else -1
    return int(peer), int(elements)


def _rank_traffic(rows: Any) -> list[tuple[str, int, int]]:
    """The ``traffic`` records of a rank's reply rows, as (op, peer, elements); malformed entries are dropped."""
    out = []
    for row in rows if isinstance(rows, list) else [rows]:
        for t in (row.get("traffic") if isinstance(row, dict) else None) or []:
            if isinstance(t, list) and len(t) == 3 and isinstance(t[1], int) and isinstance(t[2], int):
                out.append((str(t[0]), t[1], t[2]))
    return out


def check_ring_traffic(what: str, p: int, r: int, n: int, traffic: Sequence[tuple[str, int, int]],
                       itemsize: int = 1) -> None:
    """A ring all-reduce of ``n`` elements of ``itemsize`` bytes on ``p`` ranks: rank ``r`` sends only to its right
    neighbour and receives only from its left, and sends 2(p - 1) chunks of at most ceil(n / p) elements
    (reduce-scatter, then all-gather). Anything else (every rank sending its whole tensor to every other, a
    relay, a tree) is not a ring. ``traffic``: (op, peer, bytes) records."""
    sends = [(peer, k) for op, peer, k in traffic if op == "c10d::send"]
    recvs = [(peer, k) for op, peer, k in traffic if op in ("c10d::recv_", "c10d::recv_any_source_")]
    right, left = (r + 1) % p, (r - 1) % p
    to = sorted({peer for peer, k in sends if k and peer != right})
    frm = sorted({peer for peer, k in recvs if k and peer != left})
    if to or frm:
        raise GradingError(f"{what}, {p} processes, rank {r}: it sent to rank(s) {to or [right]} and received from "
                           f"rank(s) {frm or [left]}; in a ring each rank sends only to its right neighbour ({right}) "
                           f"and receives only from its left ({left})")
    bound = 2 * (p - 1) * -(-n // p)
    sent = sum(k for _, k in sends) / itemsize
    if sent > bound:
        raise GradingError(f"{what}, {p} processes, rank {r}, {n} elements: it sent {sent:,.0f} elements' worth of "
                           f"bytes; a ring sends 2(p - 1) = {2 * (p - 1)} chunks of at most ceil(n / p) = {-(-n // p)} "
                           f"elements ({bound:,} in all): whole tensors sent (or relayed) are not a ring all-reduce")


def library_collectives(ops: Sequence[str]) -> list[str]:
    """The ops of ``ops`` that are torch.distributed's own collectives (not a send, receive or barrier)."""
    return sorted(op for op in ops if op.split("::")[0] in C10D_NAMESPACES and op not in RING_ALLOWED_OPS)


def _learner(fn: Any) -> Any:
    """The learner's function inside the worker's recording wrapper: each rank records its own call."""
    return fn.fn if type(fn).__name__ == "Recorded" and type(fn).__module__ == "mlsys.grader.learnerside.worker" else fn


def _trap_collectives() -> Callable[[], None]:
    """Replace the collectives of ``torch.distributed`` by a trap (a clear error in the learner's own
    notebook); returns the function that puts them back. Only a convenience: the recorded ops decide."""
    import torch.distributed as d
    import torch.distributed.distributed_c10d as c10d

    originals = {c: getattr(d, c) for c in COLLECTIVES if hasattr(d, c)}

    def trap(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the ring called a collective of torch.distributed; build it from send/recv")

    for m in (d, c10d):  # the collectives are reachable under both names
        for c in originals:
            setattr(m, c, trap)

    def restore() -> None:
        for m in (d, c10d):
            for c, f in originals.items():
                setattr(m, c, f)
    return restore


def _ring_rank(fn: Callable[..., Any], inputs: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """In each rank: ``fn`` on a copy of each of this rank's inputs; per input the tensor it returned (or the
    name of its type), the input afterwards and the ops the call dispatched."""
    torch = _torch()
    import torch.distributed as d

    fn = _learner(fn)
    rows = []
    for x in inputs[d.get_rank()]:
        mine = x.clone()
        rec = dispatch_recorder()
        restore = _trap_collectives()
        try:
            with rec:
                out = fn(mine)
        finally:
            restore()
        rows.append({"out": out.detach().clone() if type(out) is torch.Tensor else None, "type": type(out).__name__,
                     "x": mine, "ops": sorted(rec.ops), "traffic": rec.traffic})
    return rows


def _launched(target: Callable[..., Any], p: int, *args: Any, timeout: float) -> dict[str, Any]:
    """``{"ranks": launch(target, p, *args)}``, or ``{"error": "timeout" | "failed", "message": ...}``."""
    from mlsys.runtime.launch import LaunchError, LaunchTimeout, launch

    dispatch_recorder()  # its class (and torch's dispatch-mode module) made here once, inherited by the forked ranks
    try:
        return {"ranks": launch(target, p, *args, timeout=timeout)}
    except LaunchTimeout as exc:
        return {"error": "timeout", "message": str(exc)[:3000]}
    except LaunchError as exc:
        return {"error": "failed", "message": str(exc)[:3000]}


def worker_ring_runs(fn: Callable[..., Any], p: int, inputs: Sequence[Sequence[Any]], *, timeout: float = 30.0) -> dict[str, Any]:
    """Worker-side half of :func:`check_ring`: ``fn`` on ``p`` ranks, rank r on each tensor of ``inputs[r]``."""
    return _launched(_ring_rank, int(p), fn, inputs, timeout=float(timeout))


class _HeldReceive:
    """The request of a receive posted in a diagnostic run (:func:`_tagged_run`). The message lands in a private
    buffer; the learner's tensor holds NaN from the moment the receive is posted until ``wait()`` (or an
    ``is_completed()`` that returns True) is called on this request, which copies the message in. A read of
    the receive buffer before its request completed therefore always finds NaN, whatever the race between
    the ranks and whatever the allocator left in the buffer; every other call goes to the real request."""

    def __init__(self, work: Any, private: Any, target: Any) -> None:
        self._work, self._private, self._target = work, private, target

    def _deliver(self) -> None:
        if self._target is not None:  # once: what the learner writes there after wait() is theirs
            self._target.copy_(self._private)
            self._target = None

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        done = self._work.wait(*args, **kwargs)
        self._deliver()
        return done

    def is_completed(self) -> bool:
        done = self._work.is_completed()
        if done:
            self._deliver()
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _held_irecv(orig: Callable[..., Any]) -> Callable[..., Any]:
    """``irecv`` for a diagnostic run: into a private buffer, the learner's tensor filled with NaN (a float
    tensor; the diagnostic input is float32) until the request's ``wait()``; see :class:`_HeldReceive`."""
    torch = _torch()

    def irecv(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(tensor, torch.Tensor) or not (tensor.is_floating_point() or tensor.is_complex()):
            return orig(tensor, *args, **kwargs)
        private = torch.empty_like(tensor)
        work = orig(private, *args, **kwargs)
        if work is None:  # this rank is not in the group: nothing was posted
            return None
        tensor.fill_(float("nan"))
        return _HeldReceive(work, private, tensor)
    return irecv


def _tagged_run(fn: Callable[..., Any], n: int) -> tuple[Any, list[tuple[int | None, Any]]]:
    """In each rank: ``fn`` on the diagnostic input ``5**r * (1 + i % 7)`` (float32), each ``irecv`` held
    until its request's ``wait()`` (:class:`_HeldReceive`), so that a read before it is seen in every run.

    Returns the tensor afterwards and, for every message this rank sent, its offset in the tensor
    (None if sent from another buffer) and a copy of its contents at the time of sending.
    """
    torch = _torch()
    import torch.distributed as d
    import torch.distributed.distributed_c10d as c10d

    fn = _learner(fn)
    x = (_TAG_BASE ** d.get_rank()) * (1 + torch.arange(n) % 7).to(torch.float32)
    sends: list[tuple[int | None, Any]] = []
    originals = {k: getattr(c10d, k) for k in ("isend", "send", "irecv")}

    def recorder(orig: Callable[..., Any]) -> Callable[..., Any]:
        def record(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(tensor, torch.Tensor) and tensor.numel():
                same = tensor.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
                offset = (tensor.data_ptr() - x.data_ptr()) // x.element_size() if same else None
                sends.append((offset, tensor.detach().clone()))
            return orig(tensor, *args, **kwargs)
        return record

    wrapped = {k: (_held_irecv(f) if k == "irecv" else recorder(f)) for k, f in originals.items()}
    for k, f in wrapped.items():  # the same object under both names, as P2POp checks its op by identity
        setattr(c10d, k, f)
        setattr(d, k, f)
    try:
        fn(x)
    finally:
        for k, f in originals.items():
            setattr(c10d, k, f)
            setattr(d, k, f)
    return x, sends


def worker_tagged_runs(fn: Callable[..., Any], p: int, n: int, *, timeout: float = 30.0) -> dict[str, Any]:
    """Worker-side half of :func:`diagnose_ring`: two runs of :func:`_tagged_run` on ``p`` ranks."""
    runs = []
    for _ in range(2):
        one = _launched(_tagged_run, int(p), fn, int(n), timeout=float(timeout))
        if "error" in one:
            return one
        runs.append([[x, [list(s) for s in sends]] for x, sends in one["ranks"]])
    return {"runs": runs}


def _decode(values: Any, p: int, start: int = 0) -> list[tuple[int, ...] | None]:
    """Per element (``start`` is the first one's index): how many times each rank's input went into it,
    or None if it is no such sum."""
    out: list[tuple[int, ...] | None] = []
    for i, v in enumerate(values.reshape(-1).tolist(), start):
        c = v / (1 + i % 7)
        if not math.isfinite(c) or c < 0 or abs(c - round(c)) > 1e-3 or round(c) >= _TAG_BASE ** p:
            out.append(None)
            continue
        c, digits = int(round(c)), []
        for _ in range(p):
            digits.append(c % _TAG_BASE)
            c //= _TAG_BASE
        out.append(tuple(digits))
    return out


def _shares(counts: tuple[int, ...] | None) -> str:
    if counts is None:
        return "no sum of the ranks' inputs"
    parts = [f"rank {q}" + (f" x{k}" if k != 1 else "") for q, k in enumerate(counts) if k]
    return "the sum of " + (", ".join(parts) if parts else "nothing")


def _check_sends(sends: list[list[tuple[int | None, Any]]], p: int, n: int) -> str:
    """What the messages each rank sent say about the step count and the chunks sent in each phase."""
    if n < p:
        return ""
    expected = 2 * (p - 1)
    for r, rank_sends in enumerate(sends):
        if len(rank_sends) != expected:
            return (f"rank {r} sent {len(rank_sends)} message{'s' if len(rank_sends) != 1 else ''}; a ring "
                    f"all-reduce on {p} processes sends 2(p - 1) = {expected} per rank: p - 1 = {p - 1} "
                    f"step{'s' if p != 2 else ''} of reduce-scatter, then p - 1 of "
                    "all-gather. Check the step counts of both loops")
    for r, rank_sends in enumerate(sends):
        for k, (offset, data) in enumerate(rank_sends):
            if offset is None:
                continue
            decoded = [c for c in _decode(data, p, offset) if c is not None]
            if not decoded:
                continue
            found = max(set(decoded), key=decoded.count)
            held = sum(1 for c in found if c)
            if k < p - 1 and held != k + 1:
                return (f"in reduce-scatter step {k}, rank {r} sent a chunk holding {_shares(found)}; expected "
                        f"a chunk holding {k + 1} of the {p} inputs (its own, plus one more per step): check which "
                        f"chunk each step sends, (r - s) % p in step s, and which it receives and adds, (r - s - 1) % p")
            if k >= p - 1 and held != p:
                return (f"in all-gather step {k - (p - 1)}, rank {r} sent a chunk holding {_shares(found)}, not yet "
                        f"the sum of all {p} inputs: the all-gather must pass on finished chunks, starting with the "
                        f"one this rank completed in the reduce-scatter, (r + 1) % p; check its indices")
    return ""


def diagnose_ring(fn: Callable[..., Any], p: int, n: int, *, timeout: float = 30.0) -> str:
    """:func:`_diagnose_ring` at ``n``; for fewer elements than processes, where chunks are empty and the
    messages say little, also at ``4p + 1`` elements."""
    cause = _diagnose_ring(fn, p, n, timeout=timeout)
    if n >= p or (cause and not cause.startswith("some elements miss")):
        return cause
    m = 4 * p + 1
    other = _diagnose_ring(fn, p, m, timeout=timeout)
    if other.startswith("on inputs of small integers"):
        return (f"the ring is right for {m} elements but not for {n} < p = {p}, where some chunks are empty: both "
                "the sender and the receiver of an empty chunk must skip it (or both send it)")
    return f"{other} (found on a run of {m} elements)" if other else cause


def _tagged_runs(fn: Callable[..., Any], p: int, n: int, timeout: float) -> list[list[tuple[Any, list]]] | None:
    """Two runs of :func:`_tagged_run` (in the learner's kernel where ``fn`` lives there), checked for form:
    per run, per rank, the tensor afterwards and the (offset, contents) of each message sent; None on failure."""
    torch = _torch()
    reply = _worker_half(fn, "tagged_runs", worker_tagged_runs, p, n, timeout=timeout)
    try:
        runs = []
        for run in reply["runs"][:2]:
            ranks = []
            for x, sends in run[:p]:
                if type(x) is not torch.Tensor or x.numel() != n:
                    return None
                ok = [(o if isinstance(o, int) and not isinstance(o, bool) else None, t) for o, t in sends
                      if type(t) is torch.Tensor]
                ranks.append((x, ok))
            runs.append(ranks)
        return runs if len(runs) == 2 and all(len(r) == p for r in runs) else None
    except (KeyError, TypeError, ValueError):
        return None


def _diagnose_ring(fn: Callable[..., Any], p: int, n: int, *, timeout: float = 30.0) -> str:
    """Why a ring all-reduce gives wrong sums, from a run on inputs whose sums say which ranks they hold.

    Rank r holds ``5**r * (1 + i % 7)``, so every element of a correct result has each rank's share
    exactly once, and each message sent shows how many shares it carried. A receive buffer holds NaN
    until its request's ``wait()`` (:class:`_HeldReceive`). In order: NaN in the result (a receive buffer
    read before its request completed, in every run); two runs that differ (another read of a buffer not
    yet filled); elements that are no such sum;
    a wrong number of messages per rank (step count); a message with the wrong number of shares for
    its step (chunk indices of either phase); only the last ``n % p`` elements wrong (chunk
    boundaries); shares counted twice. Returns "" where nothing specific is found.
    """
    runs = _tagged_runs(fn, p, n, timeout)
    if runs is None:
        return ""
    results = [[x for x, _ in run] for run in runs]
    first = [_decode(t, p) for t in results[0]]
    full = tuple([1] * p)
    bad = [(r, i, c) for r, row in enumerate(first) for i, c in enumerate(row) if c != full]
    if not bad:
        return ("on inputs of small integers the ring is right: does it depend on the values (a buffer reused "
                "across calls? rounding?)")
    r0, i0, c0 = bad[0]
    example = f"e.g. rank {r0}, element {i0}: {_shares(c0)}"
    held = [(r, i) for r, i, c in bad if c is None and math.isnan(float(results[0][r][i]))]
    if held:
        return (f"some elements are NaN (e.g. rank {held[0][0]}, element {held[0][1]}): in these diagnostic runs a "
                "receive buffer holds NaN from the moment its receive is posted until wait() is called on its "
                "request, so a receive buffer was read (or sent on) before its request completed: call wait() on "
                "every request of a step before reading (or adding) what it received, and before sending from "
                "that buffer again")
    if any(not torch_equal(a, b) for a, b in zip(results[0], results[1], strict=True)):
        return (f"the result changes from one run to the next ({example}): a receive buffer read before its "
                "request completed? call wait() on every request of a step before reading (or adding) what it "
                "received, and before sending from that buffer again")
    if any(c is None for _, _, c in bad):
        return (f"some elements hold no sum of the ranks' inputs ({example}): a receive buffer read before its "
                "request completed (wait() first), or a scratch buffer used before it was filled")
    sends = _check_sends([s for _, s in runs[0]], p, n)
    if sends:
        return f"{sends} ({example} at the end)"
    tail = n - (n // p) * p
    wrong = {i for _, i, _ in bad}
    if n >= p and tail and wrong <= set(range(n - tail, n)):
        return (f"only the last {tail} elements (n % p with n = {n}, p = {p}) are wrong ({example}): the chunks "
                "do not cover the whole tensor: check the chunk boundaries (chunk_bounds)")
    if any(max(c) > 1 for _, _, c in bad if c is not None):
        return (f"some elements count a rank's input more than once ({example}): the reduce-scatter adds a chunk "
                "twice, or the all-gather adds what it receives (it copies)")
    return f"some elements miss some ranks' inputs ({example}): check both phases' chunk indices"


def torch_equal(a: Any, b: Any) -> bool:
    """Exact equality of two tensors, NaN equal to NaN (a garbage read is rarely the same twice)."""
    torch = _torch()
    return bool(torch.equal(torch.nan_to_num(a, nan=1.2345), torch.nan_to_num(b, nan=1.2345)))


def _worker_half(fn: Any, name: str, local: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The worker-side half of a check, run where ``fn`` lives: ``name`` (one of :data:`mlsys.grader.learnerside.worker.HELPERS`)
    in the learner's kernel when ``fn`` is a :class:`RemoteFunction` (a test cell run in the grader), else
    ``local`` here (the learner's own notebook)."""
    if isinstance(fn, RemoteFunction):
        return fn.run_helper(name, *args, **kwargs)
    return local(fn, *args, **kwargs)
