"""Collective communication for data-parallel training: bytes, times and what they cost a step.

Latency-bandwidth ("alpha-beta") model: sending a message of ``n`` bytes over one link takes
``latency + n / bandwidth``. ``bandwidth`` is **per GPU, per direction**: what one GPU can send
(and, at the same time, receive). Datasheets often print NVLink as the total of both
directions: the H100's "900 GB/s" NVLink is 450 GB/s each way, so pass 450 GB/s (the
``interconnect_bandwidth`` in ``mlsys.hardware`` is already halved this way). Passing an
Accelerator or its name uses that figure.

Algorithms (``p`` GPUs, ``n`` bytes per GPU to reduce):

* **ring** reduce-scatter then all-gather around a ring (Patarasuk & Yuan, "Bandwidth optimal
  all-reduce algorithms for clusters of workstations", J. Parallel Distrib. Comput. 69(2),
  2009; NCCL's ring). Each phase is ``p - 1`` steps of ``n / p`` bytes, so each GPU sends
  ``2 (p - 1) / p * n`` bytes, in ``2 (p - 1)`` latency-bound steps:
  ``t = 2 (p - 1) latency + 2 (p - 1) / p * n / bandwidth``. The byte count is optimal;
  the latency term grows linearly with ``p``.
* **tree**: NCCL's double binary tree (S. Jeaugey, "Massively Scale Your Deep Learning Training
  with NCCL 2.4", NVIDIA Technical Blog, 2019-02,
  https://developer.nvidia.com/blog/massively-scale-deep-learning-training-nccl-2-4/ ; after
  Sanders, Speck & Träff, "Two-tree algorithms for full bandwidth broadcast, reduction and
  scan", Parallel Computing 35(12), 2009). The data is split in halves, each reduced up and
  broadcast down one of two complementary binary trees, pipelined in chunks. A GPU that is an
  inner node of one tree (two children) and a leaf of the other sends ``n/2`` up and
  ``2 * n/2`` down in the first and ``n/2`` up in the second: ``2 n`` bytes (``n`` when
  ``p = 2``). Model: ``t = 2 ceil(log2 p) latency + bytes_per_gpu / bandwidth`` (the
  latency grows with the tree depth up and down; pipeline fill is ignored). Trees win for
  small messages on many GPUs; rings win for large messages.

All-gather and reduce-scatter (ring): ``n`` is the size of the full tensor (all-gather's output,
reduce-scatter's input); each GPU sends ``(p - 1) / p * n`` bytes in ``p - 1`` steps.
``world_size = 1`` moves nothing and takes no time.
"""

from __future__ import annotations

import math

import pint

from .hardware import Accelerator, get
from .units import Q_, DimensionError, as_quantity, require_positive

__all__ = [
    "ALGORITHMS",
    "allreduce_bytes_per_gpu",
    "allreduce_time",
    "allgather_bytes_per_gpu",
    "allgather_time",
    "reduce_scatter_bytes_per_gpu",
    "reduce_scatter_time",
    "exposed_comm_time",
    "step_time",
    "sync_overhead",
    "scaling_efficiency",
    "algorithm_bandwidth",
    "bus_bandwidth",
    "fit_latency_bandwidth",
]

ALGORITHMS = ("ring", "tree")


def _nbytes(value: object, name: str = "nbytes") -> pint.Quantity:
    if isinstance(value, int) and not isinstance(value, bool):
        value = Q_(value, "byte")
    q = as_quantity(value, "byte", name)
    return require_positive(q, name)


def _world(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"world_size must be an integer number of GPUs >= 1, got {value!r}")
    if value < 1:
        raise ValueError(f"world_size must be an integer number of GPUs >= 1, got {value}")
    return value


def _algorithm(value: object) -> str:
    if value not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {value!r}; expected one of {', '.join(ALGORITHMS)}")
    return str(value)


def _bandwidth(value: object) -> pint.Quantity:
    # a string starting with a letter is an accelerator name ("H100"); with a digit, a quantity
    if isinstance(value, Accelerator) or (isinstance(value, str) and value.strip()[:1].isalpha()):
        acc = get(value) if isinstance(value, str) else value
        if acc.interconnect_bandwidth is None:
            raise ValueError(f"{acc.name} has no interconnect_bandwidth figure; pass a bandwidth such as '450 GB/s'")
        return acc.interconnect_bandwidth
    try:
        q = as_quantity(value, "byte/s", "bandwidth")
    except DimensionError as exc:
        raise DimensionError(f"{exc} (per GPU, per direction, e.g. '450 GB/s')") from None
    return require_positive(q, "bandwidth")


def _latency(value: object) -> pint.Quantity:
    q = as_quantity(value, "s", "latency")
    return require_positive(q, "latency", allow_zero=True)


def reduce_scatter_bytes_per_gpu(nbytes: object, world_size: int) -> pint.Quantity:
    """Bytes each GPU sends in a ring reduce-scatter of an ``n``-byte tensor: ``(p - 1) / p * n``."""
    n, p = _nbytes(nbytes), _world(world_size)
    return ((p - 1) / p * n).to("byte")


def allgather_bytes_per_gpu(nbytes: object, world_size: int) -> pint.Quantity:
    """Bytes each GPU sends in a ring all-gather whose output is ``n`` bytes: ``(p - 1) / p * n``."""
    n, p = _nbytes(nbytes), _world(world_size)
    return ((p - 1) / p * n).to("byte")


def allreduce_bytes_per_gpu(nbytes: object, world_size: int, algorithm: str = "ring") -> pint.Quantity:
    """Bytes each GPU sends (and receives) to all-reduce ``n`` bytes over ``p`` GPUs.

    ring: reduce-scatter + all-gather = ``2 (p - 1) / p * n`` (below ``2 n``, approaching it as
    ``p`` grows). tree (double binary tree, busiest GPU): ``2 n`` for ``p >= 3``, ``n`` for
    ``p = 2``. Both are 0 for ``p = 1``. Bytes.
    """
    n, p, alg = _nbytes(nbytes), _world(world_size), _algorithm(algorithm)
    if alg == "ring":
        return reduce_scatter_bytes_per_gpu(n, p) + allgather_bytes_per_gpu(n, p)
    factor = 0 if p == 1 else 1 if p == 2 else 2
    return (factor * n).to("byte")


def _steps(p: int, alg: str) -> int:
    if alg == "ring":
        return 2 * (p - 1)
    return 2 * math.ceil(math.log2(p))


def allreduce_time(
    nbytes: object, world_size: int, bandwidth: object, latency: object = Q_(0, "s"), algorithm: str = "ring"
) -> pint.Quantity:
    """Time to all-reduce ``n`` bytes over ``p`` GPUs, in seconds.

    ring: ``2 (p - 1) latency + 2 (p - 1) / p * n / bandwidth``;
    tree: ``2 ceil(log2 p) latency + allreduce_bytes_per_gpu(n, p, "tree") / bandwidth``.
    ``bandwidth`` is per GPU per direction (half a datasheet's bidirectional NVLink figure),
    or an Accelerator / name whose ``interconnect_bandwidth`` is used; ``latency`` per step.
    """
    p, alg = _world(world_size), _algorithm(algorithm)
    sent = allreduce_bytes_per_gpu(nbytes, p, alg)
    return (_steps(p, alg) * _latency(latency) + sent / _bandwidth(bandwidth)).to("s")


def reduce_scatter_time(nbytes: object, world_size: int, bandwidth: object, latency: object = Q_(0, "s")) -> pint.Quantity:
    """Ring reduce-scatter time: ``(p - 1) latency + (p - 1) / p * n / bandwidth`` seconds (bandwidth per direction)."""
    p = _world(world_size)
    return ((p - 1) * _latency(latency) + reduce_scatter_bytes_per_gpu(nbytes, p) / _bandwidth(bandwidth)).to("s")


def allgather_time(nbytes: object, world_size: int, bandwidth: object, latency: object = Q_(0, "s")) -> pint.Quantity:
    """Ring all-gather time: ``(p - 1) latency + (p - 1) / p * n / bandwidth`` seconds (bandwidth per direction)."""
    p = _world(world_size)
    return ((p - 1) * _latency(latency) + allgather_bytes_per_gpu(nbytes, p) / _bandwidth(bandwidth)).to("s")


def _overlap(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"overlap must be a fraction in [0, 1] (share of communication hidden under compute), got {value!r}")
    return float(value)


def _time(value: object, name: str) -> pint.Quantity:
    return require_positive(as_quantity(value, "s", name), name, allow_zero=True)


def exposed_comm_time(compute_time: object, comm_time: object, overlap: float = 0.0) -> pint.Quantity:
    """Communication time not hidden under compute: ``comm - min(overlap * comm, compute)`` seconds.

    ``overlap`` (0..1) is the share of communication that runs concurrently with compute (e.g.
    gradient buckets all-reduced while the backward pass continues); it cannot hide more
    than the compute time itself.
    """
    c, m, f = _time(compute_time, "compute_time"), _time(comm_time, "comm_time"), _overlap(overlap)
    return (m - min(f * m, c)).to("s")


def step_time(compute_time: object, comm_time: object, overlap: float = 0.0) -> pint.Quantity:
    """Training-step time: ``compute + exposed_comm_time(compute, comm, overlap)`` seconds."""
    return (_time(compute_time, "compute_time") + exposed_comm_time(compute_time, comm_time, overlap)).to("s")


def sync_overhead(compute_time: object, comm_time: object, overlap: float = 0.0) -> float:
    """Fraction of the step spent waiting on communication: ``exposed / (compute + exposed)``.

    With ``exposed = comm - min(overlap * comm, compute)``. 0 when nothing is exposed.
    Dimensionless, in [0, 1].
    """
    exposed = exposed_comm_time(compute_time, comm_time, overlap)
    total = step_time(compute_time, comm_time, overlap)
    return 0.0 if total.magnitude == 0 else float(exposed / total)


def scaling_efficiency(
    compute_time: object,
    gradient_bytes: object,
    world_size: int,
    bandwidth: object,
    latency: object = Q_(0, "s"),
    overlap: float = 0.0,
    algorithm: str = "ring",
) -> float:
    """Data-parallel (weak) scaling efficiency: ``compute / step_time(compute, allreduce, overlap)``.

    Each of ``p`` GPUs processes its own batch in ``compute_time`` and then all-reduces
    ``gradient_bytes`` (:func:`allreduce_time`). Throughput is ``p`` batches per step, against
    ``p`` batches per ``compute_time`` for ``p`` independent GPUs, so the efficiency is
    ``compute / (compute + exposed)`` = ``1 - sync_overhead``. 1.0 for ``p = 1``.
    """
    comm = allreduce_time(gradient_bytes, world_size, bandwidth, latency, algorithm)
    c = _time(compute_time, "compute_time")
    require_positive(c, "compute_time")
    return float(c / step_time(c, comm, overlap))



# ----------------------------------------------------------------------------------------------
# reading measurements: algorithm vs bus bandwidth, and the alpha-beta fit


def algorithm_bandwidth(nbytes: object, time: object) -> pint.Quantity:
    """Algorithm bandwidth of a collective: ``algbw = n / t`` (bytes of the tensor per second).

    This is what a user sees (how fast "a 256 MiB all-reduce" goes); it is not what the links
    carry, which :func:`bus_bandwidth` gives. byte/s.
    """
    t = require_positive(as_quantity(time, "s", "time"), "time")
    return (_nbytes(nbytes) / t).to("byte/s")


def bus_bandwidth(nbytes: object, time: object, world_size: int) -> pint.Quantity:
    """Bus bandwidth of a ring all-reduce: ``busbw = algbw * 2 (p - 1) / p`` byte/s.

    The bytes each GPU actually sends per second on a ring (NCCL tests' "busbw"), so it can be
    compared with a link's bandwidth per direction whatever ``p`` is. 0 for ``p = 1``.
    """
    p = _world(world_size)
    return (algorithm_bandwidth(nbytes, time) * (2 * (p - 1) / p)).to("byte/s")


def fit_latency_bandwidth(
    nbytes: list[object], times: list[object], world_size: int, algorithm: str = "ring"
) -> tuple[pint.Quantity, pint.Quantity]:
    """Fit :func:`allreduce_time`'s ``latency`` (alpha) and ``bandwidth`` (1/beta) to measured times.

    The model is linear in ``alpha`` and ``beta = 1 / bandwidth``:
    ``t = steps * alpha + allreduce_bytes_per_gpu(n, p) * beta``. Least squares on the
    *relative* residuals ``(model - t) / t`` (each row divided by ``t``), so microsecond-scale
    small messages weigh as much as millisecond-scale large ones. Returns ``(latency [s],
    bandwidth [byte/s])``; a negative latency from noisy data is clipped to 0 and the bandwidth
    refitted. Needs at least two distinct sizes and ``world_size >= 2``.
    """
    import numpy as np

    p, alg = _world(world_size), _algorithm(algorithm)
    if p < 2:
        raise ValueError("fit_latency_bandwidth: world_size 1 moves nothing; expected world_size >= 2")
    if len(nbytes) != len(times):
        raise ValueError(f"fit_latency_bandwidth: expected as many times as sizes, got {len(times)} and {len(nbytes)}")
    sent = np.array([allreduce_bytes_per_gpu(n, p, alg).to("byte").magnitude for n in nbytes], dtype=float)
    t = np.array([require_positive(as_quantity(x, "s", "time"), "time").to("s").magnitude for x in times], dtype=float)
    if len(set(sent.tolist())) < 2:
        raise ValueError("fit_latency_bandwidth: expected at least two distinct message sizes")
    steps = float(_steps(p, alg))
    a = np.column_stack([np.full_like(t, steps), sent]) / t[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if alpha < 0:
        alpha = 0.0
        beta = float(np.sum(sent / t) / np.sum((sent / t) ** 2))
    if beta <= 0:
        raise ValueError("fit_latency_bandwidth: the times do not grow with size; no bandwidth can be fitted")
    return Q_(float(alpha), "s"), Q_(1.0 / float(beta), "byte/s")
