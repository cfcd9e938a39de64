"""Reading a profile: where a step's wall time went (chapter 14, Lab 6).

A profile is a list of timed events. This module reads one as plain records (:class:`ProfileEvent`: a name, a
start and a duration in microseconds, where it ran, on which thread), so it needs no profiler to be tested;
:func:`events_from_torch` turns ``torch.profiler``'s events into them.

Definitions (``window`` is the step's interval ``[t0, t1]``, its length ``W = t1 - t0``):

* **work** is what the device executes. On a GPU: the kernels (events with ``device == "cuda"``). On a CPU
  there are no kernels; the work is the *outermost* ``aten::`` operators (an ``aten::`` event not inside
  another ``aten::`` event of the same thread), since each of them is what becomes one kernel launch on
  a GPU.
* **idle fraction** ``= 1 - |union of work intervals within the window| / W``: the share of the step's
  wall time during which no work ran. On a CPU it is the time spent in Python and in the framework
  between operators; on a GPU the time the device waited for the host.
* **cause shares**, each a fraction of ``W``:
  ``host overhead`` = the idle fraction; ``synchronisation`` = the time the host spent blocked in
  synchronising calls (:data:`SYNC_NAMES`: ``.item()``, ``.cpu()``'s copy to the host, stream and device
  syncs), union of their intervals; ``element-wise`` = the work time of memory-bound element-wise
  operators or kernels (:func:`is_elementwise`), union of their intervals. They are the three causes a
  roofline cannot see; :func:`rank_causes` orders them, largest first.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["ProfileEvent", "SYNC_NAMES", "ELEMENTWISE_OPS", "CAUSES", "is_elementwise", "is_sync", "union_length",
           "work_events", "operator_count", "sync_calls", "idle_fraction", "cause_shares", "median_shares", "rank", "rank_causes", "window_of",
           "windows_of", "events_from_torch"]

SYNC_NAMES = frozenset({
    "aten::item", "aten::_local_scalar_dense", "aten::cpu", "cudaStreamSynchronize", "cudaDeviceSynchronize",
    "cudaEventSynchronize", "cudaMemcpy", "aten::nonzero", "aten::is_nonzero",
})
"""Calls that make the host wait for the device (on a CPU: that would, on a GPU)."""

ELEMENTWISE_OPS = frozenset({
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "neg", "pow", "tanh", "tanh_", "exp", "sigmoid",
    "gelu", "gelu_backward", "relu", "threshold_backward", "tanh_backward", "addcmul", "where", "rsub", "sqrt",
    "rsqrt", "reciprocal", "square", "clamp", "fill_", "copy_", "_to_copy", "erf",
})
"""aten operator names (without the ``aten::`` prefix) that read and write every element once: memory-bound."""

CAUSES = ("host overhead", "synchronisation", "element-wise")
"""The three causes :func:`cause_shares` measures, in a fixed order."""


@dataclass(frozen=True)
class ProfileEvent:
    """One profiled interval: ``start`` and ``duration`` in microseconds; ``device`` "cpu" or "cuda"."""

    name: str
    start: float
    duration: float
    device: str = "cpu"
    thread: int = 0

    @property
    def end(self) -> float:
        return self.start + self.duration


def is_sync(event: ProfileEvent) -> bool:
    """True for a host-side call that waits for the device (:data:`SYNC_NAMES`)."""
    return event.device == "cpu" and event.name in SYNC_NAMES


def is_elementwise(event: ProfileEvent) -> bool:
    """True for an element-wise aten operator (CPU) or an element-wise kernel (GPU: PyTorch names them
    ``...elementwise_kernel...`` or ``...vectorized...``; Triton's fused ones ``triton_poi_...``)."""
    if event.device == "cuda":
        n = event.name.lower()
        return "elementwise" in n or "vectorized" in n or n.startswith("triton_poi")
    return event.name.startswith("aten::") and event.name[len("aten::"):] in ELEMENTWISE_OPS


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by ``(start, end)`` intervals, overlaps counted once (same unit as the input)."""
    total, cur_start, cur_end = 0.0, None, None
    for s, e in sorted(intervals):
        if e < s:
            raise ValueError(f"an interval must not end before it starts, got ({s}, {e})")
        if cur_end is None or s > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = s, e
        else:
            cur_end = max(cur_end, e)
    return total + (0.0 if cur_end is None else cur_end - cur_start)


def _outermost_aten(events: list[ProfileEvent]) -> list[ProfileEvent]:
    """The CPU ``aten::`` events not contained in another ``aten::`` event of their thread."""
    out: list[ProfileEvent] = []
    by_thread: dict[int, list[ProfileEvent]] = {}
    for e in events:
        if e.device == "cpu" and e.name.startswith("aten::"):
            by_thread.setdefault(e.thread, []).append(e)
    for evs in by_thread.values():
        open_end = None
        for e in sorted(evs, key=lambda e: (e.start, -e.duration)):
            if open_end is None or e.start >= open_end:
                out.append(e)
                open_end = e.end  # events that start before open_end are inside this one (one thread nests)
    return out


def work_events(events: list[ProfileEvent]) -> list[ProfileEvent]:
    """The kernels when the profile has any (a GPU's), else the outermost CPU aten operators."""
    kernels = [e for e in events if e.device == "cuda"]
    return kernels if kernels else _outermost_aten(events)


def _clipped(events: Iterable[ProfileEvent], window: tuple[float, float]) -> list[tuple[float, float]]:
    t0, t1 = window
    return [(max(e.start, t0), min(e.end, t1)) for e in events if e.end > t0 and e.start < t1]


def _check_window(window: tuple[float, float]) -> float:
    t0, t1 = window
    if not t1 > t0:
        raise ValueError(f"the window must have t1 > t0 (microseconds), got {window}")
    return t1 - t0


def operator_count(events: list[ProfileEvent], window: tuple[float, float]) -> int:
    """How many work events (kernels, or outermost CPU operators) start inside ``window``: a count that
    does not depend on the machine's speed or load, only on the code and the library version."""
    return sum(window[0] <= e.start < window[1] for e in work_events(events))


def sync_calls(events: list[ProfileEvent], window: tuple[float, float]) -> int:
    """How many times the host waited in ``window``: synchronising calls (:func:`is_sync`), a call nested in
    another (``aten::item`` inside ``aten::is_nonzero``) counted once with it."""
    count, open_end = 0, None
    for s, e in sorted((e.start, e.end) for e in events if is_sync(e) and window[0] <= e.start < window[1]):
        if open_end is None or s >= open_end:
            count += 1
            open_end = e
        else:
            open_end = max(open_end, e)
    return count


def idle_fraction(events: list[ProfileEvent], window: tuple[float, float]) -> float:
    """``1 - |union of work within window| / (t1 - t0)``: the share of the step with no work running."""
    length = _check_window(window)
    return 1.0 - union_length(_clipped(work_events(events), window)) / length


def cause_shares(events: list[ProfileEvent], window: tuple[float, float]) -> dict[str, float]:
    """{cause: share of the window}: host overhead (idle), synchronisation (host blocked), element-wise work."""
    length = _check_window(window)
    syncs = [e for e in events if is_sync(e)]
    elementwise = [e for e in work_events(events) if is_elementwise(e)]
    return {"host overhead": idle_fraction(events, window),
            "synchronisation": union_length(_clipped(syncs, window)) / length,
            "element-wise": union_length(_clipped(elementwise, window)) / length}


def median_shares(events: list[ProfileEvent], windows: list[tuple[float, float]]) -> dict[str, float]:
    """{cause: the median of its share over ``windows``} (several steps of one profile: a step that the
    operating system interrupted moves a median less than a mean)."""
    if not windows:
        raise ValueError("expected at least one window (one profiled step)")
    per = [cause_shares(events, w) for w in windows]
    return {c: statistics.median(p[c] for p in per) for c in CAUSES}


def rank(shares: dict[str, float]) -> list[tuple[str, float]]:
    """``shares`` as (cause, share) pairs, largest first (ties in :data:`CAUSES` order)."""
    return sorted(shares.items(), key=lambda kv: (-kv[1], CAUSES.index(kv[0])))


def rank_causes(events: list[ProfileEvent], window: tuple[float, float]) -> list[tuple[str, float]]:
    """The causes of :func:`cause_shares` with their shares, largest first (ties in :data:`CAUSES` order)."""
    return rank(cause_shares(events, window))


def window_of(events: list[ProfileEvent], name: str) -> tuple[float, float]:
    """The interval of the (first) event called ``name``, e.g. a ``record_function("step")`` region."""
    for e in events:
        if e.name == name:
            return (e.start, e.end)
    raise ValueError(f"no event named {name!r} in the profile: wrap the step in record_function({name!r})")


def windows_of(events: list[ProfileEvent], name: str) -> list[tuple[float, float]]:
    """The intervals of every event called ``name`` (one per profiled step), in order of start."""
    found = sorted((e.start, e.end) for e in events if e.name == name)
    if not found:
        raise ValueError(f"no event named {name!r} in the profile: wrap each step in record_function({name!r})")
    return found


def events_from_torch(prof: Any) -> list[ProfileEvent]:
    """:class:`ProfileEvent` records from a finished ``torch.profiler.profile`` (its ``events()``; duck-typed, so
    this module does not import torch). Microseconds, as the profiler reports them."""
    out = []
    for e in prof.events():
        device = "cuda" if "CUDA" in str(getattr(e, "device_type", "CPU")) else "cpu"
        rng = e.time_range
        out.append(ProfileEvent(e.name, float(rng.start), float(rng.end - rng.start), device, int(getattr(e, "thread", 0))))
    return out
