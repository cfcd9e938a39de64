"""The SM clock read by the GPU itself, at millisecond resolution, instead of from NVML.

NVML's clock reading changes only every ~100 ms and its power reading is an average over about one
second (NVML API reference, ``nvmlDeviceGetPowerUsage``: "On Ampere (except GA100) or newer GPUs, the
API returns power averaged over 1 sec interval"). A burst of ten 1.4 ms matmuls fits in one reading, so
NVML cannot say what clock the burst ran at. A probe can: ``torch.cuda._sleep(cycles)`` launches a
kernel that spins until the SM's ``clock64`` counter has advanced ``cycles`` ticks, and CUDA events
around it give the wall time, so

    sm_clock = cycles / elapsed          (Hz; cycles at the SM clock, elapsed in s)

measured where the probe ran, between two kernels of the workload. Event resolution is about 0.5 us,
so a probe of 100,000 cycles (about 50 us at 2 GHz) reads the clock to about 1 %.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ClockProbe", "clock_from_spin"]


def clock_from_spin(cycles: int, elapsed_ms: float) -> float:
    """The SM clock in MHz from a spin of ``cycles`` clock ticks that took ``elapsed_ms`` ms:
    ``cycles / (elapsed_ms * 1e-3) / 1e6``."""
    if not isinstance(cycles, int) or cycles <= 0:
        raise ValueError(f"cycles must be a positive integer count of clock ticks, got {cycles!r}")
    if not elapsed_ms > 0:
        raise ValueError(f"elapsed_ms must be a positive time in ms, got {elapsed_ms!r}")
    return cycles / (elapsed_ms * 1e-3) / 1e6


@dataclass
class ClockProbe:
    """Queue clock probes on the current CUDA stream between kernels; read them after a synchronize.

    ``probe(tag)`` enqueues ``start event, spin of cycles ticks, end event``; :meth:`read` returns one
    ``{"tag", "t_ms", "mhz"}`` per probe, ``t_ms`` measured from the first probe's start event.
    """

    cycles: int = 100_000
    _events: list[tuple[Any, Any, Any]] = field(default_factory=list)

    def probe(self, tag: Any = None) -> None:
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(self.cycles)
        end.record()
        self._events.append((tag, start, end))

    def read(self) -> list[dict[str, Any]]:
        import torch

        torch.cuda.synchronize()
        if not self._events:
            return []
        origin = self._events[0][1]
        return [{"tag": tag, "t_ms": origin.elapsed_time(start),
                 "mhz": clock_from_spin(self.cycles, start.elapsed_time(end))}
                for tag, start, end in self._events]
