"""A profiler timeline: CPU and GPU lanes from a list of events, with the GPU's idle gaps marked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from matplotlib.figure import Figure

from .primitives import bar
from .style import SMALL, VERMILLION, canvas


class TraceEvent(NamedTuple):
    """One span of a trace: ``lane`` ("CPU" or "GPU"), ``name``, ``start`` and ``end`` (µs)."""

    lane: str
    name: str
    start: float
    end: float


def idle_gaps(events: Sequence[TraceEvent], lane: str = "GPU", min_gap: float = 0.0) -> list[tuple[float, float]]:
    """Intervals between the first start and last end of ``lane``'s events that no event of it covers,
    longer than ``min_gap``."""
    spans = sorted((e.start, e.end) for e in events if e.lane == lane)
    gaps = []
    if not spans:
        return gaps
    covered = spans[0][1]
    for s, e in spans[1:]:
        if s - covered > min_gap:
            gaps.append((covered, s))
        covered = max(covered, e)
    return gaps


def _check(events: Sequence[TraceEvent]) -> list[TraceEvent]:
    evs = [TraceEvent(*e) for e in events]
    if not evs:
        raise ValueError("profiler_timeline needs at least one event (lane, name, start, end)")
    for e in evs:
        if e.lane not in ("CPU", "GPU") or not e.end > e.start:
            raise ValueError(f"expected events with lane 'CPU' or 'GPU' and end > start, got {e!r}")
    return evs


def profiler_timeline(events: Sequence[TraceEvent], title: str = "A profiler timeline", min_gap: float = 0.0) -> Figure:
    """Two lanes, CPU above GPU, one bar per event (labelled when wide enough); every GPU gap longer than
    ``min_gap`` between kernels is hatched and marked "idle", and the GPU's busy share is printed."""
    evs = _check(events)
    t0 = min(e.start for e in evs)
    t1 = max(e.end for e in evs)
    span = t1 - t0
    fig, ax = canvas(7.0, 2.6, (t0 - 0.16 * span, t1 + 0.02 * span), (-0.2, 3.6), title, equal=False)
    for e in evs:
        wide = (e.end - e.start) > 0.07 * span
        bar(ax, 2.4 if e.lane == "CPU" else 1.0, e.start, e.end - e.start, e.name if wide else "",
            "host" if e.lane == "CPU" else "compute", gid=f"event-{e.lane}")
    gaps = idle_gaps(evs, "GPU", min_gap)
    for s, e in gaps:
        bar(ax, 1.0, s, e - s, "idle" if (e - s) > 0.06 * span else "", "idle", gid="idle")
    ax.text(t0 - 0.02 * span, 2.4, "CPU", ha="right", va="center", fontsize=SMALL)
    ax.text(t0 - 0.02 * span, 1.0, "GPU", ha="right", va="center", fontsize=SMALL)
    gpu = [e for e in evs if e.lane == "GPU"]
    if gpu:
        first, last = min(e.start for e in gpu), max(e.end for e in gpu)
        busy = (last - first) - sum(e - s for s, e in gaps)
        ax.text(t0, 0.05, f"GPU busy {busy / (last - first):.0%} of its span; hatched: idle", fontsize=SMALL,
                color=VERMILLION, gid="busy")
    return fig
