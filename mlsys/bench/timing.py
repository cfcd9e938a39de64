"""Timing done right: warm-up, repeats, and the minimum, median and maximum of the repeats.

A measured time is only worth quoting with how it was taken. :class:`Timing` keeps every
repeat (in seconds) together with the method, the number of warm-up calls and how caches were
treated, so a JSON file written from it says what was timed and how.

On a CPU, each call is bracketed by ``time.perf_counter()``. On a CUDA GPU, work is
asynchronous: each call is bracketed by two CUDA events recorded on the stream, and the L2
cache is flushed before every timed call by *reading* a buffer larger than it (otherwise a
kernel that reads 40 MB would find its inputs still in a 50 MB L2 and run faster than it
ever will in a real model). The median of the repeats is the figure quoted; the minimum and
maximum show the spread.

Why reading and not writing: a flush that *writes* its buffer leaves up to an L2's worth of
dirty lines behind, and their write-back to HBM lands inside the next timed kernel. On an H200
(review of 2026-12-01) a 1x4096 by 4096x4096 bf16 GEMV took 17.3 us after a 256 MiB write-flush
and 14.4 us after a read-only one; LayerNorm 96.2 against 92.8 us. A read sweep (a sum over the
buffer) evicts the previous call's dirty lines *during the flush* and leaves only clean lines.
The old flush stays selectable (``flush_mode="write"``) for the side-by-side, and every
:class:`Timing` records which flush it used (``flush_mode`` in its JSON).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Timing", "time_cpu", "time_cuda", "time_fn", "choose_repeats", "CheckFailed", "cpu_cache_bytes",
           "l2_flush_bytes", "spin_up", "time_interleaved", "relative_spread", "drop_exceeds_spread",
           "FLUSH_MODES", "DEFAULT_FLUSH_MODE", "L2Flusher", "l2_flusher", "time_flush_modes"]

FLUSH_MODES = ("read", "write")
"""How the GPU's L2 is cleared before a timed call: ``"read"`` sums a buffer larger than the L2 (no
dirty lines left in the timed window), ``"write"`` zeroes it (the flush of the course's records made
before 2026-12-02; kept for the side-by-side of ``scripts/gpu/flush_bias.py``)."""

DEFAULT_FLUSH_MODE = "read"
"""The flush every timing uses unless told otherwise."""


class CheckFailed(AssertionError):
    """A benchmarked function returned a wrong result after it was timed."""


@dataclass(frozen=True)
class Timing:
    """Repeated timings of one callable.

    ``times`` are seconds, one per timed call (after ``warmup`` untimed calls).
    ``per_call`` divides each time when one timed call runs the operation several times
    (e.g. 100 launches in a loop): ``median`` etc. are then per operation.
    """

    what: str
    method: str
    times: tuple[float, ...]
    warmup: int
    flush: str
    per_call: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    flush_mode: str = "none"

    def __post_init__(self) -> None:
        if not self.times:
            raise ValueError(f"Timing of {self.what!r} needs at least one time, got none")
        if any((not isinstance(t, (int, float))) or t != t or t < 0 for t in self.times):
            raise ValueError(f"Timing of {self.what!r}: times must be non-negative seconds, got {self.times!r}")
        if self.per_call < 1:
            raise ValueError(f"per_call must be a positive count, got {self.per_call}")
        if self.flush_mode not in (*FLUSH_MODES, "none", "cpu-write"):
            raise ValueError(f"flush_mode must be one of {FLUSH_MODES}, 'none' or 'cpu-write', got {self.flush_mode!r}")

    @property
    def repeats(self) -> int:
        """Number of timed calls."""
        return len(self.times)

    @property
    def min(self) -> float:
        """Fastest repeat, seconds per operation."""
        return min(self.times) / self.per_call

    @property
    def median(self) -> float:
        """Median repeat, seconds per operation (the figure to quote)."""
        return statistics.median(self.times) / self.per_call

    @property
    def max(self) -> float:
        """Slowest repeat, seconds per operation."""
        return max(self.times) / self.per_call

    @property
    def spread(self) -> float:
        """Run-to-run spread, ``(max - min) / median`` (see :func:`relative_spread`)."""
        return relative_spread(self)

    def to_json(self) -> dict[str, Any]:
        """The statistics and method as a JSON-ready dict (times in seconds)."""
        return {
            "what": self.what,
            "method": self.method,
            "unit": "s",
            "min": self.min,
            "median": self.median,
            "max": self.max,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "flush": self.flush,
            "flush_mode": self.flush_mode,
            "per_call": self.per_call,
        }


def relative_spread(timing: Timing | Mapping[str, Any]) -> float:
    """Run-to-run spread of one timed point: ``(slowest - fastest repeat) / median``, a fraction.

    ``timing`` is a :class:`Timing` or its recorded form (a dict with ``min``, ``median`` and ``max``,
    as :meth:`Timing.to_json` writes it into a record).
    """
    get = (lambda k: getattr(timing, k)) if isinstance(timing, Timing) else timing.__getitem__
    lo, mid, hi = (float(get(k)) for k in ("min", "median", "max"))
    if not 0 < lo <= mid <= hi:
        raise ValueError(f"relative_spread: expected 0 < min <= median <= max, got {lo}, {mid}, {hi}")
    return (hi - lo) / mid


def drop_exceeds_spread(before: float, after: float, spread: float) -> bool:
    """Whether a throughput falls from ``before`` to ``after`` by more than ``spread`` (a fraction):
    ``1 - after / before > spread``; the drop is then larger than the run-to-run noise."""
    if before <= 0:
        raise ValueError(f"drop_exceeds_spread: before={before}; expected a positive throughput")
    return 1 - after / before > spread


def choose_repeats(estimate_s: float, budget_s: float, min_repeats: int, max_repeats: int) -> int:
    """How many repeats fit in ``budget_s`` at ``estimate_s`` per call, clamped to [min, max].

    ``repeats = clamp(floor(budget_s / estimate_s), min_repeats, max_repeats)``.
    """
    if min_repeats < 1 or max_repeats < min_repeats:
        raise ValueError(f"need 1 <= min_repeats <= max_repeats, got {min_repeats}, {max_repeats}")
    if estimate_s <= 0:
        return max_repeats
    return max(min_repeats, min(max_repeats, int(budget_s / estimate_s)))


def _run_check(check: Callable[[Any], object] | None, result: Any, what: str) -> None:
    if check is None:
        return
    ok = check(result)
    if ok is False:
        raise CheckFailed(f"{what}: the result was wrong after timing")


def cpu_cache_bytes() -> int:
    """Size of the CPU's largest cache in bytes, read from Linux sysfs (0 when unreadable)."""
    import glob

    sizes = [0]
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes)


class _CPUFlusher:
    """Writes a host buffer of ``nbytes`` (``max(2 * largest cache, 64 MiB)``), evicting the caches."""

    def __init__(self) -> None:
        import torch

        self.nbytes = max(2 * cpu_cache_bytes(), 64 * 2**20)
        self.buffer = torch.empty(self.nbytes // 4, dtype=torch.int32)

    def __call__(self) -> None:
        # through torch, so its worker threads stay awake for the timed call
        self.buffer.add_(1)


_CPU_FLUSHER: list[_CPUFlusher] = []


def time_cpu(
    fn: Callable[[], Any],
    *,
    what: str,
    repeats: int = 20,
    warmup: int = 3,
    check: Callable[[Any], object] | None = None,
    per_call: int = 1,
    flush: bool = False,
    budget_s: float | None = None,
    max_repeats: int = 1000,
    timer: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Time ``fn()`` on the host: ``warmup`` untimed calls, then ``repeats`` calls each
    bracketed by ``timer()`` (``time.perf_counter``, seconds).

    With ``flush``, a buffer of ``max(2 * largest CPU cache, 64 MiB)`` is written before each
    timed call, so no call finds its inputs in cache. With ``budget_s``, the repeat count grows
    from ``repeats`` up to ``max_repeats`` to fill about ``budget_s`` seconds of timing: the first
    timed call and the flush before it (``time.perf_counter``) set the pace, since on a CPU the
    flush (tens of ms) can cost far more than a small call (a 1000-element copy timed 1000 times,
    each after a 64 MiB flush, took tens of seconds where 0.1 s was asked for).
    ``check(result)`` runs on the last call's result after timing and must not return
    ``False`` (it may also raise).
    """
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    flusher: _CPUFlusher | None = None
    flush_text = "none: caches are not flushed"
    if flush:
        if not _CPU_FLUSHER:
            _CPU_FLUSHER.append(_CPUFlusher())
        flusher = _CPU_FLUSHER[0]
        flush_text = f"CPU caches flushed before each timed call by writing {flusher.nbytes} bytes"
    result = None
    for _ in range(warmup):
        result = fn()
    times: list[float] = []
    target = repeats
    while len(times) < target:
        flush_s = 0.0
        if flusher is not None:
            f0 = time.perf_counter()
            flusher()
            flush_s = time.perf_counter() - f0
        t0 = timer()
        result = fn()
        t1 = timer()
        times.append(t1 - t0)
        if budget_s is not None and len(times) == 1:
            target = choose_repeats(times[0] + flush_s, budget_s, repeats, max_repeats)
    _run_check(check, result, what)
    return Timing(what, "time.perf_counter around each call", tuple(times), warmup,
                  flush_text, per_call, flush_mode="cpu-write" if flusher is not None else "none")


class L2Flusher:
    """Evicts whatever the L2 cache held by sweeping a buffer of ``nbytes`` (larger than the L2).

    ``mode="read"``: sum the buffer into a one-element tensor. The sweep reads ``nbytes`` and
    writes 4 bytes; dirty lines left by the previous call are written back during the sweep, and
    what stays in the L2 is clean. ``mode="write"``: zero the buffer (``nbytes`` written): the
    lines it leaves are dirty, and their write-back falls into whatever runs next.
    The buffer is zeroed and synchronised once, at construction, so the read sweep reads finite
    values.
    """

    def __init__(self, nbytes: int, device: Any, mode: str = DEFAULT_FLUSH_MODE) -> None:
        import torch

        if mode not in FLUSH_MODES:
            raise ValueError(f"L2 flush mode must be one of {FLUSH_MODES}, got {mode!r}")
        if int(nbytes) < 4:
            raise ValueError(f"L2 flush buffer needs at least 4 bytes, got {nbytes}")
        self.nbytes = int(nbytes)
        self.mode = mode
        self.buffer = torch.zeros(self.nbytes // 4, dtype=torch.float32, device=device)
        self.sink = torch.zeros((), dtype=torch.float32, device=device)
        if self.buffer.is_cuda:
            torch.cuda.synchronize(self.buffer.device)

    def __call__(self) -> None:
        import torch

        if self.mode == "read":
            torch.sum(self.buffer, dim=0, out=self.sink)
        else:
            self.buffer.zero_()

    def describe(self) -> str:
        """The sentence a timing record keeps in its ``flush`` field."""
        if self.mode == "read":
            return (f"L2 flushed before each timed call by reading {self.nbytes} bytes (a sum over a buffer "
                    "larger than the L2; no dirty lines are left for the timed call to write back)")
        return (f"L2 flushed before each timed call by writing {self.nbytes} bytes (dirty lines are left, "
                "and their write-back can fall into the timed call)")


_L2Flusher = L2Flusher  # the old private name


def l2_flush_bytes(device: Any = None) -> int:
    """Bytes to sweep to evict the L2: ``max(2 * L2 size, 256 MiB)``."""
    import torch

    props = torch.cuda.get_device_properties(device)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    return max(2 * l2, 256 * 2**20)


_FLUSHERS: dict[tuple[str, str], L2Flusher] = {}


def l2_flusher(device: Any = None, mode: str = DEFAULT_FLUSH_MODE) -> L2Flusher:
    """The (cached) :class:`L2Flusher` of ``mode`` for CUDA device ``device`` (index; current if None),
    sized by :func:`l2_flush_bytes`."""
    import torch

    if mode not in FLUSH_MODES:
        raise ValueError(f"L2 flush mode must be one of {FLUSH_MODES}, got {mode!r}")
    dev = torch.cuda.current_device() if device is None else int(device)
    key = (str(dev), mode)
    if key not in _FLUSHERS:
        _FLUSHERS[key] = L2Flusher(l2_flush_bytes(dev), f"cuda:{dev}", mode)
    return _FLUSHERS[key]


def time_cuda(
    fn: Callable[[], Any],
    *,
    what: str,
    repeats: int = 20,
    warmup: int = 3,
    check: Callable[[Any], object] | None = None,
    per_call: int = 1,
    flush_l2: bool = True,
    budget_s: float | None = None,
    max_repeats: int = 1000,
    flush_mode: str = DEFAULT_FLUSH_MODE,
) -> Timing:
    """Time ``fn()`` on the current CUDA stream with CUDA events.

    ``warmup`` untimed calls, then for each of ``repeats`` calls: flush the L2 (read, or with
    ``flush_mode="write"`` write, ``max(2 * L2, 256 MiB)`` bytes; see :class:`L2Flusher`) unless
    ``flush_l2`` is false, record a start event,
    call ``fn()``, record an end event. One synchronisation at the end; each time is
    ``start.elapsed_time(end)`` (ms, converted to s). With ``budget_s``, repeats grow up to
    ``max_repeats`` to fill about that long. ``check(result)`` runs after timing.
    """
    import torch

    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    flush: L2Flusher | None = None
    flush_text = "none: the L2 cache is not flushed"
    if flush_l2:
        flush = l2_flusher(None, flush_mode)
        flush_text = flush.describe()
    result = None
    for _ in range(warmup):
        result = fn()
    torch.cuda.synchronize()
    target = repeats
    if budget_s is not None:
        t0 = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        target = choose_repeats(time.perf_counter() - t0, budget_s, repeats, max_repeats)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(target)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(target)]
    for s, e in zip(starts, ends, strict=True):
        if flush is not None:
            flush()
        s.record()
        result = fn()
        e.record()
    torch.cuda.synchronize()
    times = tuple(s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends, strict=True))
    _run_check(check, result, what)
    return Timing(what, "CUDA events around each call (torch.cuda.Event.elapsed_time)", times,
                  warmup, flush_text, per_call, flush_mode=flush.mode if flush is not None else "none")


def time_fn(fn: Callable[[], Any], device: str, **kwargs: Any) -> Timing:
    """Time ``fn`` with :func:`time_cuda` when ``device`` is ``"cuda"``, else :func:`time_cpu`.

    ``flush_l2`` (default true) flushes the GPU's L2, or on a CPU its caches, before each
    timed call; ``flush_mode`` (GPU only: ``"read"``, the default, or ``"write"``) says how.
    """
    if device == "cuda":
        return time_cuda(fn, **kwargs)
    if device != "cpu":
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    mode = kwargs.pop("flush_mode", DEFAULT_FLUSH_MODE)
    if mode not in FLUSH_MODES:
        raise ValueError(f"flush_mode must be one of {FLUSH_MODES}, got {mode!r}")
    kwargs["flush"] = kwargs.pop("flush_l2", True)
    return time_cpu(fn, **kwargs)


def spin_up(fn: Callable[[], Any], seconds: float = 0.25) -> int:
    """Call ``fn()`` back to back for ``seconds`` (synchronising every 16 calls); return the number of calls.

    A time-based warm-up on top of a count of warm-up calls: five calls of a 60 microsecond kernel last a
    third of a millisecond, while a GPU that idled may still be raising its clocks and power. The Lab 3
    record times a softmax both ways (``softmax_spread``) to show whether it matters on the GPU at hand.
    """
    calls, t_end = 0, time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        fn()
        calls += 1
        if calls % 16 == 0:
            _synchronize()
    return calls


def _synchronize() -> None:
    """Wait for the GPU's queued work, where torch has a GPU."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def time_interleaved(fns: dict[str, Callable[[], Any]], device: str, *, what: str, repeats: int = 20,
                     warmup: int = 3, spin_up_s: float = 0.2, host_gap_s: float = 0.0,
                     flush_mode: str = DEFAULT_FLUSH_MODE) -> dict[str, Timing]:
    """Time several callables call by call in turn, so each sees the same clocks, power and temperature.

    Timing one version for a few dozen milliseconds and then the next compares them at different moments:
    a GPU that has just run a heavy autotuning pass is hotter and may clock lower than it was a second
    earlier, which favours whichever is timed first. Here, after ``warmup`` calls of each and a
    ``spin_up_s`` second :func:`spin_up` of each, every round times each callable once (on a GPU: L2
    flushed, then CUDA events around the call, as :func:`time_cuda`; on a CPU: ``time.perf_counter``
    around the call). Returns ``{name: Timing}``; the median of each is the figure to quote.

    ``host_gap_s`` > 0 (GPU only) queues a GPU spin of that long (``torch.cuda._sleep``, in cycles at the
    SM's maximum clock) between the flush and the start event: while it runs, the host finishes the
    call's Python launch path, so the events bracket the GPU's work and not a launch that a slow Python
    wrapper (an autotuner, descriptors built per call) left the GPU waiting for. The timing record says so.
    """
    if repeats < 1 or warmup < 0 or not fns:
        raise ValueError(f"need callables, repeats >= 1 and warmup >= 0, got {list(fns)}, {repeats}, {warmup}")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
        if device == "cuda":
            spin_up(fn, spin_up_s)
    method = "interleaved: one call of each version per round"
    if device != "cuda":
        if device != "cpu":
            raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(repeats):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        return {name: Timing(f"{what}: {name}", f"time.perf_counter around each call; {method}", tuple(ts), warmup,
                             "none: caches are not flushed") for name, ts in times.items()}
    if flush_mode not in FLUSH_MODES:
        raise ValueError(f"flush_mode must be one of {FLUSH_MODES}, got {flush_mode!r}")
    import torch

    dev = torch.cuda.current_device()
    flush = l2_flusher(dev, flush_mode)
    # cycles at the SM clock (kHz in the properties where torch has it; else 2 GHz, Hopper's top clock)
    khz = getattr(torch.cuda.get_device_properties(dev), "clock_rate", 0) or 2_000_000
    gap_cycles = int(host_gap_s * khz * 1e3) if host_gap_s > 0 else 0
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(repeats)] for name in fns}
    torch.cuda.synchronize()
    for i in range(repeats):
        for name, fn in fns.items():
            flush()
            if gap_cycles:
                torch.cuda._sleep(gap_cycles)
            start, end = events[name][i]
            start.record()
            fn()
            end.record()
    torch.cuda.synchronize()
    flush_text = flush.describe()
    if gap_cycles:
        method += (f"; a {host_gap_s * 1e6:g} us GPU spin before each start event, so host launch overhead "
                   "is not timed")
    return {name: Timing(f"{what}: {name}", f"CUDA events around each call (torch.cuda.Event.elapsed_time); {method}",
                         tuple(s.elapsed_time(e) * 1e-3 for s, e in evs), warmup, flush_text,
                         flush_mode=flush.mode)
            for name, evs in events.items()}


def time_flush_modes(fn: Callable[[], Any], *, what: str, repeats: int = 50, warmup: int = 5,
                     modes: tuple[str, ...] = (*FLUSH_MODES, "none")) -> dict[str, Timing]:
    """Time ``fn()`` after each L2 flush of ``modes`` (``"read"``, ``"write"``, ``"none"``), round by round.

    Each round: for each mode, that flush (none for ``"none"``), a start event, ``fn()``, an end event;
    one synchronisation at the end. The modes alternate call by call, so they share clocks and power:
    the difference between their medians is the flush's effect on the timed call. GPU only.
    """
    import torch

    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got repeats={repeats}, warmup={warmup}")
    bad = [m for m in modes if m not in (*FLUSH_MODES, "none")]
    if bad or not modes:
        raise ValueError(f"modes must be among {(*FLUSH_MODES, 'none')}, got {modes!r}")
    flushers = {m: (l2_flusher(None, m) if m != "none" else None) for m in modes}
    for _ in range(warmup):
        fn()
    events = {m: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(repeats)] for m in modes}
    torch.cuda.synchronize()
    for i in range(repeats):
        for m, flush in flushers.items():
            if flush is not None:
                flush()
            start, end = events[m][i]
            start.record()
            fn()
            end.record()
    torch.cuda.synchronize()
    method = "CUDA events around each call; the flush modes interleaved call by call"
    return {m: Timing(f"{what}: {m}", method, tuple(s.elapsed_time(e) * 1e-3 for s, e in events[m]), warmup,
                      flushers[m].describe() if flushers[m] is not None else "none: the L2 cache is not flushed",
                      flush_mode=m)
            for m in modes}
