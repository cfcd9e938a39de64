"""Grade rows kept one file per submission, so that a grading run can stop at any moment and resume.

Layout, inside the course folder (the only state shared between a teacher's command and Slurm tasks
on other nodes): ``.grading/rows/<lab>/<student>.json`` holding ``{"key": ..., "row": {...}}``.
``key`` is :func:`submission_key`: a SHA-256 over the submission's files (names and bytes), the
instructor version of its lab and the grading settings, so a row is reused only while all three are
unchanged. The settings include :func:`grader_digest` (the grading code, nbgrader's configuration, the
library versions and the device), which each row also keeps as ``grader``: a row graded by another
grader (a patched hole, an upgraded library, another GPU) is graded again, and the run says how many. A row file is written once, atomically (a temporary file in the same folder, then
``os.replace``): a reader sees the old file, the new one, or none, never half of one; a run that is
killed loses at most the submissions it was grading at that moment.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["tree_digest", "submission_key", "grader_digest", "RowStore"]

_SKIP = {".ipynb_checkpoints", "__pycache__"}


def tree_digest(paths: list[Path], base: Path | None = None) -> str:
    """SHA-256 over ``paths`` (files, or folders walked in sorted order; symbolic links and caches
    skipped): each file's path relative to ``base`` (or its name) and its bytes."""
    h = hashlib.sha256()
    for top in paths:
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for p in files:
            if p.is_symlink() or _SKIP & set(p.parts):
                continue
            rel = p.relative_to(base) if base else Path(p.name)
            h.update(str(rel).encode("utf-8", "surrogateescape") + b"\0")
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def submission_key(files: list[Path], base: Path, lab_source: Path, settings: dict[str, Any]) -> str:
    """The identity of one grading: submitted files, the lab's instructor folder, the settings (JSON)."""
    h = hashlib.sha256()
    h.update(tree_digest(files, base).encode())
    h.update(tree_digest([lab_source], lab_source).encode())
    h.update(json.dumps(settings, sort_keys=True).encode())
    return h.hexdigest()


_VERSIONED = ("nbgrader", "nbconvert", "nbclient", "nbformat", "ipykernel", "numpy", "torch", "triton", "pint")


def _device() -> str:
    """The GPU models and driver versions ``nvidia-smi`` lists (not which GPU: any H200 grades alike), or "no GPU"."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no GPU"
    try:
        out = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out or "no GPU (nvidia-smi lists none)"


def grader_digest(config: Path) -> str:
    """SHA-256 of what decides a grade besides the submission: the ``mlsys`` package's source (grader, sandbox,
    checks and the models the labs import), nbgrader's ``config`` file, the versions of Python and of the
    libraries in the grading path, and the device."""
    import platform
    from importlib import metadata

    pkg = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    h.update(tree_digest([p for p in sorted(pkg.rglob("*")) if p.suffix in (".py", ".toml") and p.is_file()],
                         pkg).encode())
    h.update(tree_digest([Path(config)]).encode() if Path(config).is_file() else b"no config")
    versions = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    h.update(json.dumps(versions, sort_keys=True).encode())
    h.update(_device().encode())
    return h.hexdigest()


class RowStore:
    """``<root>/.grading/rows/<lab>/<student>.json``: one finished grading each."""

    def __init__(self, root: Path):
        self.dir = Path(root) / ".grading" / "rows"

    def path(self, student: str, lab: str) -> Path:
        for name in (student, lab):
            if not name or "/" in name or name in (".", "..") or "\0" in name:
                raise ValueError(f"not a usable folder name: {name!r}")
        if len(f"{student}.json".encode("utf-8", "surrogateescape")) > 240:  # a file name holds 255 bytes at most
            student = "~" + hashlib.sha256(student.encode("utf-8", "surrogateescape")).hexdigest()
        return self.dir / lab / f"{student}.json"

    def evidence_path(self, student: str, lab: str) -> Path:
        """``<root>/.grading/evidence/<lab>/<student>.json``: what the sandbox reported of that grading (each
        performance verdict with its rounds, traced kernels and checks), kept for the teacher who asks why."""
        return self.dir.parent / "evidence" / lab / self.path(student, lab).name

    def get(self, student: str, lab: str, key: str) -> dict[str, Any] | None:
        """The stored row of (student, lab) if it was graded with this ``key``, else None."""
        p = self.path(student, lab)
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data.get("row") if isinstance(data, dict) and data.get("key") == key else None

    def put(self, student: str, lab: str, key: str, row: dict[str, Any], seconds: float | None = None,
            grader: str = "") -> Path:
        """Write the row atomically (same-folder temporary file, fsync, ``os.replace``), with the ``grader``
        digest that graded it and the time it was stored."""
        import time

        p = self.path(student, lab)
        p.parent.mkdir(parents=True, exist_ok=True)
        data = {"key": key, "row": row, "grader": grader, "stored_at": time.time()}
        if seconds is not None:
            data["seconds"] = round(seconds, 3)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return p

    def seconds(self, student: str, lab: str) -> float | None:
        """How long the stored grading took (for the time-left estimate), if recorded."""
        try:
            return float(json.loads(self.path(student, lab).read_text(encoding="utf-8"))["seconds"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def stored(self, student: str, lab: str) -> dict[str, Any] | None:
        """The whole stored record of (student, lab) whatever its key: ``key``, ``row``, ``grader``, ``stored_at``."""
        try:
            data = json.loads(self.path(student, lab).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None
