"""What decides: the verdict process and everything it judges with.

The verdict process (:mod:`.trusted`), its state and rounds (:mod:`.perfrounds`), its workers' handles
(:mod:`.perfboxes`), the rules and the spec (:mod:`.perfrules`, :mod:`.perfspec`), the one verdict type
(:mod:`.verdict`) and the static audit of answer cells (:mod:`.audit`, :mod:`.auditor`, :mod:`.auditrules`).
It imports nothing of :mod:`mlsys.grader.learnerside`.
"""

from __future__ import annotations

from ...runtime.lazy import lazy_submodules

__all__, __getattr__, __dir__ = lazy_submodules(__name__, __path__)
