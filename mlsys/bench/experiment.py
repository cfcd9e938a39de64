"""Named experiments: one module per GPU figure the book shows, one runner, one record shape.

An experiment is a module ``mlsys/bench/experiments/<name>.py`` with:

* a module docstring whose first line says what it measures;
* ``SHOWN_IN``: the pages that show its figures (``("chapters/04_execution_model",)``);
* ``NEEDS``: ``"cuda"`` (one CUDA GPU), ``"cuda:2"`` (at least two), or ``"any"`` (CPU too);
* ``run(ctx: Context) -> dict``: the results, a JSON tree in which every quantity is written
  ``{"value": x, "unit": "..."}`` (no unit suffixes in key names) and every figure's method is a
  ``"method"`` string beside it. Time with :func:`mlsys.bench.timing.time_fn`; never read clocks
  or versions yourself: the runner adds provenance.

The runner (``python -m mlsys.bench run NAME... | all | --list [--out DIR] [--quick]``) wraps the
results in a record and writes ``<out>/<device-slug>/<name>.json`` (default
``data/measurements``)::

    {"schema": "mlsys-experiment/1", "experiment": "divergence", "date": "2026-11-23T07:00:00+00:00",
     "device": {...}, "software": {...}, "quick": false, "shown_in": [...], "results": {...}}

A page loads a record with :func:`mlsys.bench.records.load_experiment`, by experiment and device,
and re-measures it with :func:`run` (``mlsys.bench.run("divergence")``).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["Context", "Experiment", "NeedsDevice", "catalogue", "get", "run", "record_path", "quantity", "timed"]

EXPERIMENT_SCHEMA = "mlsys-experiment/1"
_NEEDS = ("any", "cuda", "cuda:2")


def quantity(value: float, unit: str, **extra: Any) -> dict[str, Any]:
    """A result leaf ``{"value": value, "unit": unit, ...extra}`` (``extra``: e.g. ``method``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"a quantity needs a number, got {value!r}")
    return {"value": float(value) if isinstance(value, float) else value, "unit": unit, **extra}


def timed(timing: Any, unit: str = "s", scale: float = 1.0) -> dict[str, Any]:
    """A median time from a :class:`~mlsys.bench.timing.Timing` as a quantity with its timing record.

    ``scale`` divides the median (e.g. the number of operations in one timed call).
    """
    return quantity(timing.median / scale, unit, method=timing.method, timing=timing.to_json())


class NeedsDevice(RuntimeError):
    """The experiment needs a device this machine does not have."""


@dataclass
class Context:
    """What an experiment is handed: where it runs, and how hard to try.

    ``quick`` asks for smaller sizes and fewer repeats (a CPU smoke test, or a first look);
    ``device`` is ``"cuda"`` or ``"cpu"``; ``notes`` collects remarks the record keeps.
    """

    device: str
    quick: bool = False
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        """Keep a remark in the record (something seen while measuring that a reader should know)."""
        self.notes.append(text)


@dataclass(frozen=True)
class Experiment:
    """One registered experiment: its name, what it measures, where it is shown and what it needs."""

    name: str
    summary: str
    shown_in: tuple[str, ...]
    needs: str
    module: ModuleType

    def available(self, device: str, gpus: int) -> str | None:
        """``None`` if it can run here, else the reason it cannot."""
        if self.needs == "any":
            return None
        want = 2 if self.needs == "cuda:2" else 1
        if device != "cuda" or gpus < want:
            return f"{self.name} needs {want} CUDA GPU{'s' if want > 1 else ''}; this machine has {gpus}"
        return None


def _load(name: str) -> Experiment:
    module = importlib.import_module(f"mlsys.bench.experiments.{name}")
    doc = (module.__doc__ or "").strip()
    if not doc:
        raise TypeError(f"experiment {name}: the module needs a docstring saying what it measures")
    shown_in = getattr(module, "SHOWN_IN", None)
    needs = getattr(module, "NEEDS", None)
    if not isinstance(shown_in, tuple) or not shown_in or not all(isinstance(s, str) for s in shown_in):
        raise TypeError(f"experiment {name}: SHOWN_IN must be a non-empty tuple of page names")
    if needs not in _NEEDS:
        raise TypeError(f"experiment {name}: NEEDS must be one of {_NEEDS}, got {needs!r}")
    if not callable(getattr(module, "run", None)):
        raise TypeError(f"experiment {name}: it needs a function run(ctx) -> dict")
    return Experiment(name, doc.splitlines()[0], shown_in, needs, module)


def catalogue() -> dict[str, Experiment]:
    """Every experiment under ``mlsys/bench/experiments``, by name (imports each module, not torch)."""
    from . import experiments

    names = sorted(m.name for m in pkgutil.iter_modules(experiments.__path__) if not m.name.startswith("_"))
    return {n: _load(n) for n in names}


def get(name: str) -> Experiment:
    """The experiment called ``name``; an unknown name raises ``KeyError`` listing the known ones."""
    cat = catalogue()
    if name not in cat:
        raise KeyError(f"unknown experiment {name!r}; known: {', '.join(cat)}")
    return cat[name]


def record_path(out: str | Path, slug: str, name: str) -> Path:
    """``<out>/<device-slug>/<experiment>.json``."""
    return Path(out) / slug / f"{name}.json"


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run(name: str, quick: bool = False, device: str = "auto", out: str | Path | None = None) -> dict[str, Any]:
    """Run experiment ``name`` here and return its record (written to ``out`` when given).

    On a machine without the device it needs, raises :class:`NeedsDevice` saying what it needs.
    The record is validated before it is returned, so a malformed result fails here, not on a page.
    """
    from ..runtime.device import pick_device
    from .provenance import provenance
    from .records import validate_experiment
    from .timing import DEFAULT_FLUSH_MODE

    exp = get(name)
    dev = pick_device(device)
    why = exp.available(dev, _gpus() if dev == "cuda" else 0)
    if why:
        raise NeedsDevice(why)
    ctx = Context(device=dev, quick=quick)
    start = time.perf_counter()
    results = exp.module.run(ctx)
    record = {
        "schema": EXPERIMENT_SCHEMA,
        "experiment": name,
        **provenance(dev),
        "quick": quick,
        # how the timer cleared the GPU's L2 by default in this run ("read" since 2026-12-02; records
        # without this key were timed after a write-flush): each timing also keeps its own flush_mode
        "l2_flush": DEFAULT_FLUSH_MODE if dev == "cuda" else "none",
        "shown_in": list(exp.shown_in),
        "runtime": {"value": round(time.perf_counter() - start, 3), "unit": "s"},
        "notes": ctx.notes,
        "results": results,
    }
    record = validate_experiment(record, source=f"experiment {name}")
    if out is not None:
        path = record_path(out, record["device"]["slug"], name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record
