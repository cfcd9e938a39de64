"""mlsys: validated constants, formulas and measurement tools for "GPUs for ML, from Python to silicon".

Submodules load on first use (``mlsys.hardware``, ``mlsys.roofline``, ...), so ``import
mlsys`` stays fast and does not import torch. Quantities come from one pint registry:
``mlsys.ureg`` and ``mlsys.Q_``.
"""

from __future__ import annotations

import importlib
from typing import Any

from .units import Q_, ureg

__version__ = "0.1.0"

_SUBMODULES = (
    # the models and data a learner uses
    "units", "numerics", "hardware", "roofline", "viz", "tiling", "fusion", "comm", "overhead",
    "occupancy", "memory_access", "energy", "costs", "transformer", "serving", "training_memory", "attention",
    # the two other rooms, and the command line
    "bench", "course", "cli",
)

__all__ = ["ureg", "Q_", "__version__", *_SUBMODULES]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module 'mlsys' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
