"""Fixed costs that do not shrink with faster hardware: serial fractions and kernel launches.

Amdahl's law bounds what speeding up part of a program can buy. The launch model treats a
sequence of kernels as a two-stage pipeline: the host (Python, the framework, the driver)
issues each launch in ``launch`` seconds, and the GPU runs each kernel in ``kernel``
seconds. A kernel cannot start before it has been issued, and launches are asynchronous, so
for ``n`` identical kernels

    eager time = launch + kernel + (n - 1) * max(launch, kernel)

When kernels are tiny (``kernel < launch``) the GPU idles between them and the host's launch
rate sets the pace: the program is *launch-bound*. Two remedies:

* **CUDA graphs** record the sequence once and replay it with a single host launch; the GPU
  still pays a small per-kernel cost for each node:
  ``graph time = graph_launch + n * (per_node + kernel)``.
* **Fusion** turns the ``n`` kernels into one, paying one launch (see ``mlsys.fusion``,
  which also removes the intermediate memory traffic).

Per-launch costs depend on the host, driver and framework; measure them with ``mlsys.bench``
rather than assuming a figure.
"""

from __future__ import annotations

from typing import NamedTuple

import pint

from .units import Q_, positive, require_count, require_fraction, require_positive

__all__ = ["amdahl_speedup", "launch_time", "graph_time", "LaunchComparison", "launch_comparison"]


def _time(value: object, name: str, allow_zero: bool = True) -> pint.Quantity:
    return positive(value, "s", name, allow_zero=allow_zero)




def amdahl_speedup(parallel_fraction: float, speedup: float) -> float:
    """Amdahl's law: overall speedup ``1 / ((1 - f) + f / s)`` (dimensionless).

    ``f`` (0..1) is the fraction of the original run time that is sped up, ``s`` (> 0) the
    factor by which that part gets faster. As ``s`` grows the result approaches ``1 / (1 - f)``.
    """
    f = require_fraction(parallel_fraction, "parallel_fraction")
    require_positive(speedup, "speedup")
    return 1.0 / ((1.0 - f) + f / speedup)


def launch_time(n_kernels: int, launch: object, kernel: object) -> pint.Quantity:
    """Time to run ``n`` identical kernels launched one after another (eager mode), in seconds.

    ``launch + kernel + (n - 1) * max(launch, kernel)``: a two-stage pipeline in which the host
    issues a launch every ``launch`` seconds and the GPU runs each kernel for ``kernel`` seconds.
    """
    n = require_count(n_kernels, "n_kernels")
    lt, kt = _time(launch, "launch"), _time(kernel, "kernel")
    return (lt + kt + (n - 1) * max(lt, kt)).to("s")


def graph_time(n_kernels: int, kernel: object, graph_launch: object, per_node: object = Q_(0, "s")) -> pint.Quantity:
    """Time to replay ``n`` identical kernels as one CUDA graph, in seconds.

    ``graph_launch + n * (per_node + kernel)``: one host launch for the whole graph, then the
    GPU runs the nodes back to back, paying ``per_node`` for each.
    """
    n = require_count(n_kernels, "n_kernels")
    return (_time(graph_launch, "graph_launch") + n * (_time(per_node, "per_node") + _time(kernel, "kernel"))).to("s")


class LaunchComparison(NamedTuple):
    """Times of ``n`` small kernels run eagerly, as a CUDA graph, and fused into one kernel."""

    eager: pint.Quantity
    graph: pint.Quantity
    fused: pint.Quantity


def launch_comparison(
    n_kernels: int, launch: object, kernel: object, graph_launch: object, per_node: object = Q_(0, "s")
) -> LaunchComparison:
    """Eager (:func:`launch_time`), graph (:func:`graph_time`) and fused times of ``n`` kernels.

    The fused time is ``launch_time(1, launch, n * kernel)`` = ``launch + n * kernel``: the
    same GPU work in one kernel with one launch. (Fusing element-wise kernels also removes the
    intermediate traffic, which shortens the work itself; ``mlsys.fusion`` models that.)
    """
    n = require_count(n_kernels, "n_kernels")
    kt = _time(kernel, "kernel")
    return LaunchComparison(
        eager=launch_time(n, launch, kt),
        graph=graph_time(n, kt, graph_launch, per_node),
        fused=launch_time(1, launch, n * kt),
    )
