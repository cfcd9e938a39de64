"""What a chapter's code cells share: the reference device's records, ``glue`` and Markdown tables.

A chapter quotes three kinds of figure: datasheet numbers (:mod:`mlsys.hardware`), model results
(:mod:`mlsys`), and measurements recorded on the course's reference GPU (:mod:`mlsys.bench.records`).
This module keeps the plumbing those cells repeat in one place, so a page's visible code is the one or
two calls that make its figures:

* :data:`REFERENCE_DEVICE`: the slug of the GPU the book's recorded figures come from;
* :data:`SECOND_DEVICE`: the slug of the second recorded GPU (per-kernel profiles, two-GPU runs);
* :func:`reference` and :func:`reference_roofs`: the reference device's record of an experiment, and
  its roofs; :func:`second` and :func:`second_roofs`: the same on the second device;
* :func:`recorded_in`: where a record lies in the checkout, as text for the prose;
* :func:`glue`: hand a value to the prose (MyST-NB ``glue`` without displaying it in the cell);
* :func:`table`: a Markdown table from rows of values, to ``display`` or ``glue``.

Example (in a chapter)::

    from mlsys.book.claims import fmt
    from mlsys.book.page import glue, reference, table
    rec = reference("layer_roofline")
    glue("ch6_rec_how", rec.reproduce)
    table([(n, fmt(p, "TFLOP/s")) for n, p in rows], ["chip", "dense fp16 peak"])
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from numbers import Real
from typing import Any

import pint

from mlsys.bench.records import Measurement, Record, experiment_path, load, load_experiment
from mlsys.book.claims import fmt
from mlsys.runtime.paths import checkout

__all__ = ["REFERENCE_DEVICE", "SECOND_DEVICE", "reference", "reference_roofs", "second", "second_roofs",
           "recorded_in", "glue", "table"]

#: the device slug (``data/measurements/<slug>/``) of the GPU the book's recorded figures come from
REFERENCE_DEVICE = "nvidia-h100-80gb-hbm3"
#: the second recorded GPU: an H200 (the H100's SMs with 1.4x its memory bandwidth), where the per-kernel
#: profiles and the two-GPU collectives were recorded
SECOND_DEVICE = "nvidia-h200"

_ALIGN = {"l": ":--", "r": "--:", "c": ":-:"}


def reference(experiment: str) -> Record:
    """The record of ``experiment`` on :data:`REFERENCE_DEVICE` (validated; a missing one raises)."""
    return load_experiment(experiment, device=REFERENCE_DEVICE)


def reference_roofs() -> Measurement:
    """The measured roofs of :data:`REFERENCE_DEVICE` (``data/measurements/<slug>/roofs.json``)."""
    return load(REFERENCE_DEVICE)


def second(experiment: str) -> Record:
    """The record of ``experiment`` on :data:`SECOND_DEVICE` (validated; a missing one raises)."""
    return load_experiment(experiment, device=SECOND_DEVICE)


def second_roofs() -> Measurement:
    """The measured roofs of :data:`SECOND_DEVICE` (``data/measurements/<slug>/roofs.json``)."""
    return load(SECOND_DEVICE)


def recorded_in(experiment: str | None = None, device: str = REFERENCE_DEVICE) -> str:
    """Where a record lies, relative to the checkout, for the prose: ``data/measurements/<device>/`` and,
    given an experiment, ``<experiment>.json`` in it (the layout :mod:`mlsys.bench.records` reads)."""
    if device not in (REFERENCE_DEVICE, SECOND_DEVICE):
        raise ValueError(f"recorded_in: device={device!r}; expected REFERENCE_DEVICE ({REFERENCE_DEVICE!r}) "
                         f"or SECOND_DEVICE ({SECOND_DEVICE!r})")
    path = experiment_path(experiment or "_", device)
    with contextlib.suppress(ValueError):  # a data folder outside the checkout is named in full
        path = path.relative_to(checkout())
    return f"{path.parent.as_posix()}/" if experiment is None else path.as_posix()


def glue(name: str, value: Any) -> None:
    """Glue ``value`` under ``name`` for the prose (``{glue:text}`name```), without showing it in the cell."""
    from myst_nb import glue as _glue  # imported here: IPython is only needed inside a notebook

    _glue(name, value, display=False)


def _cell(value: Any, where: str) -> str:
    """One cell's text: strings as given, numbers and quantities through :func:`fmt`, ``|`` escaped."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, pint.Quantity) or (isinstance(value, Real) and not isinstance(value, bool)):
        text = fmt(value)
    else:
        raise TypeError(f"table: {where} is a {type(value).__name__}; expected a string, a number or a "
                        "quantity (format it with fmt() first)")
    if "\n" in text:
        raise ValueError(f"table: {where} holds a line break ({text!r}); a Markdown table cell is one line")
    return text.replace("|", r"\|")


def table(rows: Iterable[Sequence[Any]], headers: Sequence[str], align: str | None = None) -> Any:
    """A Markdown table (an ``IPython.display.Markdown``; its text is ``.data``) to display or glue.

    ``rows`` holds one sequence of cells per row, as many as ``headers``; a cell is a string (used as
    given), a number or a pint quantity (formatted with :func:`~mlsys.book.claims.fmt`, three
    significant figures). ``align`` holds one letter per column, ``l``, ``r`` or ``c``; by default the
    first column (what the row is) is left-aligned and the others (its figures) right-aligned.
    A ``|`` inside a cell is escaped.
    """
    from IPython.display import Markdown

    headers = list(headers)
    n = len(headers)
    if n == 0:
        raise ValueError("table: no headers; expected one header per column")
    if align is None:
        align = "l" + "r" * (n - 1)
    if len(align) != n or any(a not in _ALIGN for a in align):
        raise ValueError(f"table: align={align!r}; expected {n} letters from 'l', 'r', 'c' (one per column)")
    lines = ["| " + " | ".join(_cell(h, f"header {i + 1}") for i, h in enumerate(headers)) + " |",
             "|" + "|".join(_ALIGN[a] for a in align) + "|"]
    for r, row in enumerate(rows):
        cells = list(row)
        if len(cells) != n:
            raise ValueError(f"table: row {r + 1} has {len(cells)} cells; expected {n}, one per header {headers}")
        lines.append("| " + " | ".join(_cell(c, f"row {r + 1}, column {i + 1}") for i, c in enumerate(cells)) + " |")
    return Markdown("\n".join(lines))
