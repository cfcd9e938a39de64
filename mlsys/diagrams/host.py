"""Host and device: the command queue, and two streams overlapping copies with compute."""

from __future__ import annotations

from matplotlib.figure import Figure

from ..units import as_quantity
from .primitives import bar
from .style import SMALL, TEXT, canvas


def stream_times(copy: float, compute: float, chunks: int) -> tuple[float, float]:
    """Makespans of ``chunks`` (copy, compute) pairs, each chunk's copy taking ``copy / chunks`` and its
    compute ``compute / chunks``: one stream runs them in turn, ``copy + compute``; two streams overlap
    the copy of chunk i+1 with the compute of chunk i: ``c + (chunks - 1) max(c, k) + k``."""
    c, k = copy / chunks, compute / chunks
    return copy + compute, c + (chunks - 1) * max(c, k) + k


def streams_overlap(copy: object = 1.0, compute: object = 0.6, chunks: int = 4) -> Figure:
    """Three timelines. Top: the host's command queue, the CPU enqueueing ``chunks`` copies and kernels and
    moving on at once. Middle: one stream, each chunk's copy then its kernel. Bottom: copies on one
    stream and kernels on another, the copy of chunk i+1 overlapping the kernel of chunk i.

    ``copy`` and ``compute`` are total times (seconds as numbers or quantities; relative units are fine):
    a chapter passes its recorded ``copy_only`` and ``compute_only`` times.
    """
    if chunks < 1:
        raise ValueError(f"chunks must be a positive integer, got {chunks!r}")
    c_tot = float(as_quantity(copy, "s", "copy").to("s").m) if not isinstance(copy, (int, float)) else float(copy)
    k_tot = float(as_quantity(compute, "s", "compute").to("s").m) if not isinstance(compute, (int, float)) else float(compute)
    if c_tot <= 0 or k_tot <= 0:
        raise ValueError(f"copy and compute must be positive times, got {copy!r} and {compute!r}")
    one, two = stream_times(c_tot, k_tot, chunks)
    scale = 10.0 / one
    c, k = c_tot / chunks * scale, k_tot / chunks * scale
    fig, ax = canvas(7.0, 3.8, (-2.9, 10.6), (0, 6.6), "Host and device: a queue of commands, one or two streams",
                     equal=False)
    launch = 0.25
    for i in range(chunks):
        bar(ax, 5.8, 2 * i * launch, launch * 0.9, "", "host", height=0.6, gid="enqueue")
        bar(ax, 5.8, (2 * i + 1) * launch, launch * 0.9, "", "host", height=0.6, gid="enqueue")
    ax.text(2 * chunks * launch + 0.2, 5.8, "CPU enqueues every copy and kernel, then is free", fontsize=SMALL,
            va="center")
    t = 0.0
    for i in range(chunks):
        bar(ax, 4.1, t, c, f"H2D {i}", "memory", gid="copy-1")
        bar(ax, 4.1, t + c, k, f"K {i}", "compute", gid="kernel-1")
        t += c + k
    done_c, done_k = 0.0, 0.0
    for i in range(chunks):
        bar(ax, 2.4, done_c, c, f"H2D {i}", "memory", gid="copy-2")
        done_c += c
        start = max(done_c, done_k)
        bar(ax, 1.3, start, k, f"K {i}", "compute", gid="kernel-2")
        done_k = start + k
    for y, name in ((5.8, "host queue"), (4.1, "one stream"), (2.4, "stream 1: copy"), (1.3, "stream 2: compute")):
        ax.text(-0.15, y, name, fontsize=SMALL, ha="right", va="center")
    ax.text(one * scale, 4.75, f"{one / one:.0%}", fontsize=SMALL, ha="right", gid="total-1")
    ax.text(two * scale, 0.55, f"{two / one:.0%} of one stream's time", fontsize=TEXT, ha="right", gid="total-2")
    ax.plot([0, 10], [0.3, 0.3], color="0.5", lw=0.8)
    ax.text(10, 0.05, "time", fontsize=SMALL, ha="right", va="bottom")
    return fig
