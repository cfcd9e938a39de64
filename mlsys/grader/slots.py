"""Sharing one machine between N gradings at once: a GPU each, the CPU cores split evenly.

``teach grade --jobs N`` grades N submissions at a time. Each runs in a *slot*:

* one GPU, pinned through ``CUDA_VISIBLE_DEVICES`` (every process of the grading, the sandboxes and
  the trusted performance process included, sees only that GPU), so two performance measurements
  never share a GPU; where performance is timed on CUDA, N may not exceed the number of GPUs;
* ``len(cores) // N`` CPU cores of its own (``taskset``; ``OMP_NUM_THREADS`` to match), so a
  submission's CPU work (Triton's interpreter, torch's threads) does not slow its neighbour's timings.
  With more jobs than cores, slots share cores round-robin (correctness grading only: fine).

A Slurm task gets its GPU and cores from Slurm (``--gres``, ``--cpus-per-task``) and runs without a slot.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

__all__ = ["Slot", "visible_gpus", "make_slots"]


@dataclass(frozen=True)
class Slot:
    """Where one grading runs: CPU core ids and at most one GPU (an id as CUDA_VISIBLE_DEVICES takes it)."""

    index: int
    cores: tuple[int, ...]
    gpu: str | None = None

    def env(self) -> dict[str, str]:
        """Variables for every process of this grading: the pinned GPU and a thread count to match the cores."""
        env = {"OMP_NUM_THREADS": str(len(self.cores)), "MKL_NUM_THREADS": str(len(self.cores))}
        # no GPU: an empty list hides every GPU, so a CPU slot never touches a neighbour's GPU
        env["CUDA_VISIBLE_DEVICES"] = self.gpu if self.gpu is not None else ""
        return env

    def prefix(self) -> list[str]:
        """Command prefix that pins a process (and everything it starts) to this slot's cores."""
        taskset = shutil.which("taskset")
        return [taskset, "-c", ",".join(map(str, self.cores))] if taskset else []


def visible_gpus() -> list[str]:
    """GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else one per ``nvidia-smi -L`` line."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [g.strip() for g in given.split(",") if g.strip() and g.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(ln for ln in out.splitlines() if ln.startswith("GPU "))]


def make_slots(jobs: int, *, gpus: list[str], timed_on_gpu: bool, cores: list[int] | None = None) -> list[Slot]:
    """``jobs`` slots over ``cores`` (default: this process's affinity) and ``gpus``.

    ``timed_on_gpu``: performance cells are timed on CUDA, so each slot needs a GPU of its own; asking
    for more jobs than GPUs is refused (two timings on one GPU would slow each other: unfair grades).
    Without GPU timing, slots take the GPUs round-robin (correctness may still run on a GPU) or none.
    """
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs: expected a positive integer, got {jobs!r}")
    cores = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if not cores:
        raise ValueError("no CPU core available to this process")
    if timed_on_gpu and jobs > len(gpus):
        raise ValueError(f"--jobs {jobs} with performance timed on CUDA needs {jobs} GPUs, found {len(gpus)} "
                         f"({', '.join(gpus) or 'none'}): two timings on one GPU would be unfair; "
                         f"use --jobs {max(1, len(gpus))}, or --perf off to grade correctness only")
    slots = []
    share = len(cores) // jobs
    for i in range(jobs):
        mine = tuple(cores[i * share:(i + 1) * share]) if share else (cores[i % len(cores)],)
        gpu = gpus[i % len(gpus)] if gpus else None
        slots.append(Slot(i, mine, gpu))
    return slots
