"""Collectives on a TPU's torus: ICI figures per pod, and rings that run both directions at once.

A TPU pod wires each chip to its neighbours (``ici_ports`` links: 4 in a 2-D torus, 6 in a 3-D
one). One axis of ``k`` chips is a ring; with the wraparound link it is a *bidirectional* ring:
every link sends both ways at once, so a collective can send half of each chunk clockwise and half
counter-clockwise. With ``W`` the bandwidth of one link in one direction and ``V`` the bytes of the
whole array (the all-gather's output, the reduce-scatter's input; for all-to-all the bytes that
all the chips together hold):

* all-gather and reduce-scatter: ``(k - 1) / k * V / (2 W)``, half a one-way ring's
  ``(k - 1) / k * V / W``, in ``ceil((k - 1) / 2)`` hops;
* all-reduce = reduce-scatter + all-gather: twice that;
* all-to-all: a chunk travels on average a quarter of the ring each way instead of half of it one
  way, and both directions are used: ``V / (8 W)`` (times ``(k^2 - 1) / k^2`` for odd ``k``,
  ``1`` for even ``k``), a quarter of a one-way ring's ``V / (2 W)``;
* without the wraparound link (a *line*, as in a slice smaller than a full torus axis on some
  generations) the link at the middle carries half of the array across, one way: all-gather and
  reduce-scatter take ``V / (2 W)`` for even ``k`` (about the torus time for large ``k``, but in
  ``k - 1`` hops instead of ``ceil((k - 1) / 2)``, and twice the torus time for small ``k``);
  all-to-all crosses the middle with ``V / 4`` bytes each way: ``V / (4 W)``, twice the torus time.

Each hop costs ``latency``. Source: J. Austin et al., *How to Scale Your Model* (2025), part 3
"Sharded matrices and how to multiply them" (all-gather on a bidirectional ring ``V / W_bidi``,
all-to-all a quarter of it) and part 2 "How to think about TPUs" (ICI figures, wraparound); the
pod figures are Google Cloud's (``mlsys/data/tpu_pods.toml``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pint

from . import hardware
from .datafile import read_toml
from .units import Q_, positive, require_count

__all__ = ["Pod", "pods", "pod", "link_bandwidth", "TORUS_COLLECTIVES", "axis_collective_time", "DATA_FILE"]

DATA_FILE = Path(__file__).with_name("data") / "tpu_pods.toml"
TORUS_COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
_KEYS = {"accelerator", "ici_ports", "topology", "pod_chips", "largest_slice", "scaling_book_link_bw",
         "publisher", "title", "url", "date"}
_OPTIONAL = {"dcn_per_chip"}


class PodDataError(ValueError):
    """The TPU pod data file is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class Pod:
    """One TPU generation's pod: chips, torus and ICI links."""

    accelerator: str
    ici_ports: int
    topology: str
    pod_chips: int
    largest_slice: tuple[int, ...]
    scaling_book_link_bw: pint.Quantity
    url: str
    dcn_per_chip: pint.Quantity | None = None  # data-centre network per chip, as printed; None: not in the data

    @property
    def ici_over_dcn(self) -> float | None:
        """How many times the chip's ICI (both directions, as printed) exceeds its DCN; None without a DCN figure."""
        if self.dcn_per_chip is None:
            return None
        return (2 * self.ici_per_chip / self.dcn_per_chip).to("").m

    @property
    def ici_per_chip(self) -> pint.Quantity:
        """Per-chip ICI bandwidth, all ports together, one direction (Google's bidirectional figure / 2)."""
        acc = hardware.get(self.accelerator)
        if acc.interconnect_bandwidth is None:
            raise PodDataError(f"{self.accelerator} has no interconnect_bandwidth in accelerators.toml")
        return acc.interconnect_bandwidth

    @property
    def link_bandwidth(self) -> pint.Quantity:
        """One ICI link, one direction: per-chip figure / ports (byte/s)."""
        return (self.ici_per_chip / self.ici_ports).to("GB/s")


def _pod(raw: dict, i: int) -> Pod:
    where = f"{DATA_FILE.name} [[pod]] {i + 1}"
    extra, missing = set(raw) - _KEYS - _OPTIONAL, _KEYS - set(raw)
    if extra or missing:
        raise PodDataError(f"{where}: unknown keys {sorted(extra)}, missing keys {sorted(missing)}")
    name = hardware.get(raw["accelerator"]).name
    shape = tuple(require_count(k, f"{where}.largest_slice") for k in raw["largest_slice"])
    topo = raw["topology"]
    if topo not in ("2D torus", "3D torus") or len(shape) != int(topo[0]):
        raise PodDataError(f"{where}: topology {topo!r} and largest_slice {shape} disagree; expected '2D torus' or "
                           "'3D torus' with that many axes")
    ports = require_count(raw["ici_ports"], f"{where}.ici_ports")
    if ports != 2 * len(shape):
        raise PodDataError(f"{where}: a {topo} has {2 * len(shape)} links per chip, not {ports}")
    chips = require_count(raw["pod_chips"], f"{where}.pod_chips")
    if math.prod(shape) > chips:
        raise PodDataError(f"{where}: largest_slice {shape} holds {math.prod(shape)} chips, more than the pod's {chips}")
    bw, dcn = raw["scaling_book_link_bw"], raw.get("dcn_per_chip")
    return Pod(name, ports, topo, chips, shape,
               positive(Q_(bw["value"], bw["unit"]), "byte/s", f"{where}.scaling_book_link_bw"), raw["url"],
               None if dcn is None else positive(Q_(dcn["value"], dcn["unit"]), "byte/s", f"{where}.dcn_per_chip"))


@lru_cache(maxsize=1)
def pods() -> dict[str, Pod]:
    """Every pod of ``mlsys/data/tpu_pods.toml``, by accelerator name."""
    data = read_toml(DATA_FILE, PodDataError, "TPU pod data file", "")
    return {p.accelerator: p for p in (_pod(raw, i) for i, raw in enumerate(data.get("pod", [])))}


def pod(name: str) -> Pod:
    """The pod of one TPU generation, by any name or alias of the accelerator ("TPU v5e")."""
    acc = hardware.get(name).name
    if acc not in pods():
        raise KeyError(f"no pod figures for {acc}; known: {', '.join(pods())}")
    return pods()[acc]


def link_bandwidth(name: str) -> pint.Quantity:
    """One ICI link's bandwidth in one direction for a TPU generation (Google's per-chip figure / 2 / ports)."""
    return pod(name).link_bandwidth


def axis_collective_time(
    collective: str,
    nbytes: object,
    axis_size: int,
    bandwidth: object,
    latency: object = Q_(0, "s"),
    wraparound: bool = True,
) -> pint.Quantity:
    """Time of a collective along one torus axis of ``k`` chips, both directions used, in seconds.

    ``nbytes`` is ``V``, the whole array; ``bandwidth`` one link, one direction. With wraparound:
    all_gather / reduce_scatter ``ceil((k-1)/2) latency + (k-1)/k V / (2 W)``; all_reduce twice
    that; all_to_all ``floor(k/2) latency + c V / (8 W)`` with ``c = 1`` for even ``k`` and
    ``(k^2-1)/k^2`` for odd. Without (a line): ``(k-1)`` hops, ``V / (2 W)`` for all_gather and
    reduce_scatter (at least ``(k-1)/k V / (2 W)``: the middle cut; ``k = 2`` sends ``V / 2``
    each way) and ``V / (4 W)`` for all_to_all (``(k^2 - 1) / k^2`` of it for odd ``k``).
    ``k = 1`` takes no time.
    """
    if collective not in TORUS_COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; expected one of {', '.join(TORUS_COLLECTIVES)}")
    v = positive(nbytes, "byte", "nbytes")
    k = require_count(axis_size, "axis_size")
    w = positive(bandwidth, "byte/s", "bandwidth")
    a = positive(latency, "s", "latency", allow_zero=True)
    if k == 1:
        return Q_(0.0, "s")
    if collective == "all_reduce":
        return 2 * axis_collective_time("all_gather", v, k, w, a, wraparound)
    odd = (k * k - 1) / (k * k) if k % 2 else 1.0
    if collective == "all_to_all":
        if wraparound:
            return (math.floor(k / 2) * a + odd * v / (8 * w)).to("s")
        return ((k - 1) * a + odd * v / (4 * w)).to("s")
    if wraparound:
        return (math.ceil((k - 1) / 2) * a + (k - 1) / k * v / (2 * w)).to("s")
    # a line: the link at the middle carries the ceil(k/2) chunks of V/k of the larger side one way
    return ((k - 1) * a + math.ceil(k / 2) / k * v / w).to("s")
