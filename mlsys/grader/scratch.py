"""A submission's scratch file system, and the grading run's folder that holds them.

A root grader mounts each submission's scratch as a size-capped tmpfs (:func:`scratch_fs`), so what all its
sandboxes write is capped in all, not only per file; the autograde process that mounted it unmounts it. A run's
folder (:func:`grading_folder`) releases any that a killed grading left mounted before it is removed.

Moved out of :mod:`mlsys.grader.sandbox` (its size limit, issue 48).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["SCRATCH_BYTES", "scratch_fs", "release_scratch", "release_mounts_under", "grading_folder"]


SCRATCH_BYTES = 4 * 2**30
"""Size of a submission's scratch file system (:func:`scratch_fs`): what all its sandboxes may write in all."""


def scratch_fs(folder: Path, size: int = SCRATCH_BYTES) -> bool:
    """Mount a tmpfs of ``size`` bytes on ``folder`` (a root grader), so a submission's writes are capped in all,
    not only per file (round 4: 2.1 GB under the per-file cap), and charged in memory to the cgroup of the
    process that writes them. False where it cannot be mounted (an unprivileged grader): the per-file cap
    (``Limits.file_bytes``) and the size of each sandbox's ``/tmp`` are then all there is."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(size)},mode=0755", "mlsys-scratch", str(folder)],
                          capture_output=True, text=True, timeout=30)
    return proc.returncode == 0


def release_scratch(folder: Path) -> None:
    """Unmount :func:`scratch_fs`'s tmpfs (lazily: a process still holding a file there lets go later)."""
    subprocess.run(["umount", "-l", str(folder)], capture_output=True, text=True, timeout=30)


def release_mounts_under(folder: Path) -> list[str]:
    """Unmount (lazily) every file system mounted at or below ``folder``, deepest first; the mount points.

    A grading's scratch (:func:`scratch_fs`) is unmounted by the autograde process that mounted it; one killed
    first (an interrupted run ends its gradings with SIGKILL) leaves it mounted, and its run's temporary folder
    could not be removed ("Device or resource busy", CI of 2026-12-03)."""
    top = str(Path(folder).resolve())
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    points = [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4]) for line in lines]
    found = sorted({p for p in points if p == top or p.startswith(top + "/")}, key=len, reverse=True)
    for point in found:
        release_scratch(Path(point))
    return found


@contextlib.contextmanager
def grading_folder(prefix: str) -> Iterator[Path]:
    """A grading run's temporary folder, removed at its end with every scratch file system a killed grading left
    mounted under it released first (:func:`release_mounts_under`)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        try:
            yield Path(tmp)
        finally:
            release_mounts_under(Path(tmp))
