"""The learner's side of grading: code that runs in the learner's sandbox, next to learner code.

The kernel-side worker (:mod:`.worker`), the grader process inside the sandbox that drives the kernel
(:mod:`.cellrunner`), the test cells it runs (:mod:`.testcells`), its census of the sandbox's processes
(:mod:`.census`) and, on a CPU grader, the template its kernels are forked from (:mod:`.kernelfork`). Nothing here is trusted by what decides; it imports nothing of :mod:`mlsys.grader.decide`.
"""

from __future__ import annotations

from ...runtime.lazy import lazy_submodules

__all__, __getattr__, __dir__ = lazy_submodules(__name__, __path__)
