"""Where the course's files are in the checkout this package was imported from.

The package lives at ``<checkout>/mlsys``; the book's pages, the labs and the recorded measurements
sit beside it. Every module that needs one of these folders asks here, so a move is one edit (the
checkout itself is worked out in :mod:`mlsys.datapaths`, in the models' room, which the recorded
measurements' path needs too).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..datapaths import checkout

__all__ = ["checkout", "labs_root", "lab_notebook", "user_cache"]


def user_cache(name: str, env: str) -> Path | None:
    """A folder of the user's cache for the course: ``$<env>`` if set (``0``: none, returns None), else
    ``$XDG_CACHE_HOME/mlsys/<name>`` (default ``~/.cache``). Not created here."""
    where = os.environ.get(env)
    if where == "0":
        return None
    if where:
        return Path(where)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlsys" / name


def labs_root() -> Path:
    """The nbgrader course root: ``<checkout>/labs`` (the folder holding ``nbgrader_config.py``)."""
    return checkout() / "labs"


def lab_notebook(lab: str, release: bool = False, must_exist: bool = True) -> Path:
    """A lab's notebook: ``labs/source/<lab>/<lab>.ipynb`` (the instructor's), or ``labs/release/...`` (the student's).

    Raises ``FileNotFoundError`` naming the labs there are when ``lab`` has no such notebook, unless
    ``must_exist`` is false (a module's default path, checked when it is read).
    """
    folder = labs_root() / ("release" if release else "source")
    path = folder / lab / f"{lab}.ipynb"
    if must_exist and not path.is_file():
        have = sorted(p.name for p in folder.iterdir() if (p / f"{p.name}.ipynb").is_file()) if folder.is_dir() else []
        raise FileNotFoundError(f"no notebook {path}; expected one of the labs {have}")
    return path
