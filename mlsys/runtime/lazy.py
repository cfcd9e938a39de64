"""Submodules imported on first use: ``mlsys.grader.teach`` works after a bare ``import mlsys``.

A package's ``__init__`` calls :func:`lazy_submodules` once, instead of importing every submodule
(some pull torch or IPython) or keeping a hand-written list that a new module is missed from::

    from mlsys.runtime.lazy import lazy_submodules
    __all__, __getattr__, __dir__ = lazy_submodules(__name__, __path__)

The submodules are the package's own ``*.py`` files and sub-packages, found on disk without importing
them (:func:`pkgutil.iter_modules`); a name starting with ``_`` (``__main__``, ``_matmul``) is private
and left out.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["submodules", "lazy_submodules"]


def submodules(package_path: Iterable[str]) -> tuple[str, ...]:
    """The public submodule names in the folder(s) ``package_path`` (a package's ``__path__``), sorted."""
    return tuple(sorted(m.name for m in pkgutil.iter_modules(list(package_path)) if not m.name.startswith("_")))


def lazy_submodules(package: str, package_path: Iterable[str], extra: Iterable[str] = ()
                    ) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` for ``package`` (its ``__name__``), importing a submodule when
    first named. ``extra`` holds the names the package defines itself (listed in ``__all__`` and ``dir``).
    An unknown attribute raises ``AttributeError`` naming the package, as Python's own does; ``dir()``
    lists ``__all__``."""
    names = submodules(package_path)
    public = [*extra, *names]

    def __getattr__(name: str) -> Any:
        if name in names:
            module = importlib.import_module(f"{package}.{name}")
            setattr(sys.modules[package], name, module)
            return module
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(public)

    return public, __getattr__, __dir__
