"""Helpers shared by the Part II experiments (not an experiment: the runner skips ``_`` modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..profile import kernel_profile, short_kernel_name  # noqa: F401 - the experiments' profile
from ..timing import Timing, time_fn


def figure(value: float, unit: str, method: str, timing: Timing | None = None, **extra: Any) -> dict[str, Any]:
    """A recorded quantity ``{"value", "unit", "method"}`` with its timing record when there is one."""
    out: dict[str, Any] = {"value": float(value), "unit": unit, "method": method, **extra}
    if timing is not None:
        out["timing"] = timing.to_json()
    return out


def timed(fn: Callable[[], Any], device: str, what: str, quick: bool, **kw: Any) -> Timing:
    """:func:`mlsys.bench.timing.time_fn` with the Part II defaults: 3 warm-up calls and 15 repeats
    (5 when ``quick``), L2 (or CPU caches) flushed before each timed call unless told otherwise."""
    kw.setdefault("repeats", 5 if quick else 15)
    kw.setdefault("warmup", 1 if quick else 3)
    return time_fn(fn, device, what=what, **kw)


def rel_error(out: Any, ref: Any) -> float:
    """``||out - ref|| / ||ref||`` computed in float64."""
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / ref.norm())


def torch_dtype(device: str) -> tuple[Any, str]:
    """bf16 on a GPU (tensor cores), fp32 on a CPU (where bf16 matmuls are slow emulations)."""
    import torch

    return (torch.bfloat16, "bf16") if device == "cuda" else (torch.float32, "fp32")

