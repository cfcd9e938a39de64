"""The whole course on one page: Python -> dispatcher -> kernel -> SM -> memory -> network."""

from __future__ import annotations

from matplotlib.figure import Figure

from ..hardware import Accelerator
from .primitives import arrow, box
from .style import SMALL, accelerator, canvas, rate_text, size_text

#: the layers of the course, in the order a call travels through them, with where each is taught
LAYERS: tuple[tuple[str, str, str], ...] = (
    ("Python", "torch.matmul(a, b)", "ch. 2-3"),
    ("dispatcher", "picks a kernel for\ndtype and device", "ch. 2, 8"),
    ("kernel", "a grid of blocks\n(CUDA, Triton)", "ch. 4, 8-10"),
    ("SM", "{sms}", "ch. 4, 7"),
    ("memory", "{mem}", "ch. 5-6"),
    ("network", "{net}", "ch. 11"),
)


def _details(a: Accelerator) -> dict[str, str]:
    sms = f"{a.sm_count} SMs: warps,\ntensor cores" if a.sm_count else "SMs: count not in\nthe course's data"
    l2 = f"L2 {size_text(a.l2_cache)}" if a.l2_cache is not None else "L2 size not in the course's data"
    mem = f"{l2}\nHBM {size_text(a.memory_capacity)}, {rate_text(a.memory_bandwidth, 'TB/s')}"
    net = (f"{rate_text(a.interconnect_bandwidth, 'GB/s')} per\ndirection to peers" if a.interconnect_bandwidth is not None
           else "link speed not in\nthe course's data")
    return {"sms": sms, "mem": mem, "net": net}


def course_map(accel: Accelerator | str | None = None) -> Figure:
    """Six boxes in two rows of three, joined by arrows, one per layer a call goes through (:data:`LAYERS`),
    each with what happens there (sizes of ``accel``, default the reference GPU) and the chapters that teach it."""
    a = accelerator(accel)
    d = _details(a)
    fig, ax = canvas(7.0, 3.9, (0, 12), (0, 6.6), f"From Python to silicon on the {a.name}")
    w, h = 3.2, 2.0
    xs = (0.3, 4.4, 8.5)
    for i, (name, what, where) in enumerate(LAYERS):
        row, col = divmod(i, 3)
        x = xs[col] if row == 0 else xs[2 - col]  # a snake: the second row runs right to left
        y = 3.9 if row == 0 else 0.5
        role = "host" if i < 2 else ("compute" if i < 4 else ("memory" if i == 4 else "slow"))
        box(ax, x, y, w, h, "", role, gid="layer")
        ax.text(x + w / 2, y + h - 0.35, name, ha="center", va="center", fontsize=11, weight="bold",
                color="white" if role == "slow" else "black", gid="layer-name",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5} if role == "memory" else None)
        ax.text(x + w / 2, y + 0.85, what.format(**d), ha="center", va="center", fontsize=SMALL,
                color="white" if role == "slow" else "black",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5} if role == "memory" else None)
        ax.text(x + w - 0.05, y + 0.12, where, ha="right", va="bottom", fontsize=7.5,
                color="white" if role == "slow" else "black")
        if i in (0, 1):
            arrow(ax, (x + w, y + h / 2), (xs[col + 1], y + h / 2))
        elif i == 2:
            arrow(ax, (x + w / 2, y), (x + w / 2, 0.5 + h))
        elif i in (3, 4):
            arrow(ax, (x, y + h / 2), (xs[1 - (i - 3)] + w, y + h / 2))
    return fig
