"""The memory hierarchy with each level's capacity, latency and bandwidth; coalescing of a warp's loads."""

from __future__ import annotations

from collections.abc import Mapping

from matplotlib.figure import Figure

from ..hardware import Accelerator
from ..memory_access import SECTOR_BYTES, WARP_SIZE, sectors_per_warp
from .primitives import box, missing
from .style import GREY, SMALL, TEXT, accelerator, canvas, rate_text, size_text

#: the levels drawn, fastest first
LEVELS = ("registers", "shared memory / L1", "L2 cache", "HBM")


def level_capacities(a: Accelerator) -> dict[str, object]:
    """Capacity of each level for the whole chip: per-SM figures times ``sm_count``; ``None`` if unknown."""
    per_sm = {"registers": a.register_file_per_sm, "shared memory / L1": a.shared_memory_per_sm}
    out: dict[str, object] = {}
    for name, q in per_sm.items():
        out[name] = q * a.sm_count if q is not None and a.sm_count else None
    out["L2 cache"] = a.l2_cache
    out["HBM"] = a.memory_capacity
    return out


def _fmt(value: object, unit: str) -> str:
    if unit == "ns":
        return f"{float(value.to('ns').m):.0f} ns"  # type: ignore[attr-defined]
    return rate_text(value, unit)


def memory_hierarchy(accel: Accelerator | str | None = None, latency: Mapping[str, object] | None = None,
                     bandwidth: Mapping[str, object] | None = None) -> Figure:
    """A pyramid of :data:`LEVELS`, narrow and fast at the top, wide and slow at the bottom, each labelled
    with its capacity on the whole chip (from ``accel``), its latency and its bandwidth.

    ``latency`` and ``bandwidth`` map level names to quantities (measured figures a chapter passes in);
    HBM's bandwidth defaults to the datasheet's ``memory_bandwidth``. Every figure neither the data
    file nor the arguments give is written as "not in the course's data".
    """
    a = accelerator(accel)
    latency = dict(latency or {})
    bandwidth = {"HBM": a.memory_bandwidth, **(bandwidth or {})}
    for name in [*latency, *bandwidth]:
        if name not in LEVELS:
            raise ValueError(f"unknown level {name!r}; expected one of {', '.join(LEVELS)}")
    caps = level_capacities(a)
    fig, ax = canvas(7.0, 4.6, (0, 12), (0, 8.6), f"Memory hierarchy of the {a.name} (whole chip)")
    roles = ("compute", "memory", "memory", "slow")
    for i, name in enumerate(LEVELS):
        y = 6.4 - i * 1.95
        w = 2.2 + i * 1.0
        cap = caps[name]
        box(ax, 3.2 - w / 2, y, w, 1.6, name, roles[i], size=TEXT, gid="level")
        cap_text = size_text(cap) if cap is not None else None
        ax.text(6.1, y + 1.2, "capacity: " + (cap_text or ""), fontsize=SMALL, va="center", gid="capacity")
        if cap_text is None:
            missing(ax, 7.5, y + 1.2)
        for j, (what, figs, unit) in enumerate((("latency", latency, "ns"), ("bandwidth", bandwidth, "TB/s"))):
            yy = y + 0.7 - j * 0.5
            if name in figs:
                ax.text(6.1, yy, f"{what}: {_fmt(figs[name], unit)}", fontsize=SMALL, va="center", gid=what)
            else:
                ax.text(6.1, yy, f"{what}:", fontsize=SMALL, va="center")
                missing(ax, 7.5 if what == "latency" else 7.9, yy)
    ax.annotate("", xy=(0.15, 0.2), xytext=(0.15, 7.9), arrowprops={"arrowstyle": "-|>", "color": GREY})
    ax.text(0.3, 0.2, "larger, slower", fontsize=7.5, color=GREY, rotation=90, va="bottom")
    return fig


def _lanes_panel(ax, y: float, stride: int, itemsize: int, n_sectors_drawn: int) -> int:
    """Lanes at height ``y``, the sectors they touch one row below; returns the sectors touched."""
    lane_w = 11.0 / WARP_SIZE
    sec_w = 11.0 / n_sectors_drawn
    per_sector = SECTOR_BYTES // itemsize
    touched = sorted({(lane * stride) // per_sector for lane in range(WARP_SIZE)})
    for lane in range(WARP_SIZE):
        box(ax, 0.5 + lane * lane_w, y, lane_w * 0.9, 0.5, "", "compute", gid="lane", lw=0.3)
        sector = (lane * stride) // per_sector
        ax.plot([0.5 + (lane + 0.45) * lane_w, 0.5 + (sector + 0.5) * sec_w], [y, y - 1.0], color=GREY, lw=0.5)
    for s in range(n_sectors_drawn):
        role = "memory" if s in touched else "plain"
        box(ax, 0.5 + s * sec_w, y - 1.5, sec_w * 0.92, 0.5, "", role, gid="sector-touched" if s in touched else "sector",
            lw=0.3)
    return len(touched)


def coalescing(strides: tuple[int, int] = (1, 8), itemsize: int = 4) -> Figure:
    """Two panels: 32 lanes of a warp each loading ``itemsize`` bytes at element ``lane * stride``, and the
    32-byte sectors the memory system moves for them (touched ones shaded), for each stride in ``strides``.
    The count printed is :func:`mlsys.memory_access.sectors_per_warp`."""
    if len(strides) != 2:
        raise ValueError(f"expected two strides to compare, got {strides!r}")
    fig, ax = canvas(7.0, 4.2, (0, 12), (0, 7.4), "Coalescing: 32 lanes against 32-byte sectors")
    # one byte scale for both panels: as many sectors as the wider access spans (at most one per lane)
    drawn = min(WARP_SIZE, max(-(-((WARP_SIZE - 1) * s * itemsize + itemsize) // SECTOR_BYTES) for s in strides))
    for k, stride in enumerate(strides):
        y = 5.9 - k * 3.3
        n = _lanes_panel(ax, y, stride, itemsize, drawn)
        assert n == sectors_per_warp(stride, itemsize)
        useful = WARP_SIZE * itemsize
        ax.text(0.5, y + 0.85, f"stride {stride}: 32 lanes x {itemsize} B = {useful} B asked, {n} sectors = "
                f"{n * SECTOR_BYTES} B moved ({useful / (n * SECTOR_BYTES):.0%} useful)", fontsize=SMALL, gid="summary")
        ax.text(11.6, y + 0.25, "lanes", fontsize=7.5, ha="left", va="center")
        ax.text(11.6, y - 1.25, "sectors", fontsize=7.5, ha="left", va="center")
    return fig
