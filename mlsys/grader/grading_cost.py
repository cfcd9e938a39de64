"""What grading a class costs: CPU and GPU seconds per submission per lab, from records, and a class's total.

Per submission, per lab:

* **CPU seconds**: ``data/grading/grading_cost_cpu.json`` (``scripts/grading_cost.py``): one instructor
  submission graded by ``teach grade --jobs 1`` on a CPU (sandbox, correctness tier under Triton's
  interpreter, feedback), user + system seconds of the grading and every process it waited for.
* **GPU seconds**: the performance tier on a GPU, from the recorded GPU runs of the grader
  (``tests/gpu_runs/``, named in :data:`GPU_RECORDS`): Lab 2, a whole grading of the instructor's answer
  cells by the verdict process (the ``time`` step, every run); Labs 3 and 5, the verdict process's start
  (its start, the baseline worker's start and preparation, the learner's cells) plus one grading's cases
  (the ``repeat`` step's case seconds over its repeats); Lab 4, one grading on two GPUs, counted twice.
  The median over the named runs (H100 and H200) is kept. A lab without a performance tier (no
  ``perf.toml``: Lab 1) takes 0 GPU seconds; a lab with one but no record is ``None``: "not in the course's data".

A class of ``n`` (the model, :func:`class_cost`): every submission costs its CPU seconds plus its GPU
seconds of wall time on one GPU slot (the correctness tier's CPU time is an upper bound there: on a GPU
the kernels run natively, not in the interpreter); a setting with ``slots`` GPU slots grades
``ceil(n / slots)`` rounds, and Slurm adds its measured per-submission scheduling overhead
(``data/grading/lab1_throughput.json``). CPU-hours and GPU-hours do not depend on the setting.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from mlsys.runtime.paths import checkout

__all__ = ["GPU_RECORDS", "settings", "Setting", "LabCost", "cpu_seconds", "gpu_seconds", "lab_costs",
           "class_cost", "slurm_overhead"]

LABS = ("lab1_roofline", "lab2_tiled_matmul", "lab3_fusion", "lab4_collectives", "lab5_attention")
GPU_RECORDS = ("verdict_nvidia-h200_run2", "verdict_nvidia-h200_run3", "verdict_nvidia-h200_run9",
               "verdict_nvidia-h200_run15", "verdict_nvidia-h200_run16",
               "verdict_nvidia-h200_run18", "verdict_nvidia-h200_run14",
               "verdict_nvidia-h100_run11", "verdict_nvidia-h100_run13",
               "verdict_nvidia-h100_run17", "verdict_lab4_nccl_nvidia-h100-x2_run1")
_START = ("verdict_start", "baseline_worker_start", "baseline_prepare", "learner_cells")


@dataclass(frozen=True)
class Setting:
    name: str
    slots: int               # submissions graded at once, one GPU each
    overhead_s: float = 0.0  # scheduling seconds per submission


def slurm_overhead(root: Path | None = None) -> float:
    """Seconds of Slurm scheduling per submission, as measured (data/grading/lab1_throughput.json)."""
    rec = json.loads(((root or checkout()) / "data" / "grading" / "lab1_throughput.json").read_text())
    return float(rec["slurm_overhead_per_submission"]["value"])


def settings() -> tuple[Setting, ...]:
    """The three settings of the page: one machine with one GPU, an 8-GPU node, 32 Slurm tasks at once."""
    return (Setting("one machine, one GPU (--jobs 1)", 1), Setting("a GPU node, 8 GPUs (--jobs 8)", 8),
            Setting("Slurm, 32 one-GPU tasks at once", 32, slurm_overhead()))





def cpu_seconds(root: Path | None = None) -> dict[str, float | None]:
    """Measured CPU seconds of grading one submission, per lab (None where the grading failed or is missing)."""
    rec = json.loads(((root or checkout()) / "data" / "grading" / "grading_cost_cpu.json").read_text())
    out: dict[str, float | None] = {lab: None for lab in LABS}
    for row in rec["labs"]:
        if row["exit_code"] == 0 and row["row"] and ",ok," in row["row"]:
            out[row["lab"]] = float(row["cpu"]["value"])
    return out


def _one_grading(entry: dict) -> float | None:
    """GPU seconds of one grading from a ``repeat`` entry: the verdict process's start plus one repeat's cases."""
    phases = (entry or {}).get("phases_s") or {}
    cases = {k: v for k, v in phases.items() if k.startswith("case:")}
    cells = {re.sub(r"__\d+$", "", k) for k in cases}
    if not cases or not cells:
        return None
    repeats = len(cases) / len(cells)
    return sum(phases.get(k, 0.0) for k in _START) + sum(cases.values()) / repeats


def gpu_seconds(root: Path | None = None) -> dict[str, float | None]:
    """GPU seconds of the performance tier of one submission, per lab (median over :data:`GPU_RECORDS`)."""
    found: dict[str, list[float]] = {lab: [] for lab in LABS}
    for name in GPU_RECORDS:
        steps = json.loads(((root or checkout()) / "tests" / "gpu_runs" / f"{name}.json").read_text())["steps"]
        for key, step in steps.items():
            if key.startswith("time") and (step or {}).get("new"):
                found["lab2_tiled_matmul"].append(step["new"]["wall_s"])
        for lab in ("lab3_fusion", "lab5_attention"):
            one = _one_grading((steps.get("repeat") or {}).get(lab))
            if one is not None:
                found[lab].append(one)
        lab4 = (steps.get("lab4") or {}).get("instructor")
        if lab4 and lab4.get("wall_s"):
            found["lab4_collectives"].append(2 * lab4["wall_s"])  # two GPUs at once
    root = root or checkout()
    # a lab without a performance tier (no labs/source/<lab>/perf.toml) takes no GPU time at all
    return {lab: statistics.median(v) if v else (None if (root / "labs" / "source" / lab / "perf.toml").is_file()
                                                  else 0.0) for lab, v in found.items()}


@dataclass(frozen=True)
class LabCost:
    lab: str
    cpu_s: float | None
    gpu_s: float | None


def lab_costs(root: Path | None = None) -> list[LabCost]:
    cpu, gpu = cpu_seconds(root), gpu_seconds(root)
    return [LabCost(lab, cpu[lab], gpu[lab]) for lab in LABS]


def class_cost(n: int, costs: list[LabCost], setting: Setting) -> dict[str, float]:
    """A class of ``n`` handing in every lab of ``costs``: CPU-hours, GPU-hours and wall hours in ``setting``
    (labs with a missing figure count zero for it; the page says which)."""
    if n <= 0:
        raise ValueError(f"a class has at least one student, got {n}")
    cpu = sum(c.cpu_s or 0.0 for c in costs)
    gpu = sum(c.gpu_s or 0.0 for c in costs)
    per_submission = cpu + gpu + setting.overhead_s * len(costs)
    return {"cpu_h": n * cpu / 3600, "gpu_h": n * gpu / 3600,
            "wall_h": math.ceil(n / setting.slots) * per_submission / 3600}
