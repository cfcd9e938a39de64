"""The few Slurm commands a grading run needs: submit a job array, watch it, read why a task failed.

Slurm is the scheduler; nothing here re-implements one. ``sbatch`` submits one array task per batch of
submissions (``teach grade-task MANIFEST INDEX`` on whichever node Slurm picks); ``squeue`` says
which tasks are still pending or running; ``scontrol show job`` gives a finished task's state, exit
code and reason (it needs no accounting database, which many small clusters and CI lack); ``sacct``
is asked first where accounting is on, because ``scontrol`` forgets jobs after ``MinJobAge``.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SlurmUnavailable", "SlurmOptions", "available", "batch_script", "submit", "active_tasks",
           "task_state", "cancel"]


class SlurmUnavailable(RuntimeError):
    """sbatch/squeue are missing or the controller does not answer."""


@dataclass(frozen=True)
class SlurmOptions:
    """What the teacher asks of the cluster (each maps to the ``sbatch`` option of the same name)."""

    partition: str | None = None
    gres: str | None = None  # e.g. "gpu:1": one GPU per task, pinned by Slurm
    time: str | None = None  # per task, Slurm's format ("30:00", "2:00:00")
    cpus_per_task: int | None = None
    max_running: int | None = None  # array throttle: at most this many tasks at once ("%N")
    extra: tuple[str, ...] = field(default_factory=tuple)  # further sbatch options, passed as given

    def sbatch_args(self) -> list[str]:
        args = []
        for name, value in (("partition", self.partition), ("gres", self.gres), ("time", self.time),
                            ("cpus-per-task", self.cpus_per_task)):
            if value is not None:
                args.append(f"--{name}={value}")
        return args + list(self.extra)


def _run(argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def available() -> str | None:
    """None if sbatch, squeue and scontrol exist and the controller answers; else why not."""
    missing = [c for c in ("sbatch", "squeue", "scontrol") if shutil.which(c) is None]
    if missing:
        return f"{', '.join(missing)} not found (Slurm's client commands are not installed here)"
    try:
        proc = _run(["squeue", "-h", "-o", "%i"], timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"squeue failed: {exc}"
    if proc.returncode != 0:
        return f"the Slurm controller does not answer: {(proc.stderr or proc.stdout).strip()[:300]}"
    return None


def batch_script(command: list[str], *, env: dict[str, str], log_dir: Path, tasks: int, name: str,
                 options: SlurmOptions) -> str:
    """The sbatch script of a job array of ``tasks`` tasks, each running ``command`` + its array index."""
    throttle = f"%{options.max_running}" if options.max_running else ""
    # the log path goes on sbatch's command line (submit): a #SBATCH line is split at spaces
    lines = ["#!/bin/bash", f"#SBATCH --job-name={name}", f"#SBATCH --array=0-{tasks - 1}{throttle}",
             "#SBATCH --ntasks=1"]
    lines += [f"#SBATCH {a}" for a in options.sbatch_args()]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines.append('export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"')  # threads to match the cores Slurm gave
    lines.append(f'exec {shlex.join(command)} "$SLURM_ARRAY_TASK_ID"')
    return "\n".join(lines) + "\n"


def submit(script: Path, cwd: Path) -> str:
    """``sbatch --parsable script``, each task's log ``cwd/task-N.log``; the job id. Raises
    :class:`SlurmUnavailable` with sbatch's message."""
    proc = _run(["sbatch", "--parsable", f"--output={Path(cwd) / 'task-%a.log'}", f"--chdir={cwd}", str(script)],
                timeout=120)
    if proc.returncode != 0:
        raise SlurmUnavailable(f"sbatch refused the job array: {(proc.stderr or proc.stdout).strip()[:600]}")
    return proc.stdout.strip().split(";")[0]


def active_tasks(job: str) -> dict[int, str]:
    """Array index -> state (PENDING, RUNNING, ...) of the tasks of ``job`` that squeue still lists."""
    proc = _run(["squeue", "-h", "-r", "-j", job, "-o", "%K|%T"], timeout=60)
    out: dict[int, str] = {}
    if proc.returncode != 0:  # a job that has left the queue entirely: squeue says "Invalid job id"
        return out
    for line in proc.stdout.splitlines():
        idx, _, state = line.partition("|")
        if idx.strip().isdigit():
            out[int(idx)] = state.strip()
    return out


def task_state(job: str, index: int) -> str:
    """One finished task's state, exit code and reason in words, from sacct or else scontrol."""
    if shutil.which("sacct"):
        proc = _run(["sacct", "-n", "-P", "-X", "-j", f"{job}_{index}", "-o", "State,ExitCode,Reason"])
        if proc.returncode == 0 and proc.stdout.strip():
            state, code, reason = (proc.stdout.strip().splitlines()[0].split("|") + ["", "", ""])[:3]
            return f"{state} (exit {code}{'; ' + reason if reason and reason != 'None' else ''})"
    proc = _run(["scontrol", "-o", "show", "job", f"{job}_{index}"])
    if proc.returncode != 0:
        return "unknown (Slurm no longer lists the task)"
    fields = dict(f.split("=", 1) for f in proc.stdout.split() if "=" in f)
    reason = fields.get("Reason", "None")
    return (f"{fields.get('JobState', '?')} (exit {fields.get('ExitCode', '?')}"
            f"{'; ' + reason if reason not in ('None', '') else ''})")


def cancel(job: str) -> None:
    """scancel the whole array (rows already written are kept)."""
    try:
        _run(["scancel", job], timeout=60)
    except (OSError, subprocess.SubprocessError):
        pass
