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
  latency grows with the tree depth up and down; pipeline fill is ignored).

  **Tree vs ring, and the assumption behind it.** The tree sends ``2 n`` bytes against the
  ring's ``2 (p - 1) / p * n``: only ``2 n / p`` more. The ring pays ``2 (p - 1)`` latencies
  against the tree's ``2 ceil(log2 p)``. So the ring wins only for messages above
  ``n* = p * bandwidth * latency * (p - 1 - ceil(log2 p))`` (:func:`tree_ring_crossover`):
  at 64 GPUs, 450 GB/s and 5 us that is 8.2 GB, far beyond any gradient bucket. The model
  assumes the tree's pipelined chunks run at full link bandwidth; real trees lose some of it
  (pipeline fill, a GPU sending down two links at once, PCIe/NIC limits), which is why NCCL
  picks rings for large messages on one node. Use the crossover as the model's statement, not
  as NCCL's tuning.

Hierarchical all-reduce (:func:`hierarchical_allreduce_time`), for ``N`` nodes of ``g`` GPUs
each, fast links (NVLink) inside a node and a slower network (InfiniBand) across: reduce-scatter
inside each node, all-reduce of the ``n / g`` shard across nodes (one ring per local rank, each
over that GPU's own NIC), all-gather inside the node (X. Jia et al., "Highly Scalable Deep
Learning Training System with Mixed-Precision: Training ImageNet in Four Minutes",
arXiv:1807.11205, 2018, section 3.3; NCCL does the same with its "CollNet"/NVLS-Tree variants):

    t = 2 (g - 1) a_intra + 2 (g - 1) / g * n / B_intra + 2 (N - 1) a_inter + 2 (N - 1) / N * (n / g) / B_inter

All-to-all (:func:`alltoall_time`): every GPU holds ``n`` bytes, ``n / p`` for each GPU; pairwise
exchange in ``p - 1`` steps (R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective
Communication Operations in MPICH", Int. J. High Perform. Comput. Appl. 19(1), 2005):
``t = (p - 1) latency + (p - 1) / p * n / bandwidth``. With ``gpus_per_node = g`` and an
``inter_bandwidth``, the ``(g - 1) / p * n`` bytes for GPUs of the same node go over the fast
links while ``(p - g) / p * n`` cross the network at the same time; the slower of the two sets
the time: ``(p - 1) latency + max((g - 1) / p * n / B_intra, (p - g) / p * n / B_inter)``.

All-gather and reduce-scatter (ring): ``n`` is the size of the full tensor (all-gather's output,
reduce-scatter's input); each GPU sends ``(p - 1) / p * n`` bytes in ``p - 1`` steps.
``world_size = 1`` moves nothing and takes no time.

Rails (:func:`rail_allreduce_time`): a cluster of ``N`` nodes of ``g`` GPUs with one network card
per GPU wires card ``i`` of every node to the same leaf switch (rail ``i``). NCCL then runs ``g``
rings at once (one per rail, its "channels"), each carrying ``n / g`` of the data around all
``p = N g`` GPUs: inside a node the ring hops over NVLink, between nodes over that rail's card. Each
card carries one ring, ``2 (p - 1) / p * n / g`` bytes; each GPU's NVLink carries the other ``g - 1``
rings' hops, ``(g - 1) * 2 (p - 1) / p * n / g``. Both run at once, so
``t = 2 (p - 1) a + max(2 (p-1)/p (n/g) / B_nic, (g-1) 2 (p-1)/p (n/g) / B_nvlink)``.

In-network reduction (:func:`in_network_allreduce_time`): NVLink SHARP (NVLS, in the NVSwitch) and
InfiniBand SHARP (in the switch) add the contributions inside the switch, so each GPU sends its
``n`` bytes once and receives the ``n``-byte sum once, both directions at once:
``t = 2 a + n / bandwidth`` against the ring's ``2 (p - 1) / p * n / bandwidth``. Its bus bandwidth
(NCCL's ``2 (p - 1) / p`` factor) can therefore exceed the link's per-direction bandwidth
(R. L. Graham et al., "Scalable Hierarchical Aggregation Protocol (SHArP)", COM-HPC 2016;
NVIDIA, NCCL documentation, the ``NCCL_ALGO`` environment variable: NVLS, NVLSTree, CollNet). Real
NVLS moves a little more (each GPU also sends and receives ``n / p`` to split the work); the model
keeps the leading term.

Bus-bandwidth factors (:func:`busbw_factor`), from nccl-tests' doc/PERFORMANCE.md
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): ``busbw = algbw * factor``
with all-reduce ``2 (p - 1) / p``, reduce-scatter, all-gather and all-to-all ``(p - 1) / p``,
broadcast and reduce ``1``: the bytes the busiest link carries per byte of the user's tensor, for
the bandwidth-optimal algorithm of each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pint

from .hardware import Accelerator, get
from .units import Q_, DimensionError, as_quantity, positive, require_count, require_fraction, require_positive

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
    "link_bandwidth",
    "tree_ring_crossover",
    "hierarchical_allreduce_time",
    "alltoall_bytes_per_gpu",
    "alltoall_time",
    "algorithm_bandwidth",
    "bus_bandwidth",
    "COLLECTIVES",
    "busbw_factor",
    "rail_allreduce_time",
    "in_network_allreduce_time",
    "fit_latency_bandwidth",
    "PublishedFigure",
    "published",
]

ALGORITHMS = ("ring", "tree")


def _nbytes(value: object, name: str = "nbytes") -> pint.Quantity:
    return positive(value, "byte", name)


def _world(value: object, name: str = "world_size") -> int:
    return require_count(value, name)


def _algorithm(value: object) -> str:
    if value not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {value!r}; expected one of {', '.join(ALGORITHMS)}")
    return str(value)


def _is_name(text: str) -> bool:
    """Whether ``text`` names an accelerator ("H100") rather than a quantity ("450 GB/s", "inf GB/s")."""
    head = text.strip().lower()
    return head[:1].isalpha() and not head.startswith(("inf", "nan", "-inf", "+inf"))


def link_bandwidth(value: object, name: str = "bandwidth") -> pint.Quantity:
    """A per-GPU, per-direction link bandwidth in byte/s, from a quantity, a string or an accelerator.

    A string starting with a letter is an accelerator name (``"H100"``: its
    ``interconnect_bandwidth``, already per direction); one starting with a digit is a
    quantity (``"450 GB/s"``). Plain numbers, non-finite, zero and negative values are refused.
    """
    if isinstance(value, Accelerator) or (isinstance(value, str) and _is_name(value)):
        acc = get(value) if isinstance(value, str) else value
        if acc.interconnect_bandwidth is None:
            raise ValueError(f"{acc.name} has no interconnect_bandwidth figure; pass a bandwidth such as '450 GB/s'")
        return acc.interconnect_bandwidth
    try:
        q = as_quantity(value, "byte/s", name)
    except DimensionError as exc:
        raise DimensionError(f"{exc} (per GPU, per direction, e.g. '450 GB/s')") from None
    return require_positive(q, name)


def _latency(value: object, name: str = "latency") -> pint.Quantity:
    return positive(value, "s", name, allow_zero=True)


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
    return (_steps(p, alg) * _latency(latency) + sent / link_bandwidth(bandwidth)).to("s")


def reduce_scatter_time(nbytes: object, world_size: int, bandwidth: object, latency: object = Q_(0, "s")) -> pint.Quantity:
    """Ring reduce-scatter time: ``(p - 1) latency + (p - 1) / p * n / bandwidth`` seconds (bandwidth per direction)."""
    p = _world(world_size)
    return ((p - 1) * _latency(latency) + reduce_scatter_bytes_per_gpu(nbytes, p) / link_bandwidth(bandwidth)).to("s")


def allgather_time(nbytes: object, world_size: int, bandwidth: object, latency: object = Q_(0, "s")) -> pint.Quantity:
    """Ring all-gather time: ``(p - 1) latency + (p - 1) / p * n / bandwidth`` seconds (bandwidth per direction)."""
    p = _world(world_size)
    return ((p - 1) * _latency(latency) + allgather_bytes_per_gpu(nbytes, p) / link_bandwidth(bandwidth)).to("s")


def _overlap(value: object) -> float:
    return require_fraction(value, "overlap")  # share of communication hidden under compute


def _time(value: object, name: str) -> pint.Quantity:
    return positive(value, "s", name, allow_zero=True)


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



def tree_ring_crossover(world_size: int, bandwidth: object, latency: object) -> pint.Quantity:
    """Message size above which this module's ring all-reduce beats its tree, in bytes.

    Setting :func:`allreduce_time` equal for both: the tree sends ``2 n / p`` bytes more and the
    ring pays ``2 (p - 1 - ceil(log2 p))`` more latencies, so
    ``n* = p * bandwidth * latency * (p - 1 - ceil(log2 p))``. Zero when the ring never pays more
    latency (``p <= 3``), where the ring is never slower.
    Assumes the tree runs at full link bandwidth (see the module docstring).
    """
    p = _world(world_size)
    extra_steps = p - 1 - math.ceil(math.log2(p))
    return (p * link_bandwidth(bandwidth) * _latency(latency) * max(extra_steps, 0)).to("byte")


def hierarchical_allreduce_time(
    nbytes: object,
    nodes: int,
    gpus_per_node: int,
    intra_bandwidth: object,
    inter_bandwidth: object,
    intra_latency: object = Q_(0, "s"),
    inter_latency: object = Q_(0, "s"),
    pipelined: bool = False,
) -> pint.Quantity:
    """Two-level all-reduce of ``n`` bytes on ``N`` nodes of ``g`` GPUs, in seconds.

    With ``pipelined=True`` the data is cut into chunks whose NVLink and network phases overlap, as
    NCCL's tree and NVLS-tree algorithms do, so the time is the slower phase, ``max(intra, inter)``,
    not their sum (the chunks' fill and drain are not counted).

    ``2 (g - 1) a_intra + 2 (g - 1) / g * n / B_intra + 2 (N - 1) a_inter + 2 (N - 1) / N * (n / g) / B_inter``:
    ring reduce-scatter and all-gather inside each node over ``intra_bandwidth`` (NVLink, per GPU
    per direction) and a ring all-reduce of each GPU's ``n / g`` shard across nodes over
    ``inter_bandwidth`` (that GPU's network link, e.g. 400 Gb/s InfiniBand = 50 GB/s per direction).
    Source: Jia et al. 2018 (module docstring).
    """
    n = _nbytes(nbytes)
    big_n, g = _world(nodes, "nodes"), _world(gpus_per_node, "gpus_per_node")
    b_in, b_out = link_bandwidth(intra_bandwidth, "intra_bandwidth"), link_bandwidth(inter_bandwidth, "inter_bandwidth")
    a_in, a_out = _latency(intra_latency, "intra_latency"), _latency(inter_latency, "inter_latency")
    intra = 2 * (g - 1) * a_in + 2 * (g - 1) / g * n / b_in
    inter = 2 * (big_n - 1) * a_out + 2 * (big_n - 1) / big_n * (n / g) / b_out
    if not isinstance(pipelined, bool):
        raise TypeError(f"pipelined must be True or False, got {pipelined!r}")
    return (max(intra, inter) if pipelined else intra + inter).to("s")


def alltoall_bytes_per_gpu(nbytes: object, world_size: int) -> pint.Quantity:
    """Bytes each GPU sends in an all-to-all where it holds ``n`` bytes, ``n / p`` per peer: ``(p - 1) / p * n``."""
    n, p = _nbytes(nbytes), _world(world_size)
    return ((p - 1) / p * n).to("byte")


def alltoall_time(
    nbytes: object,
    world_size: int,
    bandwidth: object,
    latency: object = Q_(0, "s"),
    gpus_per_node: int | None = None,
    inter_bandwidth: object | None = None,
) -> pint.Quantity:
    """All-to-all (pairwise exchange) time in seconds; each GPU holds ``n`` bytes, ``n / p`` per peer.

    One level: ``(p - 1) latency + (p - 1) / p * n / bandwidth``. With ``gpus_per_node = g`` and
    ``inter_bandwidth``: ``(p - 1) latency + max((g - 1) / p * n / bandwidth, (p - g) / p * n / inter_bandwidth)``
    (same-node traffic over ``bandwidth``, the rest over the network, concurrently). ``p`` must be
    a multiple of ``g``. Bandwidths per GPU per direction.
    """
    n, p = _nbytes(nbytes), _world(world_size)
    lat = (p - 1) * _latency(latency)
    b_in = link_bandwidth(bandwidth)
    if gpus_per_node is None and inter_bandwidth is None:
        return (lat + (p - 1) / p * n / b_in).to("s")
    if gpus_per_node is None or inter_bandwidth is None:
        raise ValueError("give both gpus_per_node and inter_bandwidth for a two-level all-to-all, or neither")
    g = _world(gpus_per_node, "gpus_per_node")
    if p % g:
        raise ValueError(f"world_size {p} is not a multiple of gpus_per_node {g}")
    b_out = link_bandwidth(inter_bandwidth, "inter_bandwidth")
    return (lat + max(((g - 1) / p * n / b_in).to("s"), ((p - g) / p * n / b_out).to("s"))).to("s")


# ----------------------------------------------------------------------------------------------
# reading measurements: algorithm vs bus bandwidth, and the alpha-beta fit


def algorithm_bandwidth(nbytes: object, time: object) -> pint.Quantity:
    """Algorithm bandwidth of a collective: ``algbw = n / t`` (bytes of the tensor per second).

    This is what a user sees (how fast "a 256 MiB all-reduce" goes); it is not what the links
    carry, which :func:`bus_bandwidth` gives. byte/s.
    """
    t = require_positive(as_quantity(time, "s", "time"), "time")
    return (_nbytes(nbytes) / t).to("byte/s")


#: collectives with an nccl-tests bus-bandwidth factor
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce")


def busbw_factor(collective: str, world_size: int) -> float:
    """nccl-tests' bus-bandwidth factor: ``busbw = algbw * factor`` (doc/PERFORMANCE.md).

    all_reduce ``2 (p - 1) / p``; reduce_scatter, all_gather, all_to_all ``(p - 1) / p``;
    broadcast, reduce ``1``. Dimensionless.
    """
    p = _world(world_size)
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")
    if collective == "all_reduce":
        return 2 * (p - 1) / p
    if collective in ("broadcast", "reduce"):
        return 1.0
    return (p - 1) / p


def bus_bandwidth(nbytes: object, time: object, world_size: int, collective: str = "all_reduce") -> pint.Quantity:
    """Bus bandwidth of a collective: ``busbw = algbw * busbw_factor(collective, p)`` byte/s.

    For the default ring all-reduce, ``algbw * 2 (p - 1) / p``: the bytes each GPU actually sends
    per second (NCCL tests' "busbw"), comparable with a link's bandwidth per direction whatever
    ``p`` is. 0 for an all-reduce on ``p = 1``.
    """
    return (algorithm_bandwidth(nbytes, time) * busbw_factor(collective, world_size)).to("byte/s")


def rail_allreduce_time(
    nbytes: object,
    nodes: int,
    gpus_per_node: int,
    nic_bandwidth: object,
    nvlink_bandwidth: object,
    latency: object = Q_(0, "s"),
) -> pint.Quantity:
    """Rail-optimised ring all-reduce (one card and one ring per GPU's rail), in seconds.

    ``p = nodes * g`` GPUs run ``g`` rings, each on ``n / g`` of the data; a ring crosses the
    network on one rail's cards and NVLink inside the node:
    ``2 (p - 1) latency + max(2 (p-1)/p (n/g) / B_nic, (g - 1) 2 (p-1)/p (n/g) / B_nvlink)``.
    Bandwidths per GPU (per card) per direction.
    """
    n = _nbytes(nbytes)
    big_n, g = _world(nodes, "nodes"), _world(gpus_per_node, "gpus_per_node")
    p = big_n * g
    b_nic = link_bandwidth(nic_bandwidth, "nic_bandwidth")
    b_nvl = link_bandwidth(nvlink_bandwidth, "nvlink_bandwidth")
    ring = allreduce_bytes_per_gpu(n / g, p)  # what one ring sends from each of its GPUs
    nic = (ring / b_nic).to("s")
    nvl = ((g - 1) * ring / b_nvl).to("s")
    return (2 * (p - 1) * _latency(latency) + max(nic, nvl)).to("s")


def in_network_allreduce_time(
    nbytes: object, world_size: int, bandwidth: object, latency: object = Q_(0, "s")
) -> pint.Quantity:
    """All-reduce with the sum formed in the switch (NVLS, SHARP), in seconds.

    Each GPU sends ``n`` bytes up and receives the ``n``-byte result, at once:
    ``2 latency + n / bandwidth`` (0 for ``p = 1``). Against a ring's ``2 (p - 1) / p * n`` this
    moves up to half the bytes per GPU; bandwidth per GPU per direction.
    """
    n, p = _nbytes(nbytes), _world(world_size)
    if p == 1:
        return Q_(0.0, "s")
    return (2 * _latency(latency) + n / link_bandwidth(bandwidth)).to("s")


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


# ----------------------------------------------------------------------------------------------
# published NCCL figures: what the models above are set against


@dataclass(frozen=True)
class PublishedFigure:
    """One published NCCL all-reduce figure (``mlsys/data/published_collectives.toml``).

    ``efficiency`` is the per-link efficiency of a ring, ``busbw / line``: what is left of the line rate
    after NCCL's protocol overhead (about 0.82 for 8 H100s: 370 of 450 GB/s).
    """

    name: str
    system: str
    world_size: int
    algorithm: str
    busbw: pint.Quantity
    algbw: pint.Quantity | None
    line: pint.Quantity
    source: str

    @property
    def efficiency(self) -> float:
        return float((self.busbw / self.line).to("").m)

    def time(self, nbytes: object) -> pint.Quantity:
        """All-reduce time at this figure's bandwidth: ``n / algbw``, where algbw is the printed one or,
        for a ring, ``busbw * p / (2 (p - 1))``."""
        n = _nbytes(nbytes)
        p = self.world_size
        alg = self.algbw if self.algbw is not None else self.busbw * p / (2 * (p - 1))
        return (n / alg).to("s")


def published(name: str) -> PublishedFigure:
    """A published NCCL figure by name (``"h100-8-ring"``, ``"h100-8-nvls"``); ``KeyError`` lists the known ones."""
    import tomllib
    from importlib import resources

    path = resources.files("mlsys") / "data" / "published_collectives.toml"
    figures = {f["name"]: f for f in tomllib.loads(path.read_text())["figure"]}
    if name not in figures:
        raise KeyError(f"no published figure {name!r}; known: {', '.join(figures)}")
    f = figures[name]
    gbs = lambda key: Q_(f[key], "GB/s") if key in f else None  # noqa: E731
    return PublishedFigure(f["name"], f["system"], int(f["world_size"]), f["algorithm"], gbs("busbw"), gbs("algbw"),
                           gbs("line"), f"{f['who']}, {f['where']} ({f['date']}), {f['url']}")
