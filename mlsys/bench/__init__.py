"""Measuring the machine in hand: timing done right, microbenchmarks, and a roofline check.

* :mod:`mlsys.bench.timing`: :func:`time_fn` (CUDA events with the L2 flushed between timed
  calls on a GPU, ``perf_counter`` on a CPU; warm-up, repeats, min/median/max, a check of the
  result after timing) and the :class:`Timing` record of what was timed and how.
* :mod:`mlsys.bench.micro`: copy and read bandwidth, matmul throughput per dtype, launch
  overhead (eager op, empty Triton kernel, CUDA-graph replay), host-to-device copies.
* :mod:`mlsys.bench.roofcheck`: kernels of many intensities, predicted from the measured roofs
  with :func:`mlsys.roofline.time_lower_bound` (and :mod:`mlsys.overhead` for tiny ones) and timed.
* :mod:`mlsys.bench.experiment`: named experiments, one per GPU figure the book shows;
  :func:`run` (``mlsys.bench.run("divergence")``) re-measures one here and returns its
  :class:`~mlsys.bench.records.Record`, and ``python -m mlsys.bench run NAME... | all | --list`` records them.
* :mod:`mlsys.bench.roofs`: :func:`main`, ``python -m mlsys measure [--out PATH] [--quick]``, runs all of it
  and writes ``data/measurements/<device-slug>/roofs.json`` (schema: :mod:`mlsys.bench.records`).
"""

from __future__ import annotations

from pathlib import Path

from . import experiment as _experiment
from .experiment import NeedsDevice, catalogue
from .records import Record, load_experiment
from .roofs import main, measure
from .timing import CheckFailed, Timing, choose_repeats, time_cpu, time_cuda, time_fn

__all__ = ["main", "measure", "run", "catalogue", "load_experiment", "Record", "NeedsDevice", "Timing", "CheckFailed",
           "time_fn", "time_cpu", "time_cuda", "choose_repeats"]


def run(name: str, quick: bool = False, device: str | None = None, out: str | Path | None = None) -> Record:
    """Run experiment ``name`` on this machine and return its record (``mlsys.bench.run("divergence")``).

    ``quick`` asks for small sizes and few repeats (a smoke test; such a record is never quoted on a
    page); ``device`` is ``"cpu"``, ``"cuda"`` or ``None`` (CUDA where present, else the CPU with
    Triton's interpreter); ``out`` is a folder to also write ``<out>/<device-slug>/<name>.json`` in.
    An experiment that needs a GPU this machine lacks raises :class:`NeedsDevice` saying so.
    """
    data = _experiment.run(name, quick=quick, device=device or "auto", out=out)
    return Record(data, f"experiment {name}" + (" (quick)" if quick else ""))

