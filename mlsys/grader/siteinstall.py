"""The course package as pip installs it into a sandbox's site, kept by the digest of its sources.

Every grading run binds a read-only site into its sandboxes (:func:`mlsys.grader.sandbox.build_site`): ``pip
install --no-deps --target`` of the checkout's package, a real install with its metadata. pip's build takes about
1.5 s per run (a wheel built by setuptools). The same sources give the same install, so it is kept under
:func:`cache_root` by :func:`source_digest` (the package's files, ``pyproject.toml``, the Python and pip versions)
and copied from there, its modules compiled to bytecode (:func:`compile_site`); any changed byte gives another
digest, hence a fresh install. The cache is the teacher's
(their home or ``MLSYS_SITE_CACHE``): nothing a sandbox runs can write there.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mlsys.runtime.paths import user_cache

__all__ = ["source_digest", "hash_tree", "cache_root", "keep", "pip_install", "compile_site", "KEEP", "BYTECODE"]

KEEP = 8
"""Cached installs kept (the newest by modification time); older ones are removed when one is added."""

_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc")

BYTECODE = "bytecode: checked-hash"
"""How an install's modules are compiled (:func:`compile_site`); part of the digest, so an install made before
carries none and is made again."""


def compile_site(target: Path) -> bool:
    """Compile every module of an install to bytecode beside it, checked by the source's hash (not its time, which a
    copy may change). A sandbox's site is read-only, so without it every process there that imports the package
    compiles its modules again (about 0.05-0.1 CPU-s a process, five processes a grading)."""
    import compileall
    import py_compile

    return bool(compileall.compile_dir(str(target), quiet=1, workers=1,
                                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH))


def source_digest(pyproject: Path, pkg: Path) -> str:
    """sha256 over ``pyproject`` and every file under ``pkg`` (relative path and bytes, caches left out), with the
    interpreter (its path: the scripts' first line names it) and the Python and pip versions: the key of one install."""
    from importlib.metadata import version  # not `import pip`: it loads the standard library's distutils, and
    # setuptools (which nbgrader imports later in the same process) then refuses to start

    h = hashlib.sha256(f"{sys.executable}\0{sys.version}\0pip {version('pip')}\0{BYTECODE}\0".encode())
    h.update(Path(pyproject).read_bytes())
    hash_tree(h, Path(pkg))
    return h.hexdigest()


def hash_tree(h: Any, folder: Path) -> None:
    """Feed ``h`` (a hashlib object) every file under ``folder``: relative path and bytes, in sorted order,
    bytecode caches left out."""
    for p in sorted(Path(folder).rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
            h.update(b"\0" + str(p.relative_to(folder)).encode() + b"\0" + p.read_bytes())


def cache_root() -> Path | None:
    """Where installs are kept: ``$MLSYS_SITE_CACHE``, else ``$XDG_CACHE_HOME/mlsys/site-installs`` (default
    ``~/.cache``); None (no cache) where it cannot be created or written."""
    where = user_cache("site-installs", "MLSYS_SITE_CACHE")
    if where is None:
        return None
    try:
        Path(where).mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return Path(where) if os.access(where, os.W_OK) else None


def _pip(src: Path, target: Path) -> bool:
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-compile",
         "--no-index", "--disable-pip-version-check", "--target", str(target), str(src)],
        capture_output=True, text=True, timeout=600)
    return proc.returncode == 0


def keep(root: Path, key: str, built: Path, newest: int = KEEP, only: tuple[str, ...] = ()) -> None:
    """Store ``built`` (or, given ``only``, those of its top-level entries) as ``root/key``, whole or not at all: a
    copy renamed into place; then prune ``root`` to its ``newest`` entries. Only entries named like a key (64 hex
    digits) are counted: other caches may live in sub-folders of ``root``."""
    tmp = root / f".{key}.{os.getpid()}"
    top = str(built)
    skip = (lambda d, names: [n for n in names if d == top and n not in only]) if only else None
    try:
        shutil.copytree(top, tmp, symlinks=True, ignore=skip)
        os.rename(tmp, root / key)  # another run may have stored it first: then its copy stays
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    keys = (p for p in root.iterdir() if len(p.name) == 64 and all(c in "0123456789abcdef" for c in p.name))
    kept = sorted(keys, key=lambda p: p.stat().st_mtime)
    for old in kept[:-newest]:
        shutil.rmtree(old, ignore_errors=True)


def pip_install(pyproject: Path, pkg: Path, dest: Path) -> bool:
    """``pip install --no-deps --target dest`` of the package ``pkg`` built with ``pyproject``, taken from the cache
    when the same sources were installed before; False where pip failed (nothing is cached then)."""
    root, key = cache_root(), source_digest(pyproject, pkg)
    if root is not None and (root / key).is_dir():
        shutil.copytree(root / key, dest, symlinks=True, dirs_exist_ok=True)
        os.utime(root / key)  # recently used: kept when older ones are pruned
        return True
    with tempfile.TemporaryDirectory(prefix="mlsys-src-") as tmp:
        src, target = Path(tmp) / "src", Path(tmp) / "target"  # the sources copied: a build writes nothing beside them
        src.mkdir()
        shutil.copy2(pyproject, src / "pyproject.toml")
        shutil.copytree(pkg, src / "mlsys", ignore=_SKIP)
        if not _pip(src, target) or not compile_site(target):
            return False
        if root is not None:
            keep(root, key, target)
        shutil.copytree(target, dest, symlinks=True, dirs_exist_ok=True)
    return True
