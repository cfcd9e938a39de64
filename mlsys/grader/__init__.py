"""The teacher's grader: releasing labs, grading submissions and classes, in three trust zones.

Top level: the teacher's commands and the class's orchestration (:mod:`mlsys.grader.teach`, release,
submission, class plan/run/grading, slots, row store, Slurm, gradebook, nbgrader's routes), the sandbox
(:mod:`mlsys.grader.sandbox`, :mod:`mlsys.grader.learnerbox`, :mod:`mlsys.grader.sandboxrun`) and what
leaves the grader (sanitize, feedback marks). The trust zones are folders, by the process that runs them:

* :mod:`mlsys.grader.learnerside`: runs in the learner's sandbox next to learner code (the kernel-side
  worker, the in-sandbox cell runner, its test cells and census);
* :mod:`mlsys.grader.clean`: the clean workers' code (baseline and replay workers, the wire, the grader's
  own kernels), which no answer cell touches;
* :mod:`mlsys.grader.decide`: what decides (the verdict process, its rules, spec and rounds, the verdict
  type, the static audit).

What decides and what measures clean never import the learner's side; the learner's side never imports
what decides (``tests/test_architecture.py``). The grader may import :mod:`mlsys.labkit`, never
:mod:`mlsys.book`.
"""

from __future__ import annotations

from ..runtime.lazy import lazy_submodules

__all__, __getattr__, __dir__ = lazy_submodules(__name__, __path__)
