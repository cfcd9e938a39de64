"""mlsys: validated constants, formulas and measurement tools for "GPUs for ML, from Python to silicon".

Submodules load on first use (``mlsys.hardware``, ``mlsys.roofline``, ...), so ``import
mlsys`` stays fast and does not import torch, nor pint (a fifth of a second in every grader process that
never touches a quantity). Quantities come from one pint registry: ``mlsys.ureg`` and ``mlsys.Q_``, which
load :mod:`mlsys.units` when first named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .runtime.lazy import lazy_submodules

if TYPE_CHECKING:
    from .units import Q_ as Q_  # re-exported: mlsys.Q_
    from .units import ureg as ureg  # re-exported: mlsys.ureg

__version__ = "0.1.0"

# every submodule (the models, the three rooms, the command line) loads on first use
__all__, _submodule, __dir__ = lazy_submodules(__name__, __path__, extra=("ureg", "Q_", "__version__"))


def __getattr__(name: str) -> Any:
    """``mlsys.ureg`` and ``mlsys.Q_`` from :mod:`mlsys.units`; a submodule by its name."""
    if name in ("ureg", "Q_"):
        from . import units

        return getattr(units, name)
    return _submodule(name)
