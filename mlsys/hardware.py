"""Accelerator specifications, loaded from ``mlsys/data/accelerators.toml`` and validated.

Every figure carries its source. Peaks are dense; structured-sparsity figures are kept only
in ``sparse_peak_flops``. Memory and cache sizes are binary (GiB, MiB, KiB) with the vendor's
"80 GB" wording kept in the figure's note; a decimal unit there is refused when loading.
The data file gives interconnect figures as printed, with a ``direction`` field
(``"per_direction"`` or ``"bidirectional"``); ``Accelerator.interconnect_bandwidth`` is always
per GPU and per direction (half a bidirectional figure). Non-finite values, duplicate names
and unknown fields are refused with :class:`SpecError`.

>>> from mlsys import hardware
>>> hardware.get("H100").ridge_point("bf16")        # doctest: +SKIP
<Quantity(295.37, 'FLOP / byte')>
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pint

from .datafile import NamedTable, read_named
from .numerics import canonical_dtype
from .units import Q_

__all__ = ["Accelerator", "Interconnect", "Source", "SpecError", "MISSING", "BINARY_FIGURES", "DIRECTIONS", "get", "all_accelerators", "names", "load", "data_file", "DATA_FILE"]

DATA_FILE = Path(str(resources.files("mlsys") / "data" / "accelerators.toml"))

#: scalar figures: field name -> the unit its value must be convertible to
_SCALARS: dict[str, str] = {
    "memory_bandwidth": "byte/s",
    "memory_capacity": "byte",
    "l2_cache": "byte",
    "shared_memory_per_sm": "byte",
    "register_file_per_sm": "byte",
    "tdp": "W",
    "interconnect_bandwidth": "byte/s",
}
#: figures whose unit must be binary (the hardware's): byte, KiB, MiB, GiB or TiB
BINARY_FIGURES = ("memory_capacity", "l2_cache", "shared_memory_per_sm", "register_file_per_sm")
_BINARY_UNITS = ("B", "byte", "KiB", "MiB", "GiB", "TiB")
#: how a figure the data file does not hold is shown: a gap in the course's data, never a property of the chip
MISSING = "not in the course's data"
#: allowed values of an interconnect figure's ``direction`` field
DIRECTIONS = ("per_direction", "bidirectional")
_REQUIRED = ("name", "vendor", "architecture", "year", "memory_bandwidth", "memory_capacity", "peak_flops")
#: dtypes a peak may be given for (keys of peak_flops / sparse_peak_flops)
PEAK_DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")


@dataclass(frozen=True)
class Source:
    """Where a figure comes from: a document title, its URL and its date (YYYY-MM)."""

    title: str
    url: str
    date: str

    def __str__(self) -> str:
        return f"{self.title} ({self.date}), {self.url}"


@dataclass(frozen=True)
class Interconnect:
    """A chip's scale-up link to other chips, as its source describes it.

    ``kind`` names the link ("NVLink 4", "ICI", "NeuronLink-v3", "PCIe Gen4 x16"); ``links`` is the
    number of ports per chip and ``topology`` how chips are joined ("NVSwitch", "3D torus"), each
    ``None`` where the source does not print it. The bandwidth is :attr:`Accelerator.interconnect_bandwidth`,
    which may be absent even where the link is known (then it is :data:`MISSING`, not zero).
    """

    kind: str
    links: int | None = None
    topology: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class Accelerator:
    """One accelerator's specification. All figures are pint quantities; peaks are dense.

    ``peak_flops`` maps a dtype ("bf16", "fp8", ...) to dense FLOP/s (OP/s for int8).
    ``sources`` maps each figure's name (``"memory_bandwidth"``, ``"peak_flops.bf16"``, ...)
    to its :class:`Source`; ``notes`` holds any remark attached to a figure.
    """

    name: str
    vendor: str
    architecture: str
    year: int
    peak_flops: Mapping[str, pint.Quantity]
    memory_bandwidth: pint.Quantity
    memory_capacity: pint.Quantity
    memory_type: str | None = None
    sm_count: int | None = None
    l2_cache: pint.Quantity | None = None
    shared_memory_per_sm: pint.Quantity | None = None
    register_file_per_sm: pint.Quantity | None = None
    tdp: pint.Quantity | None = None
    interconnect_bandwidth: pint.Quantity | None = None
    interconnect: Interconnect | None = None
    sparse_peak_flops: Mapping[str, pint.Quantity] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    sources: Mapping[str, Source] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes with a dense peak in the data file, in the order of PEAK_DTYPES."""
        return tuple(d for d in PEAK_DTYPES if d in self.peak_flops)

    def _peak_key(self, dtype: object) -> str:
        key = canonical_dtype(dtype)
        if key in ("fp8_e4m3", "fp8_e5m2"):
            key = "fp8"
        if key in ("fp4_e2m1", "nvfp4", "mxfp4"):  # block-scaled formats run at the fp4 rate
            key = "fp4"
        if key == "mxfp8":
            key = "fp8"
        if key not in self.peak_flops:
            raise ValueError(
                f"{self.name} has no dense {key} peak (unsupported or not in its datasheet); "
                f"supported: {', '.join(self.dtypes)}"
            )
        return key

    def peak(self, dtype: object) -> pint.Quantity:
        """Dense peak throughput for ``dtype`` in FLOP/s (never the with-sparsity figure)."""
        return self.peak_flops[self._peak_key(dtype)]

    def ridge_point(self, dtype: object) -> pint.Quantity:
        """Ridge point of the roofline: ``peak(dtype) / memory_bandwidth``, in FLOP/byte.

        Kernels with an arithmetic intensity below it are memory-bound on this chip.
        """
        return (self.peak(dtype) / self.memory_bandwidth).to("FLOP/byte")

    def source_of(self, figure: str) -> Source:
        """The source of one figure, e.g. ``"memory_bandwidth"`` or ``"peak_flops.bf16"``."""
        try:
            return self.sources[figure]
        except KeyError:
            raise KeyError(f"{self.name} has no figure {figure!r}; known: {', '.join(self.sources)}") from None

    def link_summary(self) -> str:
        """The scale-up link in words, each figure the data file lacks shown as :data:`MISSING`:
        ``"NVLink 4, 18 links, 450 GB/s per direction"``; ``"ICI, 6 links, bandwidth not in the
        course's data"``; ``"not in the course's data"`` where the file describes no link at all."""
        if self.interconnect is None:
            return MISSING
        parts = [self.interconnect.kind]
        if self.interconnect.links is not None:
            parts.append(f"{self.interconnect.links} links")
        bw = self.interconnect_bandwidth
        parts.append(f"{bw.to('GB/s').m:,.0f} GB/s per direction" if bw is not None else f"bandwidth {MISSING}")
        return ", ".join(parts)

    def __str__(self) -> str:
        return f"{self.name} ({self.vendor} {self.architecture}, {self.year})"


class SpecError(ValueError):
    """The accelerator data file is malformed; the message names the entry and field."""


def _quantity(entry: Any, where: str, unit: str, sources: Mapping[str, Source]) -> tuple[Any, str, str | None]:
    if not isinstance(entry, dict) or not {"value", "unit", "source"} <= entry.keys():
        raise SpecError(f"{where}: expected a table {{value, unit, source}}, got {entry!r}")
    extra = set(entry) - {"value", "unit", "source", "note", "direction"}
    if extra:
        raise SpecError(f"{where}: unknown keys {sorted(extra)}; a figure has value, unit, source and note")
    value = entry["value"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not value > 0:
        raise SpecError(f"{where}: value must be a finite positive number, got {value!r}")
    key = where.split(".", 1)[-1]
    if key in BINARY_FIGURES and entry["unit"] not in _BINARY_UNITS:
        raise SpecError(
            f"{where}: unit {entry['unit']!r} is decimal, but memory and cache sizes are binary in this file; "
            f"use one of {', '.join(_BINARY_UNITS)} and keep the datasheet's wording (e.g. '80 GB') in the note"
        )
    if entry["source"] not in sources:
        raise SpecError(f"{where}: source {entry['source']!r} is not among this entry's sources {sorted(sources)}")
    if unit == "":
        if entry["unit"] != "" or not isinstance(value, int):
            raise SpecError(f"{where}: expected a plain integer count with unit \"\", got {entry!r}")
        return value, entry["source"], entry.get("note")
    try:
        q = Q_(value, entry["unit"])
        q.to(unit)
    except Exception as exc:
        raise SpecError(f"{where}: unit {entry['unit']!r} does not convert to {unit}") from exc
    return q, entry["source"], entry.get("note")


def _interconnect(entry: Any, name: str, sources: Mapping[str, Source]) -> Interconnect:
    """The ``interconnect = {kind, links, topology, source, note}`` table of one entry, validated."""
    where = f"{name}.interconnect"
    if not isinstance(entry, dict) or not {"kind", "source"} <= entry.keys():
        raise SpecError(f"{where}: expected a table {{kind, source}} with optional links, topology and note, got {entry!r}")
    extra = set(entry) - {"kind", "links", "topology", "source", "note"}
    if extra:
        raise SpecError(f"{where}: unknown keys {sorted(extra)}; expected kind, links, topology, source, note")
    if entry["source"] not in sources:
        raise SpecError(f"{where}: source {entry['source']!r} is not among this entry's sources {sorted(sources)}")
    links = entry.get("links")
    if links is not None and (isinstance(links, bool) or not isinstance(links, int) or links < 1):
        raise SpecError(f"{where}: links must be a positive integer count of ports per chip, got {links!r}")
    if not isinstance(entry["kind"], str) or not entry["kind"].strip():
        raise SpecError(f"{where}: kind must name the link, e.g. \"NVLink 4\" or \"ICI\", got {entry['kind']!r}")
    return Interconnect(entry["kind"], links, entry.get("topology"), entry.get("note"))


def _build(raw: Mapping[str, Any]) -> Accelerator:
    name = raw.get("name", "<unnamed>")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise SpecError(f"accelerator {name!r}: missing {', '.join(missing)}")
    srcs_raw = raw.get("sources", {})
    if not srcs_raw:
        raise SpecError(f"accelerator {name!r}: no [accelerator.sources]")
    try:
        sources_by_id = {k: Source(v["title"], v["url"], str(v["date"])) for k, v in srcs_raw.items()}
    except (KeyError, TypeError) as exc:
        raise SpecError(f"accelerator {name!r}: each source needs title, url and date") from exc
    known = set(_SCALARS) | set(_REQUIRED) | {"aliases", "sources", "sparse_peak_flops", "memory_type", "sm_count",
                                              "interconnect"}
    unknown = set(raw) - known
    if unknown:
        raise SpecError(f"accelerator {name!r}: unknown fields {sorted(unknown)}")

    kwargs: dict[str, Any] = {}
    fig_sources: dict[str, Source] = {}
    notes: dict[str, str] = {}

    def take(key: str, entry: Any, unit: str) -> Any:
        value, src, note = _quantity(entry, f"{name}.{key}", unit, sources_by_id)
        fig_sources[key] = sources_by_id[src]
        if note:
            notes[key] = note
        return value

    for key, unit in _SCALARS.items():
        if key in raw:
            kwargs[key] = take(key, raw[key], unit)
    if "interconnect_bandwidth" in raw:
        direction = raw["interconnect_bandwidth"].get("direction")
        if direction not in DIRECTIONS:
            raise SpecError(f"{name}.interconnect_bandwidth: direction must be one of {DIRECTIONS}, got {direction!r}")
        printed = kwargs["interconnect_bandwidth"]
        if direction == "bidirectional":
            kwargs["interconnect_bandwidth"] = printed / 2
        notes["interconnect_bandwidth"] = "; ".join(
            filter(None, [f"datasheet: {printed:~P} {direction.replace('_', ' ')}", notes.get("interconnect_bandwidth")]))
    for key in _SCALARS:
        if key != "interconnect_bandwidth" and key in raw and "direction" in raw[key]:
            raise SpecError(f"{name}.{key}: only interconnect_bandwidth takes a direction field")
    if "sm_count" in raw:
        kwargs["sm_count"] = take("sm_count", raw["sm_count"], "")
    if "interconnect" in raw:
        kwargs["interconnect"] = _interconnect(raw["interconnect"], name, sources_by_id)
        fig_sources["interconnect"] = sources_by_id[raw["interconnect"]["source"]]
    for table in ("peak_flops", "sparse_peak_flops"):
        peaks = {}
        for dtype, entry in raw.get(table, {}).items():
            if dtype not in PEAK_DTYPES:
                raise SpecError(f"{name}.{table}: unknown dtype {dtype!r}; expected one of {PEAK_DTYPES}")
            peaks[dtype] = take(f"{table}.{dtype}", entry, "FLOP/s")
        kwargs[table] = MappingProxyType(peaks)
    if not kwargs["peak_flops"]:
        raise SpecError(f"accelerator {name!r}: peak_flops is empty")
    for dtype, sparse in kwargs["sparse_peak_flops"].items():
        dense = kwargs["peak_flops"].get(dtype)
        if dense is None or not sparse > dense:
            raise SpecError(f"{name}: sparse {dtype} peak {sparse} must exceed a dense peak for the same dtype")
    year = raw["year"]
    if not isinstance(year, int) or not 1990 < year < 2100:
        raise SpecError(f"{name}.year: expected a year such as 2022, got {year!r}")
    return Accelerator(
        name=name,
        vendor=raw["vendor"],
        architecture=raw["architecture"],
        year=year,
        memory_type=raw.get("memory_type"),
        aliases=tuple(raw.get("aliases", ())),
        sources=MappingProxyType(fig_sources),
        notes=MappingProxyType(notes),
        **kwargs,
    )


def data_file() -> Path:
    """The data file in use: ``$MLSYS_ACCELERATORS`` if set (to try an edit), else the packaged one."""
    return Path(os.environ.get("MLSYS_ACCELERATORS") or DATA_FILE)


def load(path: str | Path | None = None) -> dict[str, Accelerator]:
    """Load and validate a data file (default: :func:`data_file`); name -> Accelerator."""
    return _table(path).entries


def _table(path: str | Path | None = None) -> NamedTable[Accelerator]:
    return read_named(Path(path) if path is not None else data_file(), "accelerator", _build, SpecError,
                      "MLSYS_ACCELERATORS")


@lru_cache(maxsize=1)
def _registry() -> NamedTable[Accelerator]:
    return _table()


def names() -> list[str]:
    """Canonical names of all accelerators, in data-file order."""
    return list(_registry().entries)


def get(name: str) -> Accelerator:
    """Look an accelerator up by name or alias, ignoring case, spaces, '-' and '_'.

    ``get("h100")`` -> H100-SXM; ``get("A100")`` -> A100-SXM4-80GB. Unknown names raise
    ``KeyError`` listing the known ones.
    """
    if isinstance(name, Accelerator):
        return name
    return _registry().get(name)


def all_accelerators() -> list[Accelerator]:
    """Every accelerator in the data file, in data-file order."""
    return list(_registry().entries.values())
