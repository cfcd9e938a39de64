"""matplotlib's list of the system's fonts, made once by the grader's own matplotlib and given to every sandbox.

The first time a process imports ``matplotlib.pyplot`` with a cache folder that holds no font list, matplotlib
makes one (it runs ``fc-list`` and opens every font file) and keeps it there as ``fontlist-v<N>.json``. A sandbox's
cache folder (``MPLCONFIGDIR``, in its private ``/tmp``) is new and empty every time, so every graded kernel that
imported pyplot made the list again: about 0.3 CPU-s, 84 times in one CI run of the tests.

The grader's own list (in the teacher's cache folder, which no sandbox can write) is copied into the read-only site
(:func:`keep_in`, when the site is built), and the cell runner copies it from there into its sandbox's cache folder
before a kernel starts (:func:`prime`). The copy belongs to the learner's processes: where it is stale (another
matplotlib version, a font since removed) matplotlib makes a new list there, as it would have anyway.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

__all__ = ["SITE_FOLDER", "PATTERN", "own_cache_dir", "keep_in", "prime"]

SITE_FOLDER = "matplotlib-fontlist"
"""The site's folder that holds the grader's font lists."""

PATTERN = "fontlist-v*.json"
"""matplotlib's name for its font list (``<N>`` is its font manager's version: another version ignores the file)."""

_MAX_BYTES = 16 * 2**20  # a font list is tens of KiB; anything far larger is not one


def own_cache_dir() -> Path:
    """The folder this user's matplotlib keeps its font list in, worked out as ``matplotlib.get_cachedir`` does on
    Linux without importing matplotlib: ``$MPLCONFIGDIR``, else ``$XDG_CACHE_HOME/matplotlib``, else
    ``~/.cache/matplotlib``."""
    if os.environ.get("MPLCONFIGDIR"):
        return Path(os.environ["MPLCONFIGDIR"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "matplotlib"


def keep_in(site: Path, cache_dir: Path | None = None) -> list[Path]:
    """Copy the font lists of ``cache_dir`` (default :func:`own_cache_dir`) into ``site/SITE_FOLDER``; the copies.

    None where the grader's matplotlib never made one: each sandbox then makes its own, as before."""
    lists = sorted(p for p in Path(cache_dir or own_cache_dir()).glob(PATTERN)
                   if p.is_file() and not p.is_symlink() and p.stat().st_size <= _MAX_BYTES)
    if not lists:
        return []
    (Path(site) / SITE_FOLDER).mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copyfile(p, Path(site) / SITE_FOLDER / p.name)) for p in lists]


def prime(site: Path, cache_dir: str | None) -> list[Path]:
    """Copy the site's font lists into ``cache_dir`` (the sandbox's ``MPLCONFIGDIR``) where it has none of that name;
    the copies. Nothing where either folder is missing or cannot be written: matplotlib then makes its own list."""
    kept = Path(site) / SITE_FOLDER
    if not cache_dir or not kept.is_dir():
        return []
    copied: list[Path] = []
    with contextlib.suppress(OSError):
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        for p in sorted(kept.glob(PATTERN)):
            if not (Path(cache_dir) / p.name).exists():
                copied.append(Path(shutil.copyfile(p, Path(cache_dir) / p.name)))
    return copied
