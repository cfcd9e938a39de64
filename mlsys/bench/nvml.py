"""Sampling a GPU's clocks and power while a kernel runs: NVML polled from a background thread.

NVML (the NVIDIA Management Library, the library behind ``nvidia-smi``; Python binding
``pynvml`` from the ``nvidia-ml-py`` package) answers read-only queries about a GPU. A
:class:`Sampler` calls a *reader* every ``interval_s`` seconds in a daemon thread and keeps each
reading with its time (``time.perf_counter``, seconds since the sampler started), so a
benchmark can see what the SM clock and the board power did *during* the timed work rather
than before or after it. Nothing about the card is changed: no clocks, limits or modes are set.

Readings (one :class:`Sample` each): SM clock and memory clock (MHz), board power (W; NVML
reports milliwatts), GPU temperature (degrees C) and the clock-event reason bit mask (why the
clock is below its maximum: power cap, thermal slowdown, ...; 0 means none). The reader is a
plain callable returning a :class:`Sample`, so the sampler is tested on a machine without a GPU
with a fake reader.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Sample", "Sampler", "nvml_reader", "nvml_limits", "REASONS", "decode_reasons", "summarise",
           "update_interval"]

# Bits of nvmlDeviceGetCurrentClocksEventReasons (nvml.h, "ClocksEventReasons").
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


@dataclass(frozen=True)
class Sample:
    """One reading: ``t`` seconds since the sampler started; clocks in MHz, power in W, temperature in C."""

    t: float
    sm_clock: float
    memory_clock: float
    power: float
    temperature: float
    reasons: int = 0


def decode_reasons(mask: int) -> list[str]:
    """Names of the clock-event reasons set in ``mask`` (unknown bits as ``"bit0x..."``)."""
    if not isinstance(mask, int) or mask < 0:
        raise ValueError(f"a reason mask is a non-negative integer, got {mask!r}")
    names = [name for bit, name in REASONS.items() if mask & bit]
    rest = mask & ~sum(REASONS)
    if rest:
        names.append(f"bit{rest:#x}")
    return names


def update_interval(samples: list[Sample], field: str) -> float | None:
    """How often a sensor's reading actually changes: the median time (s) between successive readings
    of ``field`` ("sm_clock", "power", ...) that differ from the one before. A figure from that sensor
    says nothing about a window shorter than this. ``None`` with fewer than three changes."""
    if field not in Sample.__dataclass_fields__ or field == "t":
        raise ValueError(f"field must be one of a Sample's readings, got {field!r}")
    changes = [b.t for a, b in zip(samples, samples[1:], strict=False) if getattr(b, field) != getattr(a, field)]
    if len(changes) < 3:
        return None
    gaps = sorted(b - a for a, b in zip(changes, changes[1:], strict=False))
    mid = len(gaps) // 2
    return gaps[mid] if len(gaps) % 2 else (gaps[mid - 1] + gaps[mid]) / 2


def available() -> bool:
    """True if the ``pynvml`` module can be imported here (NVML readings are possible)."""
    import importlib.util

    return importlib.util.find_spec("pynvml") is not None


def _pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise RuntimeError("NVML sampling needs the pynvml module (pip install nvidia-ml-py)") from exc
    pynvml.nvmlInit()
    return pynvml


def nvml_reader(index: int = 0) -> Callable[[float], Sample]:
    """A reader for GPU ``index`` through NVML: ``reader(t) -> Sample``. Read-only queries only."""
    nv = _pynvml()
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if reasons_fn is None:  # older bindings
        reasons_fn = nv.nvmlDeviceGetCurrentClocksThrottleReasons

    def read(t: float) -> Sample:
        return Sample(
            t=t,
            sm_clock=float(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
            memory_clock=float(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_MEM)),
            power=nv.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            temperature=float(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)),
            reasons=int(reasons_fn(handle)),
        )

    return read


def nvml_limits(index: int = 0) -> dict[str, Any]:
    """The card's fixed limits: maximum SM and memory clocks (MHz) and enforced power limit (W)."""
    nv = _pynvml()
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    return {
        "max_sm_clock": {"value": float(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM)), "unit": "MHz"},
        "max_memory_clock": {"value": float(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_MEM)),
                             "unit": "MHz"},
        "power_limit": {"value": nv.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0, "unit": "W"},
    }


class Sampler:
    """Poll ``reader`` every ``interval_s`` seconds in a background thread, between start and stop.

    Use as a context manager::

        with Sampler(nvml_reader(), interval_s=0.02) as s:
            run_the_kernel()
        s.samples  # list of Sample, t in seconds since start

    ``mark(label)`` records the sampler's clock at an event of the caller (e.g. "matmuls start"),
    so readings can be aligned with the work. A reader that raises stops the sampler, and the
    error is raised again from :meth:`stop`.
    """

    def __init__(self, reader: Callable[[float], Sample], interval_s: float = 0.02,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if not callable(reader):
            raise TypeError(f"reader must be a callable t -> Sample, got {reader!r}")
        if not isinstance(interval_s, (int, float)) or not 0 < interval_s <= 10:
            raise ValueError(f"interval_s must be a positive number of seconds (at most 10), got {interval_s!r}")
        self.reader = reader
        self.interval_s = float(interval_s)
        self.clock = clock
        self.samples: list[Sample] = []
        self.marks: dict[str, float] = {}
        self._t0 = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def now(self) -> float:
        """Seconds since :meth:`start`."""
        return self.clock() - self._t0

    def mark(self, label: str) -> float:
        """Remember the current time under ``label`` and return it."""
        self.marks[label] = self.now()
        return self.marks[label]

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self.samples.append(self.reader(self.now()))
                self._stop.wait(self.interval_s)
        except BaseException as exc:  # noqa: BLE001 - re-raised from stop()
            self._error = exc

    def start(self) -> Sampler:
        if self._thread is not None:
            raise RuntimeError("this sampler was already started")
        self._t0 = self.clock()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        if self._thread is None:
            raise RuntimeError("stop() before start()")
        self._stop.set()
        self._thread.join()
        if self._error is not None:
            raise RuntimeError(f"the reader failed while sampling: {self._error!r}") from self._error
        return self.samples

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def summarise(samples: list[Sample], t_from: float = float("-inf"), t_to: float = float("inf")) -> dict[str, Any]:
    """Median, minimum and maximum SM clock, power and temperature of the samples with
    ``t_from <= t <= t_to``, and the union of their clock-event reasons (JSON-ready quantities;
    temperatures as plain numbers in degrees Celsius)."""
    window = [s for s in samples if t_from <= s.t <= t_to]
    if not window:
        raise ValueError(f"no samples between t={t_from} s and t={t_to} s (have {len(samples)} in all)")
    out: dict[str, Any] = {"samples": len(window)}
    stats = (("median", statistics.median), ("min", min), ("max", max))
    for key, unit in (("sm_clock", "MHz"), ("power", "W")):
        vals = [getattr(s, key) for s in window]
        out[key] = {stat: {"value": fn(vals), "unit": unit} for stat, fn in stats}
    temps = [s.temperature for s in window]
    out["temperature_celsius"] = {stat: fn(temps) for stat, fn in stats}  # no degC in mlsys.units
    mask = 0
    for s in window:
        mask |= s.reasons
    out["reasons"] = decode_reasons(mask)
    return out
