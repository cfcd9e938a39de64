"""The course plan in one place: the six labs (what each builds, where it runs, learner hours, the chapter
that teaches it), the hours of reading and exercises, and week-by-week reading paths for a 10-week and a
14-week course. Both paths meet the labs in the order of their numbers, as the book's "Labs" part lists them.

The landing page (``intro.md``) and the teachers' syllabus both read it, so they never disagree.

Hours are a learner's who knows PyTorch but has never written a kernel, from the reader review of
2026-12-01 (``reviews/reader.md``, section 3): lab hours as (low, high) ranges; reading at 120 words a
minute plus figures and code (:mod:`mlsys.book.readability` measures it from the built book); chapter
exercises at about 8 minutes each.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Lab:
    """One lab: its folder under ``labs/release``, what the learner builds, where it runs, hours."""

    folder: str
    title: str
    chapter: str  # the chapter file that teaches it (chapters/NN_name); the lab's page says "read it first"
    builds: str
    runs_on: str
    hours: tuple[float, float]  # (low, high) learner hours


LABS: tuple[Lab, ...] = (
    Lab("lab1_roofline", "Roofline", "chapters/06_roofline",
        "count FLOPs and bytes, measure your machine's roofs, place kernels under them",
        "CPU or Colab; a GPU measures its own roofs", (1.5, 3)),
    Lab("lab2_tiled_matmul", "Tiled matmul", "chapters/09_tiling",
        "a tiled Triton matmul, grouped and autotuned, timed against cuBLAS",
        "CPU or Colab; a GPU for speed", (6, 10)),
    Lab("lab3_fusion", "Fusion", "chapters/10_fusion_and_compilers",
        "fused element-wise and softmax kernels in Triton, against eager PyTorch and torch.compile",
        "CPU or Colab; a GPU for speed", (3, 5)),
    Lab("lab4_collectives", "Collectives", "chapters/11_many_gpus",
        "a ring all-reduce from point-to-point sends, and a fitted alpha-beta model",
        "CPU; two or more GPUs for speed", (3, 5)),
    Lab("lab5_attention", "FlashAttention", "chapters/10a_attention",
        "an online softmax, then a FlashAttention kernel in Triton",
        "CPU or Colab; a GPU for speed", (6, 10)),
    Lab("lab6_profiling", "Where did the time go?", "chapters/14_profiling",
        "profile a slow transformer step, find its three causes, fix them and show the new profile",
        "CPU or Colab; graded on a CPU", (3, 5)),
)

#: hours of careful reading of the whole book, and of its chapter exercises (the review's totals)
READING_HOURS = 9
EXERCISE_HOURS = 9

#: the chapters of Part I, read in order by everyone (Measuring a GPU closes it: later chapters use its roofs)
PART1 = ("chapters/01_why_accelerators", "chapters/02_journey_of_a_matmul", "chapters/03_host_and_device",
         "chapters/04_execution_model", "chapters/05_memory_hierarchy", "chapters/20_measuring_a_gpu")


@dataclass(frozen=True)
class Week:
    """One week of a course: the chapters read (short names) and the lab worked on, if any."""

    chapters: tuple[str, ...]
    lab: str | None = None


#: a 10-week course: Part I in three weeks, the kernels of Part II, collectives; chapters 12, 13, 15 optional.
#: Attention and collectives are read in one week, so Lab 4 comes before Lab 5 as the numbers say.
TEN_WEEKS: tuple[Week, ...] = (
    Week(("01", "02")), Week(("03", "04")), Week(("05", "20")), Week(("06",), "lab1_roofline"),
    Week(("07", "08")), Week(("09",), "lab2_tiled_matmul"), Week(("10",), "lab3_fusion"),
    Week(("10a", "11"), "lab4_collectives"), Week((), "lab5_attention"), Week(("14",), "lab6_profiling")
)
#: a 14-week course: every chapter, a lab every two or three weeks, in the order of their numbers
FOURTEEN_WEEKS: tuple[Week, ...] = (
    Week(("01",)), Week(("02", "03")), Week(("04",)), Week(("05", "20")), Week(("06",), "lab1_roofline"),
    Week(("07",)), Week(("08",)), Week(("09",), "lab2_tiled_matmul"), Week((), "lab2_tiled_matmul"),
    Week(("10",), "lab3_fusion"), Week(("10a",)), Week(("11",), "lab4_collectives"),
    Week(("12", "13"), "lab5_attention"), Week(("14", "15"), "lab6_profiling"),
)


def lab_hours() -> tuple[float, float]:
    """Total learner hours of the six labs, (low, high)."""
    return sum(lab.hours[0] for lab in LABS), sum(lab.hours[1] for lab in LABS)


def total_hours() -> tuple[float, float]:
    """Reading + exercises + labs, (low, high), in hours."""
    low, high = lab_hours()
    return READING_HOURS + EXERCISE_HOURS + low, READING_HOURS + EXERCISE_HOURS + high


def lab(folder: str) -> Lab:
    """The lab in ``labs/release/<folder>``; a name that is none of the six raises ValueError."""
    for x in LABS:
        if x.folder == folder:
            return x
    raise ValueError(f"no lab {folder!r}; expected one of {[x.folder for x in LABS]}")


def chapter_numbers(root: Path | None = None) -> dict[str, int]:
    """``chapters/NN_name -> the number the book shows``, read from ``_toc.yml``: the chapters of the
    numbered parts, counted in order across parts (as Sphinx numbers them, and as the labs' chapter lines do)."""
    import yaml

    root = Path(root) if root is not None else Path(__file__).resolve().parents[1]
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    numbers: dict[str, int] = {}
    for part in toc.get("parts", []):
        for chapter in part.get("chapters", []):
            if part.get("numbered"):
                numbers[chapter["file"]] = len(numbers) + 1
    return numbers


def chapter_file(short: str) -> str:
    """``"04"`` -> ``"chapters/04_execution_model"`` (the file under chapters/ whose name starts so)."""
    found = sorted(Path(__file__).resolve().parents[1].joinpath("chapters").glob(f"{short}_*.md"))
    if len(found) != 1:
        raise ValueError(f"chapter {short!r}: expected one chapters/{short}_*.md, found {len(found)}")
    return f"chapters/{found[0].stem}"
