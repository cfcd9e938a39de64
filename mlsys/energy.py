"""Energy per operation and per memory access: the table from Horowitz (ISSCC 2014), 45 nm.

M. Horowitz, "Computing's energy problem (and what we can do about it)", IEEE International
Solid-State Circuits Conference (ISSCC) 2014, pp. 10-14, doi:10.1109/ISSCC.2014.6757323.
Figures are for a 45 nm process at 0.9 V; memory figures are per 64-bit access, and DRAM is
given as a range (1.3 to 2.6 nJ), stored here as its two ends. Newer processes lower every
entry, but the ratios between arithmetic and data movement are what the course uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import pint

from .units import Q_

__all__ = ["EnergyCost", "HOROWITZ_45NM", "SOURCE", "energy", "ratio"]

SOURCE = ("M. Horowitz, \"Computing's energy problem (and what we can do about it)\", ISSCC 2014, "
          "doi:10.1109/ISSCC.2014.6757323")


@dataclass(frozen=True)
class EnergyCost:
    """Energy of one operation or one access, and what it moves or computes."""

    name: str
    energy: pint.Quantity  # J
    kind: str  # "arithmetic" or "memory"
    bits: int  # operand width (arithmetic) or access width (memory)


def _e(name: str, pj: float, kind: str, bits: int) -> EnergyCost:
    return EnergyCost(name, Q_(pj, "pJ"), kind, bits)


#: Horowitz 2014, 45 nm, 0.9 V (see module docstring).
HOROWITZ_45NM: dict[str, EnergyCost] = {c.name: c for c in [
    _e("int8 add", 0.03, "arithmetic", 8),
    _e("int32 add", 0.1, "arithmetic", 32),
    _e("int8 mult", 0.2, "arithmetic", 8),
    _e("int32 mult", 3.1, "arithmetic", 32),
    _e("fp16 add", 0.4, "arithmetic", 16),
    _e("fp32 add", 0.9, "arithmetic", 32),
    _e("fp16 mult", 1.1, "arithmetic", 16),
    _e("fp32 mult", 3.7, "arithmetic", 32),
    _e("8 KB SRAM read", 10.0, "memory", 64),
    _e("32 KB SRAM read", 20.0, "memory", 64),
    _e("1 MB SRAM read", 100.0, "memory", 64),
    _e("DRAM read (low)", 1300.0, "memory", 64),
    _e("DRAM read (high)", 2600.0, "memory", 64),
]}


def energy(name: str) -> pint.Quantity:
    """Energy (J) of one entry of :data:`HOROWITZ_45NM`; unknown names raise ``KeyError``."""
    try:
        return HOROWITZ_45NM[name].energy
    except KeyError:
        raise KeyError(f"unknown operation {name!r}; known: {sorted(HOROWITZ_45NM)}") from None


def ratio(a: str, b: str) -> float:
    """How many times more energy ``a`` costs than ``b``: ``energy(a) / energy(b)``."""
    return float((energy(a) / energy(b)).to("").m)
