"""Measuring the machine in hand: timing done right, microbenchmarks, and a roofline check.

* :mod:`mlsys.bench.timing`: :func:`time_fn` (CUDA events with the L2 flushed between timed
  calls on a GPU, ``perf_counter`` on a CPU; warm-up, repeats, min/median/max, a check of the
  result after timing) and the :class:`Timing` record of what was timed and how.
* :mod:`mlsys.bench.micro`: copy and read bandwidth, matmul throughput per dtype, launch
  overhead (eager op, empty Triton kernel, CUDA-graph replay), host-to-device copies.
* :mod:`mlsys.bench.roofcheck`: kernels of many intensities, predicted from the measured roofs
  with :func:`mlsys.roofline.time_lower_bound` (and :mod:`mlsys.overhead` for tiny ones) and timed.
* :mod:`mlsys.bench.experiment`: named experiments, one per GPU figure the book shows;
  :func:`run` (``mlsys.bench.run("divergence")``) re-measures one here, and
  ``python -m mlsys.bench run NAME... | all | --list`` records them.
* :func:`main`: ``python -m mlsys measure [--out PATH] [--quick]`` runs all of it and writes
  ``data/measurements/<device-slug>.json`` (schema: :mod:`mlsys.bench.records`).
"""

from __future__ import annotations

from .experiment import NeedsDevice, catalogue
from .experiment import run as run
from .records import load_experiment
from .run import main, measure
from .timing import CheckFailed, Timing, choose_repeats, time_cpu, time_cuda, time_fn

__all__ = ["main", "measure", "run", "catalogue", "load_experiment", "NeedsDevice", "Timing", "CheckFailed",
           "time_fn", "time_cpu", "time_cuda", "choose_repeats"]
