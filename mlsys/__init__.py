"""mlsys: validated constants, formulas and measurement tools for "GPUs for ML, from Python to silicon".

Submodules load on first use (``mlsys.hardware``, ``mlsys.roofline``, ...), so ``import
mlsys`` stays fast and does not import torch. Quantities come from one pint registry:
``mlsys.ureg`` and ``mlsys.Q_``.
"""

from __future__ import annotations

from .runtime.lazy import lazy_submodules
from .units import Q_ as Q_  # re-exported: mlsys.Q_
from .units import ureg as ureg  # re-exported: mlsys.ureg

__version__ = "0.1.0"

# every submodule (the models, the three rooms, the command line) loads on first use
__all__, __getattr__, __dir__ = lazy_submodules(__name__, __path__, extra=("ureg", "Q_", "__version__"))
