"""A grading run's generated assignments (``nbgrader generate_assignment`` in its scratch course), kept by the
digest of what makes them.

Every grading run generates its labs in a scratch course (:func:`mlsys.grader.classplan._prepare`): the release
notebooks and the gradebook that ``nbgrader autograde`` restores the test cells from. That is an nbgrader start and an
alembic start per lab, about 3.5 CPU-s, for a result fixed by its inputs: the labs' source folders, the course's
``nbgrader_config.py``, the course package (whose preprocessors the config loads), the interpreter and nbgrader's
version. So the result is kept under :func:`mlsys.grader.siteinstall.cache_root` by :func:`digest` of those inputs and
copied from there; any changed byte gives another digest, hence a fresh generation. The cache is the teacher's (their
home or ``MLSYS_SITE_CACHE``): nothing a sandbox runs can write there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from mlsys.grader import siteinstall

__all__ = ["digest", "generate_all", "KEEP", "KEPT"]

KEEP = 32
"""Generated courses kept (the newest by modification time); older ones are removed when one is added."""

KEPT = ("gradebook.db", "release")
"""What generation adds to the scratch course, and what is kept: the gradebook and the release notebooks."""


def digest(course: Path, labs: list[str]) -> str:
    """sha256 over the labs (names, in order), every file of their source folders in ``course``, its
    ``nbgrader_config.py``, the course package's files, the interpreter, Python and nbgrader's versions."""
    from importlib.metadata import version

    h = hashlib.sha256(f"{sys.executable}\0{sys.version}\0nbgrader {version('nbgrader')}\0".encode())
    h.update(("\0".join(labs) + "\0").encode())
    h.update((Path(course) / "nbgrader_config.py").read_bytes())
    siteinstall.hash_tree(h, Path(__file__).resolve().parents[1])  # the package: mlsys/
    for lab in labs:
        siteinstall.hash_tree(h, Path(course) / "source" / lab)
    return h.hexdigest()


def generate_all(course: Path, labs: list[str], generate: Callable[[Path, str], None]) -> bool:
    """``generate(course, lab)`` for each of ``labs``, or the same generation copied from the cache; True where it
    came from the cache. A generation that fails raises and keeps nothing."""
    root = siteinstall.cache_root()
    store = root / "assignments" if root is not None else None
    key = digest(course, labs)
    if store is not None and (store / key).is_dir():
        shutil.copytree(store / key, course, dirs_exist_ok=True)
        os.utime(store / key)  # recently used: kept when older ones are pruned
        return True
    for lab in labs:
        generate(course, lab)
    if store is not None:
        store.mkdir(exist_ok=True)
        siteinstall.keep(store, key, course, KEEP, only=KEPT)
    return False
