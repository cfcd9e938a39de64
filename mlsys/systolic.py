"""Systolic arrays: a cycle-by-cycle simulation of a small array and a model of large, tiled ones.

A systolic array is a grid of ``R x C`` processing elements (PEs), each doing one
multiply-accumulate (MAC) per cycle and passing operands to its neighbours; only the PEs on
the edge touch the buffers. It computes ``Out = A @ B`` with ``A`` of shape ``(M, K)`` and ``B``
of shape ``(K, N)``. Which operand stays put in the PEs is the *dataflow* (Chen et al.,
Eyeriss, ISCA 2016; Kung, "Why systolic architectures?", IEEE Computer 1982):

* **weight stationary** (WS, the TPU's matrix unit; Jouppi et al., ISCA 2017): PE ``(k, n)``
  holds ``B[k, n]``; rows of ``A`` enter from the left, skewed by one cycle per row of the array,
  and move right one PE per cycle; partial sums move down and leave at the bottom. ``A[m, k]`` is
  at PE ``(k, n)`` in cycle ``m + k + n``, so ``Out[m, n]`` leaves column ``n`` after cycle
  ``m + (K - 1) + n``. One tile takes ``K`` cycles to load the weights (one row per cycle) and
  ``M + K + N - 2`` cycles to stream ``M`` rows through. Tile limits ``K <= R``, ``N <= C``.
* **output stationary** (OS): PE ``(m, n)`` accumulates ``Out[m, n]``; ``A[m, k]`` moves right
  along row ``m`` and ``B[k, n]`` down column ``n``, both skewed, meeting at PE ``(m, n)`` in cycle
  ``k + m + n``: ``K + M + N - 2`` cycles, then ``M`` cycles to shift the results out. Tile
  limits ``M <= R``, ``N <= C``.
* **input stationary** (IS): PE ``(k, m)`` holds ``A[m, k]``; columns of ``B`` stream through and
  partial sums of ``Out[:, n]`` move down: weight stationary on ``Out^T = B^T A^T``. Tile
  limits ``K <= R``, ``M <= C``; ``K`` cycles to load, ``N + K + M - 2`` to stream.

:func:`simulate` runs one tile register by register and returns the product, the cycle count and
which PEs did a MAC in each cycle (the chapter draws these frames). :func:`tiled` models a large
product on a fixed array: number of tiles, cycles, utilisation (useful MACs over ``R C cycles``)
and the words each buffer access moves, per dataflow::

    WS: cycles = ceil(K/R) ceil(N/C) (R + M + R + C - 2)
    OS: cycles = ceil(M/R) ceil(N/C) (K + R + C - 2 + R)
    IS: cycles = ceil(K/R) ceil(M/C) (R + N + R + C - 2)

(each tile is charged the full array's fill and drain, as hardware does when the last tile is
partial). Buffer words read and written (the operand that streams is re-read once per tile
column it meets; partial sums that do not fit in one tile go back to the buffer and return)::

    WS: A  M K ceil(N/C),  B  K N,              Out  M N (2 ceil(K/R) - 1)
    OS: A  M K ceil(N/C),  B  K N ceil(M/R),    Out  M N
    IS: A  M K,            B  K N ceil(M/C),    Out  M N (2 ceil(K/R) - 1)

That charge is the worst case. A TPU's matrix unit double-buffers its weights (the next tile's
weights load while the current tile streams) and pipelines consecutive tiles, so the fill and drain
are paid once and each tile costs the longer of its stream and the next load
(:func:`tiled_overlapped`; Jouppi et al., ISCA 2017, section 2, the weight FIFO)::

    WS overlapped: cycles = R + ceil(K/R) ceil(N/C) max(M, R) + R + C - 2
                   utilisation -> min(1, M / R) for many tiles of M rows

With the weights hidden, what limits a small batch on a real TPU is the memory roofline: the
weights must still come from HBM, and a layer is compute-bound only above the ridge point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pint

from . import hardware
from .datafile import read_toml
from .units import Q_, require_count

__all__ = ["DATAFLOWS", "Simulation", "simulate", "TiledCost", "tiled", "tiled_overlapped", "buffer_words",
           "tile_cycles",
           "EYERISS_RELATIVE_ENERGY", "relative_energy_per_mac", "MXU_FILE", "MXUDataError", "MXULayout",
           "mxu_layout", "implied_clock", "accumulator_bytes"]

DATAFLOWS = ("weight", "output", "input")


def _dataflow(value: object) -> str:
    if value not in DATAFLOWS:
        raise ValueError(f"dataflow must be one of {DATAFLOWS} (weight, output or input stationary), got {value!r}")
    return str(value)


def _dim(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class Simulation:
    """One tile run cycle by cycle.

    ``out`` is ``A @ B``; ``cycles`` counts compute cycles (from the first operand entering the
    array to the last result leaving it; loading the stationary operand is ``load_cycles``
    more, and for output stationary ``drain_cycles`` shift the results out); ``active[t]`` is a
    boolean ``(R, C)`` map of the PEs that did a useful MAC in cycle ``t``; ``macs`` counts them.
    ``hops`` counts operand and partial-sum moves from one PE to its neighbour, ``edge_reads``
    the words read from the buffers at the array's edge and ``edge_writes`` those written back.
    """

    dataflow: str
    out: np.ndarray
    cycles: int
    load_cycles: int
    drain_cycles: int
    active: np.ndarray  # (cycles, R, C) bool
    macs: int
    hops: int
    edge_reads: int
    edge_writes: int

    @property
    def utilisation(self) -> float:
        """Useful MACs over ``R C`` times the compute cycles."""
        r, c = self.active.shape[1:]
        return self.macs / (r * c * self.cycles)


def _ws(a: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, int, np.ndarray, int]:
    """Weight stationary, register by register: ``a`` (M, K) streams, ``w`` (K, N) is held."""
    m_rows, k_dim = a.shape
    n_dim = w.shape[1]
    out = np.zeros((m_rows, n_dim), dtype=np.result_type(a, w, np.float64))
    a_reg = np.zeros((k_dim, n_dim), dtype=out.dtype)  # operand held in each PE after this cycle
    a_ok = np.zeros((k_dim, n_dim), dtype=bool)  # whether it is real data
    p_reg = np.zeros((k_dim, n_dim), dtype=out.dtype)  # partial sum leaving each PE downwards
    p_ok = np.zeros((k_dim, n_dim), dtype=bool)
    total = m_rows + k_dim + n_dim - 2
    frames = np.zeros((total, k_dim, n_dim), dtype=bool)
    hops = 0
    for t in range(total):
        # operands move right: column 0 takes row k of the skewed input, A[t - k, k]
        new_a = np.zeros_like(a_reg)
        new_ok = np.zeros_like(a_ok)
        new_a[:, 1:], new_ok[:, 1:] = a_reg[:, :-1], a_ok[:, :-1]
        hops += int(a_ok[:, :-1].sum())
        for k in range(k_dim):
            m = t - k
            if 0 <= m < m_rows:
                new_a[k, 0], new_ok[k, 0] = a[m, k], True
        # partial sums move down; row 0 starts from zero
        above = np.zeros_like(p_reg)
        above[1:] = p_reg[:-1]
        hops += int(p_ok[:-1].sum())
        new_p = above + np.where(new_ok, new_a * w, 0)
        a_reg, a_ok, p_reg, p_ok = new_a, new_ok, new_p, new_ok.copy()
        frames[t] = new_ok
        # the bottom row's partial sums are finished results: Out[t - (K-1) - n, n]
        for n in range(n_dim):
            m = t - (k_dim - 1) - n
            if 0 <= m < m_rows and p_ok[k_dim - 1, n]:
                out[m, n] = p_reg[k_dim - 1, n]
    return out, total, frames, hops


def _os(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int, np.ndarray, int]:
    """Output stationary: PE (m, n) accumulates; A moves right, B moves down."""
    m_dim, k_dim = a.shape
    n_dim = b.shape[1]
    acc = np.zeros((m_dim, n_dim), dtype=np.result_type(a, b, np.float64))
    a_reg = np.zeros_like(acc)
    a_ok = np.zeros(acc.shape, dtype=bool)
    b_reg = np.zeros_like(acc)
    b_ok = np.zeros(acc.shape, dtype=bool)
    total = k_dim + m_dim + n_dim - 2
    frames = np.zeros((total, m_dim, n_dim), dtype=bool)
    hops = 0
    for t in range(total):
        new_a, new_aok = np.zeros_like(a_reg), np.zeros_like(a_ok)
        new_a[:, 1:], new_aok[:, 1:] = a_reg[:, :-1], a_ok[:, :-1]
        new_b, new_bok = np.zeros_like(b_reg), np.zeros_like(b_ok)
        new_b[1:], new_bok[1:] = b_reg[:-1], b_ok[:-1]
        hops += int(a_ok[:, :-1].sum() + b_ok[:-1].sum())
        for m in range(m_dim):  # A[m, t - m] enters row m
            k = t - m
            if 0 <= k < k_dim:
                new_a[m, 0], new_aok[m, 0] = a[m, k], True
        for n in range(n_dim):  # B[t - n, n] enters column n
            k = t - n
            if 0 <= k < k_dim:
                new_b[0, n], new_bok[0, n] = b[k, n], True
        both = new_aok & new_bok
        acc += np.where(both, new_a * new_b, 0)
        a_reg, a_ok, b_reg, b_ok = new_a, new_aok, new_b, new_bok
        frames[t] = both
    return acc, total, frames, hops


def simulate(a: object, b: object, dataflow: str = "weight") -> Simulation:
    """Run ``A @ B`` on an array exactly the size of one tile (see the module docstring).

    Weight stationary uses a ``K x N`` array, output stationary ``M x N``, input stationary
    ``K x M``. Raises ``ValueError`` for anything but two 2-D arrays with matching inner sizes.
    """
    flow = _dataflow(dataflow)
    a_arr, b_arr = np.asarray(a), np.asarray(b)
    if a_arr.ndim != 2 or b_arr.ndim != 2 or a_arr.shape[1] != b_arr.shape[0] or 0 in a_arr.shape + b_arr.shape:
        raise ValueError(f"need A (M, K) and B (K, N) with matching K, got shapes {a_arr.shape} and {b_arr.shape}")
    m, k = a_arr.shape
    n = b_arr.shape[1]
    if flow == "weight":
        out, cycles, frames, hops = _ws(a_arr, b_arr)
        return Simulation(flow, out, cycles, k, 0, frames, int(frames.sum()), hops,
                          edge_reads=m * k + k * n, edge_writes=m * n)
    if flow == "input":
        out_t, cycles, frames, hops = _ws(b_arr.T, a_arr.T)
        return Simulation(flow, out_t.T, cycles, k, 0, frames, int(frames.sum()), hops,
                          edge_reads=m * k + k * n, edge_writes=m * n)
    out, cycles, frames, hops = _os(a_arr, b_arr)
    return Simulation(flow, out, cycles, 0, m, frames, int(frames.sum()), hops,
                      edge_reads=m * k + k * n, edge_writes=m * n)


def tile_cycles(dataflow: str, m: int, k: int, n: int, rows: int, cols: int) -> int:
    """Cycles of one full tile on an ``rows x cols`` array (load + stream, or compute + drain).

    WS: ``R + M + R + C - 2``; OS: ``K + R + C - 2 + R``; IS: ``R + N + R + C - 2``.
    """
    flow = _dataflow(dataflow)
    m, k, n, r, c = (_dim(v, s) for v, s in ((m, "M"), (k, "K"), (n, "N"), (rows, "rows"), (cols, "cols")))
    if flow == "weight":
        return r + m + r + c - 2
    if flow == "output":
        return k + r + c - 2 + r
    return r + n + r + c - 2


def buffer_words(dataflow: str, m: int, k: int, n: int, rows: int, cols: int) -> dict[str, int]:
    """Words read from / written to the array's buffers for ``(M, K) @ (K, N)`` (module docstring)."""
    flow = _dataflow(dataflow)
    m, k, n, r, c = (_dim(v, s) for v, s in ((m, "M"), (k, "K"), (n, "N"), (rows, "rows"), (cols, "cols")))
    kt, nt, mr, mc = math.ceil(k / r), math.ceil(n / c), math.ceil(m / r), math.ceil(m / c)
    if flow == "weight":
        return {"A": m * k * nt, "B": k * n, "Out": m * n * (2 * kt - 1)}
    if flow == "output":
        return {"A": m * k * nt, "B": k * n * mr, "Out": m * n}
    return {"A": m * k, "B": k * n * mc, "Out": m * n * (2 * kt - 1)}


@dataclass(frozen=True)
class TiledCost:
    """A large product on a fixed ``rows x cols`` array: tiles, cycles, utilisation, buffer words."""

    dataflow: str
    tiles: int
    cycles: int
    macs: int
    utilisation: float
    words: dict[str, int]

    @property
    def total_words(self) -> int:
        return sum(self.words.values())


def tiled(dataflow: str, m: int, k: int, n: int, rows: int = 128, cols: int = 128) -> TiledCost:
    """Model ``(M, K) @ (K, N)`` on an ``rows x cols`` array (default 128 x 128, a TPU MXU).

    ``tiles`` = ceil of the two stationary dimensions over the array's; ``cycles`` = tiles x
    :func:`tile_cycles`; ``utilisation`` = ``M K N / (rows cols cycles)``.
    """
    flow = _dataflow(dataflow)
    m, k, n, r, c = (_dim(v, s) for v, s in ((m, "M"), (k, "K"), (n, "N"), (rows, "rows"), (cols, "cols")))
    if flow == "weight":
        tiles = math.ceil(k / r) * math.ceil(n / c)
    elif flow == "output":
        tiles = math.ceil(m / r) * math.ceil(n / c)
    else:
        tiles = math.ceil(k / r) * math.ceil(m / c)
    cycles = tiles * tile_cycles(flow, m, k, n, r, c)
    macs = m * k * n
    return TiledCost(flow, tiles, cycles, macs, macs / (r * c * cycles), buffer_words(flow, m, k, n, r, c))


def tiled_overlapped(m: int, k: int, n: int, rows: int = 128, cols: int = 128) -> TiledCost:
    """Weight-stationary ``(M, K) @ (K, N)`` with double-buffered weights and pipelined tiles.

    ``cycles = R + tiles * max(M, R) + R + C - 2``: the first load, then each tile streams its ``M``
    rows while the next tile's ``R`` weight rows load, then one fill-and-drain. Buffer words as
    :func:`tiled`'s weight stationary.
    """
    m, k, n, r, c = (_dim(v, s) for v, s in ((m, "M"), (k, "K"), (n, "N"), (rows, "rows"), (cols, "cols")))
    tiles = math.ceil(k / r) * math.ceil(n / c)
    cycles = r + tiles * max(m, r) + r + c - 2
    macs = m * k * n
    return TiledCost("weight", tiles, cycles, macs, macs / (r * c * cycles), buffer_words("weight", m, k, n, r, c))


#: Energy of one access relative to one MAC in the ALU (Eyeriss, 65 nm): Y.-H. Chen, J. Emer, V. Sze,
#: "Eyeriss: a spatial architecture for energy-efficient dataflow for convolutional neural networks",
#: ISCA 2016, doi:10.1109/ISCA.2016.40 (its figure of normalised energy per access, 65 nm).
EYERISS_RELATIVE_ENERGY = {"ALU": 1.0, "RF": 1.0, "PE": 2.0, "buffer": 6.0, "DRAM": 200.0}


def relative_energy_per_mac(macs: int, hops: int, buffer_words: int) -> float:
    """Energy per MAC in units of one MAC, with the Eyeriss ratios::

        E / MAC = ALU + RF (the PE's own register) + PE * hops / macs + buffer * words / macs

    A design without reuse reads both operands and the partial sum from the buffer and writes
    the sum back for every MAC: ``buffer_words = 4 macs``, ``hops = 0``.
    """
    macs, hops, words = _dim(macs, "macs"), int(hops), int(buffer_words)
    if hops < 0 or words < 0:
        raise ValueError(f"hops and buffer_words are counts (>= 0), got {hops} and {words}")
    e = EYERISS_RELATIVE_ENERGY
    return e["ALU"] + e["RF"] + e["PE"] * hops / macs + e["buffer"] * words / macs


#: the data file of TPU matrix units (:func:`mxu_layout`)
MXU_FILE = Path(__file__).with_name("data") / "tpu_mxus.toml"
_MXU_KEYS = {"accelerator", "tensorcores", "mxus_per_core", "mxu_size", "title", "url", "date"}


class MXUDataError(ValueError):
    """The TPU MXU data file is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class MXULayout:
    """A TPU chip's matrix units as printed: TensorCores, MXUs per core, MXU size; and the page."""

    accelerator: str
    tensorcores: int
    mxus_per_core: int
    mxu_size: int
    url: str

    @property
    def mxus(self) -> int:
        """MXUs per chip: TensorCores x MXUs per core."""
        return self.tensorcores * self.mxus_per_core


@lru_cache(maxsize=1)
def _mxu_layouts() -> dict[str, MXULayout]:
    data = read_toml(MXU_FILE, MXUDataError, "TPU MXU data file", "")
    out = {}
    for i, raw in enumerate(data.get("chip", [])):
        where = f"{MXU_FILE.name} [[chip]] {i + 1}"
        if set(raw) != _MXU_KEYS:
            raise MXUDataError(f"{where}: expected keys {sorted(_MXU_KEYS)}, got {sorted(raw)}")
        name = hardware.get(raw["accelerator"]).name
        out[name] = MXULayout(name, *(require_count(raw[k], f"{where}.{k}")
                                      for k in ("tensorcores", "mxus_per_core", "mxu_size")), raw["url"])
    return out


def mxu_layout(name: str) -> MXULayout:
    """The printed MXU layout of a TPU generation, by any name of the accelerator ("TPU v6e")."""
    acc = hardware.get(name).name
    if acc not in _mxu_layouts():
        raise KeyError(f"no MXU layout for {acc}; known: {', '.join(_mxu_layouts())}")
    return _mxu_layouts()[acc]


def implied_clock(peak: pint.Quantity, mxus: int, size: int) -> pint.Quantity:
    """The clock a peak implies for ``mxus`` square arrays of ``size``: peak / (mxus x size^2 x 2 FLOP), in GHz.

    Each processing element does one multiply-accumulate (2 FLOP) per cycle. A printed MXU count that
    implies a clock far from its neighbours' is a figure to doubt, not a fact to build on.
    """
    mxus, size = require_count(mxus, "mxus"), require_count(size, "size")
    return (peak / Q_(2 * mxus * size * size, "FLOP")).to("GHz")


def accumulator_bytes(entries: int, width: int, bits: int = 32) -> pint.Quantity:
    """On-chip accumulator memory: ``entries`` rows of ``width`` partial sums of ``bits`` each (bytes).

    TPU v1 (Jouppi et al., 2017): 4,096 rows of 256 32-bit accumulators under its 256-wide array, 4 MiB.
    A weight-stationary array parks its partial sums there between k tiles, not in the general buffer.
    """
    entries, width, bits = (require_count(v, n) for v, n in ((entries, "entries"), (width, "width"), (bits, "bits")))
    if bits % 8:
        raise ValueError(f"bits must be a whole number of bytes (a multiple of 8), got {bits}")
    return Q_(entries * width * bits // 8, "B").to("MiB")
