"""Reading the course's TOML data files (accelerators, model shapes, costs) with one error policy.

A missing file or invalid TOML raises the caller's error class with the path and, for a missing file,
the environment variable that may point elsewhere; the caller validates the contents.

A file of *named* entries (``[[accelerator]]``, ``[[model]]``: each with a ``name`` and ``aliases``)
is read by :func:`read_named` into a :class:`NamedTable`, which looks an entry up by its name or any
alias, ignoring case, spaces, ``-``, ``_`` and ``.`` (:func:`name_key`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["read_toml", "read_named", "NamedTable", "name_key"]


class _Named(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def aliases(self) -> Sequence[str]: ...


T = TypeVar("T", bound=_Named)


def read_toml(path: str | Path, error: type[Exception], what: str, env: str) -> dict[str, Any]:
    """Parse ``path``; ``error(f"{what} {path} does not exist (check ${env})")`` if it is missing,
    ``error(f"{path}: not valid TOML (...)")`` if it does not parse."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist (check ${env})") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML ({exc})") from None



def name_key(label: str) -> str:
    """What a name is looked up by: lower case, without spaces, ``-``, ``_`` and ``.`` (``"H100-SXM"`` -> ``"h100sxm"``)."""
    return "".join(c for c in label.lower() if c not in " -_.")


@dataclass(frozen=True)
class NamedTable(Generic[T]):
    """Entries by canonical name (in file order), and every name and alias's :func:`name_key`."""

    what: str  #: what an entry is, for messages ("accelerator", "model")
    entries: dict[str, T]
    keys: dict[str, str]  #: name_key(name or alias) -> canonical name

    def get(self, name: str) -> T:
        """The entry called ``name`` (or an alias of it); ``KeyError`` listing the known names otherwise."""
        key = name_key(str(name))
        if key not in self.keys:
            raise KeyError(f"unknown {self.what} {name!r}; known: {', '.join(self.entries)}")
        return self.entries[self.keys[key]]


def read_named(path: str | Path, section: str, build: Callable[[dict[str, Any]], T], error: type[Exception],
               env: str) -> NamedTable[T]:
    """Read ``[[section]]`` entries of the TOML file ``path``, each built by ``build`` (which validates it).

    ``error`` (the caller's class) is raised for a missing or invalid file (:func:`read_toml`, naming ``env``),
    for no entries, for a name given twice, and for a name or alias two entries share after :func:`name_key`.
    """
    data = read_toml(path, error, f"{section} data file", env)
    entries: dict[str, T] = {}
    keys: dict[str, str] = {}
    for raw in data.get(section, []):
        item = build(raw)
        if item.name in entries:
            raise error(f"{path}: {section} {item.name!r} appears twice")
        for label in (item.name, *item.aliases):
            key = name_key(label)
            if keys.get(key, item.name) != item.name:
                raise error(f"{path}: name or alias {label!r} is used by both {keys[key]} and {item.name}")
            keys[key] = item.name
        entries[item.name] = item
    if not entries:
        raise error(f"{path}: no [[{section}]] entries")
    return NamedTable(section, entries, keys)
