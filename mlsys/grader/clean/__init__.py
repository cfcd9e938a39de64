"""Clean measurement: the code of the workers no answer cell runs in.

The baseline and replay workers (:mod:`.perfworker`), the raw-bytes wire to them (:mod:`.perfwire`), a
learner's call replayed from its recorded plan (:mod:`.replay`) and the grader's own per-call kernels
(:mod:`.harnesskernels`). It imports nothing of :mod:`mlsys.grader.learnerside`.
"""

from __future__ import annotations

from ...runtime.lazy import lazy_submodules

__all__, __getattr__, __dir__ = lazy_submodules(__name__, __path__)
