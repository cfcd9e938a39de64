"""Where a measurement was taken: device, clocks and library versions (never the host name)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shutil
import subprocess
from typing import Any

from .records import device_slug

__all__ = ["cpu_name", "nvidia_smi", "provenance"]

_SMI_FIELDS = {
    "driver_version": ("driver", None),
    "clocks.sm": ("sm_clock", "MHz"),
    "clocks.mem": ("memory_clock", "MHz"),
    "clocks.max.sm": ("max_sm_clock", "MHz"),
    "clocks.max.mem": ("max_memory_clock", "MHz"),
    "power.limit": ("power_limit", "W"),
    "temperature.gpu": ("temperature", "kelvin"),  # nvidia-smi reports degC; offset units do not divide
    "pstate": ("pstate", None),
}


def cpu_name() -> str:
    """The CPU model from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def nvidia_smi(index: int = 0) -> dict[str, Any]:
    """Driver version, clocks, power limit and temperature read with ``nvidia-smi --query-gpu``.

    Read-only: nothing about the card is changed. Returns ``{}`` when nvidia-smi is absent.
    """
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}
    fields = list(_SMI_FIELDS)
    try:
        out = subprocess.run(
            [exe, f"--id={index}", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out.splitlines()[0].split(",")] if out else []
    result: dict[str, Any] = {}
    for name, raw in zip(fields, values, strict=False):
        key, unit = _SMI_FIELDS[name]
        if unit is None:
            result[key] = raw
            continue
        try:
            value = float(raw) + (273.15 if unit == "kelvin" else 0.0)
            result[key] = {"value": round(value, 2), "unit": unit}
        except ValueError:
            continue  # "[N/A]" and the like
    return result


def _versions() -> dict[str, str | None]:
    import numpy
    import torch

    try:
        import triton

        triton_version: str | None = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "numpy": numpy.__version__,
        "cuda": torch.version.cuda,
        "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
    }


def provenance(device: str) -> dict[str, Any]:
    """The ``device``, ``software`` and ``date`` blocks of a measurements file (other scripts reuse them).

    ``device`` is ``"cuda"`` or ``"cpu"``. Memory and cache sizes are in bytes; clocks in
    MHz as nvidia-smi reports them at the moment of reading.
    """
    import torch

    software = _versions()
    date = _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        smi = nvidia_smi(0)
        software["driver"] = smi.pop("driver", None)
        name = props.name
        dev: dict[str, Any] = {
            "kind": "cuda",
            "name": name,
            "slug": device_slug(name),
            "compute_capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "memory": {"value": int(props.total_memory), "unit": "byte"},
            "l2_cache": {"value": int(getattr(props, "L2_cache_size", 0) or 0), "unit": "byte"},
            "clocks": smi or None,
        }
    elif device == "cpu":
        name = cpu_name()
        software["driver"] = None
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
        dev = {
            "kind": "cpu",
            "name": name,
            "slug": device_slug(name),
            "compute_capability": None,
            "sm_count": None,
            "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            # other processes compete for a CPU's cores: the 1-minute load average says how much
            "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "memory": {"value": int(mem), "unit": "byte"},
            "l2_cache": None,
            "clocks": None,
        }
    else:
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    return {"device": dev, "software": software, "date": date}
