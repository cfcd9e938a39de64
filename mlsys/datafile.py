"""Reading the course's TOML data files (accelerators, model shapes, costs) with one error policy.

A missing file or invalid TOML raises the caller's error class with the path and, for a missing file,
the environment variable that may point elsewhere; the caller validates the contents.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

__all__ = ["read_toml"]


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
