"""The versions of torch, Triton and NumPy the labs support, and a plain check of the ones in hand.

A learner's environment is not the course's pinned one (``requirements.txt``): Colab lags PyTorch
releases by months, and a laptop has whatever was installed last. The labs were run with every
combination in :data:`TESTED` (``make test-versions``; the README's table says when); :data:`SUPPORTED`
is the range they span, lower bound included, upper bound excluded. :func:`check` (called by the labs'
setup cell through :func:`mlsys.labkit.device.setup`) says plainly what to install when a version is
outside its range, instead of letting a correct solution fail later with a message that blames the
learner's kernel.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re

__all__ = ["SUPPORTED", "TESTED", "PINNED", "CI", "BROKEN", "installed", "problems", "check", "supported_line",
           "broken_advice", "covered_by_suite"]

SUPPORTED: dict[str, tuple[str, str]] = {
    "torch": ("2.11", "2.14"),
    "triton": ("3.6", "3.9"),
    "numpy": ("1.26", "2.5"),
}
"""package -> (lowest supported, first unsupported) version."""

TESTED: tuple[dict[str, str], ...] = (
    {"triton": "3.6.0", "numpy": "2.3.4"},
    {"triton": "3.6.0", "numpy": "2.4.6"},
    {"triton": "3.7.1", "numpy": "2.3.4"},
    {"triton": "3.7.1", "numpy": "2.4.6"},
    {"triton": "3.8.0", "numpy": "2.3.4"},
    {"triton": "3.8.0", "numpy": "2.4.6"},
)
"""The combinations ``make test-versions`` runs the release notebooks' visible checks under (torch as pinned):
the oldest supported Triton, the pinned one and the newest inside :data:`SUPPORTED`, each with two NumPy."""

PINNED: dict[str, str] = {"triton": "3.7.1", "numpy": "2.3.4"}
"""The pair ``requirements.txt`` pins: the course's own ``.venv``, in which ``make test`` runs every lab."""

CI: tuple[dict[str, str], ...] = (
    {"triton": "3.6.0", "numpy": "2.3.4"},
    {"triton": "3.8.0", "numpy": "2.4.6"},
)
"""The subset CI runs after ``make test`` (``scripts/test_versions.py --ci``): the oldest supported Triton and the
newest, each with a NumPy other than the other's, so that with :data:`PINNED` (run by the suite) three Triton
versions and two NumPy versions are covered on every CI run."""

BROKEN: tuple[tuple[dict[str, tuple[str, str]], str], ...] = (
    ({"triton": ("3.6", "3.7"), "numpy": ("2.4", "3")},
     'Triton 3.6\'s CPU interpreter fails every kernel that loops over a scalar argument with NumPy 2.4 '
     '("only 0-dimensional arrays can be converted to Python scalars", its own code: int() of a 1-element array); '
     'on a CPU, pip install "numpy<2.4" (or "triton>=3.7"), then restart the kernel'),
)
"""Combinations inside :data:`SUPPORTED` known to fail, with what to install instead (found 2026-12-02 with
``make test-versions``: Triton 3.6.0's ``interpreter.py`` converts a scalar argument with ``int(array)``, which
NumPy 2.4 refuses for a 1-element 1-D array; Triton 3.7 squeezes first)."""


def covered_by_suite(combo: dict[str, str]) -> bool:
    """Whether ``combo`` is :data:`PINNED` (same release numbers), which the test suite already runs."""
    return all(_key(combo.get(name, "")) == _key(v) for name, v in PINNED.items())


def broken_advice(combo: dict[str, str]) -> str | None:
    """The advice of the :data:`BROKEN` entry that ``combo`` falls in (torch as in ``combo`` or any), else None."""
    for ranges, advice in BROKEN:
        if all(name in combo and _key(lo) <= _key(combo[name]) < _key(hi) for name, (lo, hi) in ranges.items()):
            return advice
    return None


def _key(version: str) -> tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``: the numeric release part, for comparisons."""
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:3])


def installed(packages: tuple[str, ...] = tuple(SUPPORTED)) -> dict[str, str | None]:
    """``{package: version or None}`` as pip installed them (without importing them)."""
    out: dict[str, str | None] = {}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def supported_line() -> str:
    """One line naming the supported ranges, e.g. for the install cell's comment."""
    parts = [f"{name} >={lo},<{hi}" for name, (lo, hi) in SUPPORTED.items()]
    return "supported: " + ", ".join(parts)


def problems(versions: dict[str, str | None] | None = None) -> list[str]:
    """Sentences naming each package outside :data:`SUPPORTED` (or missing) and what to install."""
    versions = installed() if versions is None else versions
    out = []
    for name, (lo, hi) in SUPPORTED.items():
        have = versions.get(name)
        spec = f'"{name}>={lo},<{hi}"'
        if have is None:
            if name != "triton":  # no Triton: the labs that need it say so when they import it
                out.append(f"{name} is not installed: pip install {spec}")
        elif not _key(lo) <= _key(have) < _key(hi):
            out.append(f"{name} {have} is outside the range the labs support ({lo} up to, not including, {hi}): "
                       f"pip install {spec}, then restart the kernel (Colab: Runtime > Restart session)")
    for combo, advice in BROKEN:
        have = {n: versions.get(n) for n in combo}
        if all(v is not None and _key(lo) <= _key(v) < _key(hi) for (n, (lo, hi)), v in
               zip(combo.items(), have.values(), strict=True)):
            out.append(advice)
    return out


def check(versions: dict[str, str | None] | None = None) -> list[str]:
    """Print a plain notice for each problem (nothing when all is well); return the problems."""
    found = problems(versions)
    for text in found:
        print(f"version note: {text}. (Checks may fail on correct work with these versions; see the README's "
              "table of tested versions.)")
    return found
