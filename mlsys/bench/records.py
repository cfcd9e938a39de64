"""Recorded measurements: ``data/measurements/<device-slug>/roofs.json`` and ``<experiment>.json``, their schemas, and measured roofs.

``python -m mlsys measure`` (:mod:`mlsys.bench`) writes one roofs file per device, beside the
device's experiment records (``python -m mlsys.bench run NAME``). This module
defines the file's schema once, validates every file when it is loaded (and in the tests),
and turns the measured figures into quantities and :class:`~mlsys.roofline.Roof` objects, so
chapters and labs quote measured numbers the same way they quote datasheet numbers.

A file looks like this (every number carries its unit; every figure its method)::

    {"schema": "mlsys-measurements/1",
     "date": "2026-11-21T20:30:00+00:00",
     "device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "slug": "nvidia-h100-80gb-hbm3",
                "sm_count": 132, "memory": {"value": 85e9, "unit": "byte"}, ...},
     "software": {"torch": "2.11.0", "triton": "3.6.0", "cuda": "13.0", "driver": "580.x", ...},
     "figures": {"copy_bandwidth": {"value": 3.0e12, "unit": "byte/s", "method": "...",
                                    "timing": {"median": ..., "unit": "s", ...}}, ...},
     "skipped": {"h2d_pinned": "no CUDA device"},
     "roofline_check": {"dtype": "bf16", "kernels": [{"kernel": "add 2^26", ...}, ...]}}
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pint

from ..roofline import Roof
from ..units import Q_, ureg

__all__ = [
    "SCHEMA_VERSION",
    "FIGURES",
    "REQUIRED_FIGURES",
    "MATMUL_DTYPES",
    "MeasurementError",
    "Measurement",
    "ROOFS",
    "device_slug",
    "data_dir",
    "path_for",
    "available",
    "find",
    "load",
    "EXPERIMENT_SCHEMA",
    "Record",
    "validate_experiment",
    "experiment_path",
    "load_experiment",
    "validate",
]

SCHEMA_VERSION = "mlsys-measurements/1"

#: dtypes whose matmul throughput may be measured, as ``matmul_<dtype>`` figures
MATMUL_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")

#: every figure a file may hold, and the unit its value must convert to
FIGURES: dict[str, str] = {
    "copy_bandwidth": "byte/s",
    "read_bandwidth": "byte/s",
    **{f"matmul_{d}": "FLOP/s" for d in MATMUL_DTYPES},
    "launch_eager": "s",
    "launch_triton": "s",
    "launch_graph": "s",
    "kernel_latency": "s",
    "h2d_pageable": "byte/s",
    "h2d_pinned": "byte/s",
}

#: figures every file must have (they exist on any device)
REQUIRED_FIGURES = ("copy_bandwidth", "read_bandwidth", "matmul_fp32", "launch_eager")

_TIMING_KEYS = ("what", "method", "unit", "min", "median", "max", "repeats", "warmup", "flush")
_KERNEL_KEYS = ("kernel", "kind", "dtype", "flops", "bytes", "intensity", "predicted", "measured",
                "ratio", "bound", "overhead", "launch_dominated", "predicted_with_overhead",
                "ratio_with_overhead")


class MeasurementError(ValueError):
    """A measurements file does not follow the schema; the message names the field."""


def device_slug(name: str) -> str:
    """A file-name slug for a device name: lower case, runs of other characters -> ``-``.

    ``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia-h100-80gb-hbm3"``; trademark marks such as
    ``(R)`` and ``(TM)`` are dropped.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"device_slug needs a non-empty device name, got {name!r}")
    text = re.sub(r"\((r|tm)\)", " ", name.lower())
    slug = re.sub(r"[^a-z0-9]+", "-", text).strip("-")
    if not slug:
        raise ValueError(f"device name {name!r} has no letters or digits to make a slug from")
    return slug


def data_dir() -> Path:
    """Where the recorded measurements are: :func:`mlsys.datapaths.measurements_dir` (``$MLSYS_MEASUREMENTS_DIR``,
    else a checkout's ``data/measurements``, else the copy shipped in the installed package)."""
    from ..datapaths import measurements_dir

    return measurements_dir()


ROOFS = "roofs.json"


def path_for(slug: str) -> Path:
    """``data/measurements/<slug>/roofs.json``: the device's measured roofs."""
    return data_dir() / slug / ROOFS


def _is_device_file(path: Path) -> bool:
    """True for ``<slug>/roofs.json`` declaring this schema for the device ``slug``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return False
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("mlsys-measurements/"):
        return False
    device = data.get("device")
    return isinstance(device, dict) and device.get("slug") == path.parent.name


def available() -> list[str]:
    """Slugs of the devices with a roofs file (``<slug>/roofs.json`` of this schema), sorted."""
    d = data_dir()
    return sorted(p.parent.name for p in d.glob(f"*/{ROOFS}") if _is_device_file(p)) if d.is_dir() else []


def find(prefix: str) -> str | None:
    """The first available slug starting with ``prefix`` (e.g. ``"nvidia-h100"``), else None."""
    hits = [s for s in available() if s.startswith(prefix.lower())]
    return hits[0] if hits else None


# ---------------------------------------------------------------- validation


def _fail(where: str, msg: str) -> None:
    raise MeasurementError(f"{where}: {msg}")


def _need(obj: Mapping[str, Any], key: str, where: str, types: type | tuple[type, ...]) -> Any:
    if key not in obj:
        _fail(where, f"missing field {key!r}")
    value = obj[key]
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        _fail(f"{where}.{key}", f"expected {_tname(types)}, got {value!r}")
    if not isinstance(value, types):
        _fail(f"{where}.{key}", f"expected {_tname(types)}, got {type(value).__name__} {value!r}")
    return value


def _tname(types: type | tuple[type, ...]) -> str:
    ts = types if isinstance(types, tuple) else (types,)
    if set(ts) == {int, float}:
        return "a number"
    names = {"str": "a string", "dict": "an object", "list": "a list", "int": "an integer",
             "float": "a number", "bool": "true or false", "NoneType": "null"}
    return " or ".join(dict.fromkeys(names.get(t.__name__, t.__name__) for t in ts))


def _number(value: Any, where: str, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        _fail(where, f"expected a finite number, got {value!r}")
    if positive and value <= 0:
        _fail(where, f"expected a positive number, got {value!r}")
    if not positive and value < 0:
        _fail(where, f"expected a non-negative number, got {value!r}")
    return float(value)


def _quantity(obj: Any, where: str, expected: str, positive: bool = True) -> pint.Quantity:
    """Validate ``{"value": number, "unit": str}`` whose unit converts to ``expected``."""
    if not isinstance(obj, dict):
        _fail(where, f'expected {{"value": number, "unit": "{expected}"}}, got {obj!r}')
    value = _number(_need(obj, "value", where, (int, float)), f"{where}.value", positive)
    unit = _need(obj, "unit", where, str)
    try:
        u = ureg.Unit(unit)
    except Exception:
        _fail(f"{where}.unit", f"{unit!r} is not a unit known to mlsys.units")
    if u.dimensionality != ureg.Unit(expected).dimensionality:
        _fail(f"{where}.unit", f"expected a unit of {expected}, got {unit!r}")
    return Q_(value, unit)


def _timing(obj: Any, where: str) -> None:
    if not isinstance(obj, dict):
        _fail(where, f"expected a timing object with {', '.join(_TIMING_KEYS)}, got {obj!r}")
    for key in ("what", "method", "flush"):
        _need(obj, key, where, str)
    if _need(obj, "unit", where, str) != "s":
        _fail(f"{where}.unit", f"timings are stored in seconds ('s'), got {obj['unit']!r}")
    lo, med, hi = (_number(_need(obj, k, where, (int, float)), f"{where}.{k}", positive=False)
                   for k in ("min", "median", "max"))
    if not lo <= med <= hi:
        _fail(where, f"expected min <= median <= max, got {lo}, {med}, {hi}")
    if _need(obj, "repeats", where, int) < 1:
        _fail(f"{where}.repeats", f"expected at least 1 repeat, got {obj['repeats']}")
    if _need(obj, "warmup", where, int) < 0:
        _fail(f"{where}.warmup", f"expected a non-negative count, got {obj['warmup']}")


def _figure(name: str, obj: Any, where: str) -> None:
    if name not in FIGURES:
        _fail(where, f"unknown figure {name!r}; known figures: {', '.join(FIGURES)}")
    _quantity(obj, where, FIGURES[name])
    _need(obj, "method", where, str)
    _timing(_need(obj, "timing", where, dict), f"{where}.timing")
    if "datasheet" in obj:
        ds = _need(obj, "datasheet", where, dict)
        _need(ds, "accelerator", f"{where}.datasheet", str)
        spec = _quantity(ds, f"{where}.datasheet", FIGURES[name])
        frac = _number(_need(ds, "fraction", f"{where}.datasheet", (int, float)), f"{where}.datasheet.fraction")
        measured = _quantity(obj, where, FIGURES[name])
        if not math.isclose(frac, (measured / spec).to("").m, rel_tol=1e-6):
            _fail(f"{where}.datasheet.fraction", f"expected measured / datasheet = {(measured / spec).to('').m:.6g}, "
                  f"got {frac}")


def _kernel(obj: Any, where: str) -> None:
    if not isinstance(obj, dict):
        _fail(where, f"expected an object with {', '.join(_KERNEL_KEYS)}, got {obj!r}")
    for key in ("kernel", "kind", "dtype"):
        _need(obj, key, where, str)
    flops = _quantity(_need(obj, "flops", where, dict), f"{where}.flops", "FLOP", positive=False)
    nbytes = _quantity(_need(obj, "bytes", where, dict), f"{where}.bytes", "byte")
    intensity = _quantity(_need(obj, "intensity", where, dict), f"{where}.intensity", "FLOP/byte",
                          positive=False)
    if not math.isclose((flops / nbytes).to("FLOP/byte").m, intensity.to("FLOP/byte").m, rel_tol=1e-6):
        _fail(f"{where}.intensity", f"expected flops / bytes = {(flops / nbytes).to('FLOP/byte'):~P}, "
              f"got {intensity:~P}")
    for key in ("predicted", "overhead", "predicted_with_overhead"):
        _quantity(_need(obj, key, where, dict), f"{where}.{key}", "s", positive=(key != "overhead"))
    _timing(_need(obj, "measured", where, dict), f"{where}.measured")
    for key in ("ratio", "ratio_with_overhead"):
        _number(_need(obj, key, where, (int, float)), f"{where}.{key}")
    if _need(obj, "bound", where, str) not in ("memory", "compute"):
        _fail(f"{where}.bound", f"expected 'memory' or 'compute', got {obj['bound']!r}")
    _need(obj, "launch_dominated", where, bool)


def validate(data: Any, source: str = "measurements") -> dict[str, Any]:
    """Check ``data`` against the schema; return it unchanged or raise :class:`MeasurementError`.

    The error message starts with ``source`` and the dotted path of the offending field.
    """
    w = source
    if not isinstance(data, dict):
        _fail(w, f"expected a JSON object at the top level, got {type(data).__name__}")
    if _need(data, "schema", w, str) != SCHEMA_VERSION:
        _fail(f"{w}.schema", f"expected {SCHEMA_VERSION!r}, got {data['schema']!r}")
    _need(data, "date", w, str)
    dev = _need(data, "device", w, dict)
    for key in ("kind", "name", "slug"):
        _need(dev, key, f"{w}.device", str)
    if dev["kind"] not in ("cpu", "cuda"):
        _fail(f"{w}.device.kind", f"expected 'cpu' or 'cuda', got {dev['kind']!r}")
    if dev["slug"] != device_slug(dev["name"]):
        _fail(f"{w}.device.slug", f"expected {device_slug(dev['name'])!r} for {dev['name']!r}, "
              f"got {dev['slug']!r}")
    _quantity(_need(dev, "memory", f"{w}.device", dict), f"{w}.device.memory", "byte")
    if dev["kind"] == "cuda":
        _need(dev, "sm_count", f"{w}.device", int)
    sw = _need(data, "software", w, dict)
    for key in ("python", "torch"):
        _need(sw, key, f"{w}.software", str)
    if dev["kind"] == "cuda":
        _need(sw, "cuda", f"{w}.software", str)
    figs = _need(data, "figures", w, dict)
    for name in REQUIRED_FIGURES:
        if name not in figs:
            _fail(f"{w}.figures", f"missing required figure {name!r}")
    for name, fig in figs.items():
        _figure(name, fig, f"{w}.figures.{name}")
    skipped = data.get("skipped", {})
    if not isinstance(skipped, dict) or not all(isinstance(v, str) for v in skipped.values()):
        _fail(f"{w}.skipped", "expected an object mapping figure names to reasons (strings)")
    check = _need(data, "roofline_check", w, dict)
    dtype = _need(check, "dtype", f"{w}.roofline_check", str)
    if f"matmul_{dtype}" not in figs:
        _fail(f"{w}.roofline_check.dtype", f"the roofs use matmul_{dtype}, which is not among the figures")
    kernels = _need(check, "kernels", f"{w}.roofline_check", list)
    for i, k in enumerate(kernels):
        _kernel(k, f"{w}.roofline_check.kernels[{i}]")
    return data


# ---------------------------------------------------------------- loading


class Measurement:
    """One validated measurements file, with its figures as quantities."""

    def __init__(self, data: dict[str, Any], source: str = "measurements") -> None:
        self.data = validate(data, source)
        self.source = source

    @property
    def name(self) -> str:
        """The device's name as its driver reports it (e.g. ``"NVIDIA H100 80GB HBM3"``)."""
        return self.data["device"]["name"]

    @property
    def slug(self) -> str:
        return self.data["device"]["slug"]

    @property
    def kind(self) -> str:
        """``"cuda"`` or ``"cpu"``."""
        return self.data["device"]["kind"]

    @property
    def date(self) -> str:
        """ISO 8601 date and time (UTC) of the measurement."""
        return self.data["date"]

    @property
    def day(self) -> str:
        """The date alone, ``YYYY-MM-DD``."""
        return self.date[:10]

    def has(self, figure: str) -> bool:
        return figure in self.data["figures"]

    def figure(self, name: str) -> pint.Quantity:
        """A measured figure as a quantity (median of its repeats), e.g. ``figure("copy_bandwidth")``."""
        if name not in FIGURES:
            raise KeyError(f"unknown figure {name!r}; known figures: {', '.join(FIGURES)}")
        figs = self.data["figures"]
        if name not in figs:
            why = self.data.get("skipped", {}).get(name, "not in the file")
            raise KeyError(f"{self.slug} has no figure {name!r} ({why}); it has: {', '.join(figs)}")
        return Q_(figs[name]["value"], figs[name]["unit"])

    def method(self, name: str) -> str:
        """How a figure was measured."""
        self.figure(name)
        return self.data["figures"][name]["method"]

    def matmul_dtypes(self) -> list[str]:
        """dtypes with a measured matmul throughput, in :data:`MATMUL_DTYPES` order."""
        return [d for d in MATMUL_DTYPES if self.has(f"matmul_{d}")]

    def roof(self, dtype: str = "bf16", bandwidth: str = "copy_bandwidth") -> Roof:
        """The measured roof: measured matmul throughput of ``dtype`` and measured ``bandwidth``."""
        if FIGURES.get(bandwidth) != "byte/s" or bandwidth.startswith("h2d"):
            raise ValueError(f"bandwidth must be 'copy_bandwidth' or 'read_bandwidth', got {bandwidth!r}")
        return Roof(self.figure(f"matmul_{dtype}"), self.figure(bandwidth),
                    f"{self.name}, measured {dtype} ({self.day})")

    @property
    def check_dtype(self) -> str:
        """The dtype of the roofline check's roof."""
        return self.data["roofline_check"]["dtype"]

    def kernels(self) -> list[dict[str, Any]]:
        """The roofline check's kernels, each with flops, bytes, predicted and measured times."""
        return list(self.data["roofline_check"]["kernels"])

    def accelerator(self) -> Any:
        """The datasheet entry (:class:`mlsys.hardware.Accelerator`) for this device, or None."""
        from .. import hardware

        name = self.name.removeprefix("NVIDIA ").strip()
        for candidate in (name, name.replace(" ", "-")):
            try:
                return hardware.get(candidate)
            except KeyError:
                continue
        return None

    def datasheet_figure(self, name: str) -> pint.Quantity | None:
        """The datasheet figure a measured figure compares with (bandwidth or dense peak), or None."""
        acc = self.accelerator()
        if acc is None:
            return None
        if name in ("copy_bandwidth", "read_bandwidth"):
            return acc.memory_bandwidth
        if name.startswith("matmul_"):
            try:
                return acc.peak(name.removeprefix("matmul_"))
            except ValueError:
                return None
        return None

    def with_datasheet_fractions(self) -> dict[str, Any]:
        """The data with each comparable figure annotated: ``datasheet = {accelerator, value, unit,
        fraction}``, where ``fraction = measured / datasheet`` (e.g. copy bandwidth / HBM bandwidth)."""
        data = dict(self.data)
        figures = {}
        for name, fig in data["figures"].items():
            fig = dict(fig)
            spec = self.datasheet_figure(name)
            if spec is not None:
                unit = FIGURES[name]
                fig["datasheet"] = {"accelerator": self.accelerator().name, "value": spec.to(unit).m, "unit": unit,
                                    "fraction": (self.figure(name) / spec).to("").m}
            figures[name] = fig
        data["figures"] = figures
        return validate(data, "annotated measurements")

    def __repr__(self) -> str:
        return f"Measurement({self.slug!r}, {self.date!r})"


def load(what: str | Path) -> Measurement:
    """Load and validate a device's roofs: a slug (``"nvidia-h100-80gb-hbm3"``) or a ``.json`` path."""
    p = Path(what)
    if p.suffix != ".json":
        p = path_for(str(what))
        if not p.exists():
            raise FileNotFoundError(f"no measurements for {what!r} at {p}; available: {available()}")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise MeasurementError(f"{p}: not valid JSON ({exc})") from exc
    return Measurement(data, str(p))


# ---------------------------------------------------------------- experiment records

EXPERIMENT_SCHEMA = "mlsys-experiment/1"
# A key that carries its unit in its name ("bw_GBps", "time_us") hides the unit from the validator.
_UNIT_SUFFIX = re.compile(r"_(ns|us|ms|s|GBps|GB|MB|KB|GiB|MiB|KiB|TFLOPs|TFLOPS|GFLOPs|MHz|W|bytes|B)$")


def _tree(obj: Any, where: str) -> None:
    """Every ``{"value", "unit"}`` leaf a finite number with a known unit; no unit-suffixed keys."""
    if isinstance(obj, dict):
        if "value" in obj and "unit" in obj:
            value, unit = obj["value"], obj["unit"]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                _fail(f"{where}.value", f"expected a finite number, got {value!r}")
            if not isinstance(unit, str):
                _fail(f"{where}.unit", f"expected a unit string, got {unit!r}")
            try:
                ureg.Unit(unit)
            except Exception:
                _fail(f"{where}.unit", f"{unit!r} is not a unit known to mlsys.units")
        for key, value in obj.items():
            if not isinstance(key, str):
                _fail(where, f"keys must be strings, got {key!r}")
            if _UNIT_SUFFIX.search(key):
                _fail(f"{where}.{key}", 'write quantities as {"value": x, "unit": "..."}, not with a unit in the key')
            _tree(value, f"{where}.{key}")
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            _tree(value, f"{where}[{i}]")
    elif isinstance(obj, float) and not math.isfinite(obj):
        _fail(where, f"expected a finite number, got {obj!r}")


def validate_experiment(data: Any, source: str = "experiment") -> dict[str, Any]:
    """Check an experiment record (see :mod:`mlsys.bench.experiment`); return it or raise
    :class:`MeasurementError` naming ``source`` and the dotted path of the offending field."""
    w = source
    if not isinstance(data, dict):
        _fail(w, f"expected a JSON object at the top level, got {type(data).__name__}")
    if _need(data, "schema", w, str) != EXPERIMENT_SCHEMA:
        _fail(f"{w}.schema", f"expected {EXPERIMENT_SCHEMA!r}, got {data['schema']!r}")
    _need(data, "experiment", w, str)
    _need(data, "date", w, str)
    dev = _need(data, "device", w, dict)
    for key in ("kind", "name", "slug"):
        _need(dev, key, f"{w}.device", str)
    if dev["slug"] != device_slug(dev["name"]):
        _fail(f"{w}.device.slug", f"expected {device_slug(dev['name'])!r} for {dev['name']!r}, got {dev['slug']!r}")
    if "host" in dev or "hostname" in dev:
        _fail(f"{w}.device", "a record never names the host")
    sw = _need(data, "software", w, dict)
    for key in ("python", "torch"):
        _need(sw, key, f"{w}.software", str)
    _need(data, "quick", w, bool)
    shown = _need(data, "shown_in", w, list)
    if not shown or not all(isinstance(s, str) for s in shown):
        _fail(f"{w}.shown_in", "expected a non-empty list of page names")
    _need(data, "results", w, dict)
    _tree(data["results"], f"{w}.results")
    _tree(dev, f"{w}.device")
    return data


class Record:
    """One validated experiment record: ``results`` as stored, quantities on request."""

    def __init__(self, data: dict[str, Any], source: str = "experiment") -> None:
        self.data = validate_experiment(data, source)
        self.source = source

    @property
    def experiment(self) -> str:
        return self.data["experiment"]

    @property
    def results(self) -> dict[str, Any]:
        return self.data["results"]

    @property
    def device(self) -> str:
        """The device's name as its driver reports it (e.g. ``"NVIDIA H100 80GB HBM3"``)."""
        return self.data["device"]["name"]

    @property
    def day(self) -> str:
        """The date of the run, ``YYYY-MM-DD``."""
        return self.data["date"][:10]

    @property
    def reproduce(self) -> str:
        """The one line that re-measures this record on a machine with the device it needs."""
        return f'mlsys.bench.run("{self.experiment}")'

    def q(self, *path: str | int) -> pint.Quantity:
        """The quantity at ``results[path[0]][path[1]]...`` (a ``{"value", "unit"}`` leaf)."""
        node: Any = self.results
        for step in path:
            node = node[step]
        if not (isinstance(node, dict) and "value" in node and "unit" in node):
            raise MeasurementError(f"{self.source}: results{list(path)} is not a quantity")
        return Q_(node["value"], node["unit"])

    def __getitem__(self, key: str) -> Any:
        return self.results[key]

    def __repr__(self) -> str:
        return f"Record({self.experiment!r}, {self.device!r}, {self.day!r})"


def experiment_path(experiment: str, device: str) -> Path:
    """``data/measurements/<device-slug>/<experiment>.json`` (``device`` is a name or a slug)."""
    return data_dir() / device_slug(device) / f"{experiment}.json"


def load_experiment(experiment: str, device: str = "nvidia-h100-80gb-hbm3") -> Record:
    """The recorded run of ``experiment`` on ``device`` (a slug or the driver's name), validated.

    A missing record raises ``FileNotFoundError`` naming the devices it was recorded on and the
    command that records it; a record from a ``--quick`` run is refused, so a smoke test can never
    stand in for a measurement on a page.
    """
    path = experiment_path(experiment, device)
    if not path.is_file():
        have = sorted(p.parent.name for p in data_dir().glob(f"*/{experiment}.json"))
        raise FileNotFoundError(
            f"no record of experiment {experiment!r} on {device!r} (recorded on: {', '.join(have) or 'none'}); "
            f"record it with `python -m mlsys.bench run {experiment}` on that device")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise MeasurementError(f"{path}: not valid JSON ({exc})") from exc
    record = Record(data, str(path))
    if record.data["quick"]:
        raise MeasurementError(f"{path} comes from a --quick run, not a measurement to quote")
    if record.experiment != experiment:
        raise MeasurementError(f"{path} records experiment {record.experiment!r}, not {experiment!r}")
    return record
