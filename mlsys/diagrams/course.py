"""The whole course on one page: Python -> dispatcher -> kernel -> SM -> memory -> network."""

from __future__ import annotations

from matplotlib.figure import Figure

from ..hardware import Accelerator
from .primitives import arrow, box
from .style import SMALL, accelerator, canvas, rate_text, size_text

#: the layers of the course, in the order a call travels through them, with the chapter files that teach
#: each (the part of ``chapters/NN_name.md`` before the first underscore); their numbers come from the book
LAYERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Python", "torch.matmul(a, b)", ("02", "03")),
    ("dispatcher", "picks a kernel for\ndtype and device", ("02", "08")),
    ("kernel", "a grid of blocks\n(CUDA, Triton)", ("04", "08", "09", "10")),
    ("SM", "{sms}", ("04", "07")),
    ("memory", "{mem}", ("05", "06")),
    ("network", "{net}", ("11",)),
)


def chapter_label(files: tuple[str, ...], numbers: dict[str, int] | None = None) -> str:
    """``("04", "08", "09", "10")`` -> ``"ch. 4, 9-11"``: the numbers the book shows for those chapter files
    (``numbers``: ``chapters/NN_name -> number``, default :func:`mlsys.plan.chapter_numbers`, read from
    ``_toc.yml``), runs of consecutive numbers joined by a dash. A file the book does not number is an error."""
    if numbers is None:
        from ..plan import chapter_numbers

        numbers = chapter_numbers()
    found = []
    for short in files:
        match = [n for f, n in numbers.items() if f.startswith("chapters/") and f[len("chapters/"):].split("_")[0] == short]
        if len(match) != 1:
            raise ValueError(f"chapter file {short!r}: expected one numbered chapters/{short}_*, found {len(match)}")
        found.append(match[0])
    runs: list[list[int]] = []
    for n in sorted(set(found)):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return "ch. " + ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


def _details(a: Accelerator) -> dict[str, str]:
    sms = f"{a.sm_count} SMs: warps,\ntensor cores" if a.sm_count else "SMs: count not in\nthe course's data"
    l2 = f"L2 {size_text(a.l2_cache)}" if a.l2_cache is not None else "L2 size not in the course's data"
    mem = f"{l2}\nHBM {size_text(a.memory_capacity)}, {rate_text(a.memory_bandwidth, 'TB/s')}"
    net = (f"{rate_text(a.interconnect_bandwidth, 'GB/s')} per\ndirection to peers" if a.interconnect_bandwidth is not None
           else "link speed not in\nthe course's data")
    return {"sms": sms, "mem": mem, "net": net}


def course_map(accel: Accelerator | str | None = None, numbers: dict[str, int] | None = None) -> Figure:
    """Six boxes in two rows of three, joined by arrows, one per layer a call goes through (:data:`LAYERS`),
    each with what happens there (sizes of ``accel``, default the reference GPU) and the chapters that teach it,
    numbered as the book numbers them (``numbers``, see :func:`chapter_label`)."""
    a = accelerator(accel)
    d = _details(a)
    if numbers is None:
        from ..plan import chapter_numbers

        numbers = chapter_numbers()
    fig, ax = canvas(7.0, 3.9, (0, 12), (0, 6.6), f"From Python to silicon on the {a.name}")
    w, h = 3.2, 2.0
    xs = (0.3, 4.4, 8.5)
    for i, (name, what, files) in enumerate(LAYERS):
        where = chapter_label(files, numbers)
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
