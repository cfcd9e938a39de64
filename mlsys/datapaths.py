"""Where the recorded measurements are: one function, for a checkout and for an installed package.

In a checkout of the course repository the recorded figures live in ``data/measurements/``. An
installed course package (``pip install``, Colab) has no checkout: the same files ship inside the
package as ``mlsys/_measurements/`` (``setup.py`` maps ``data/measurements`` there), so a lab opened
in Colab shows the recorded GPU figures too. :func:`measurements_dir` picks, in order:

1. ``$MLSYS_MEASUREMENTS_DIR`` when set (to try a page against another recording);
2. ``<checkout>/data/measurements`` when this package sits in a checkout that has it;
3. the copy shipped inside the installed package.

``mlsys.bench.records.data_dir()`` should return ``measurements_dir()`` (one loader, one path rule).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["checkout", "measurements_dir", "packaged_measurements_dir"]


def checkout() -> Path:
    """The folder this package sits in: the repository checkout (holding ``_config.yml`` and ``mlsys/``), or
    site-packages for an installed package. The one place that works it out; :mod:`mlsys.runtime.paths`
    hands it to the rooms above."""
    return Path(__file__).resolve().parents[1]


def packaged_measurements_dir() -> Path:
    """``mlsys/_measurements`` next to this file: the copy of ``data/measurements`` in a built package."""
    return Path(__file__).resolve().parent / "_measurements"


def measurements_dir() -> Path:
    """The directory holding the recorded measurements (see the module docstring for the order)."""
    override = os.environ.get("MLSYS_MEASUREMENTS_DIR")
    if override:
        return Path(override)
    in_checkout = checkout() / "data" / "measurements"
    if in_checkout.is_dir():
        return in_checkout
    return packaged_measurements_dir()
