"""The learner's kit: what a lab notebook imports and what runs in the learner's kernel.

* :mod:`mlsys.labkit.device`: ``setup()``, the name every lab's first cell calls.
* :mod:`mlsys.labkit.grading` and :mod:`mlsys.labkit.checks` (with its parts): the checks the labs' test
  cells call, with messages a learner can act on; :mod:`mlsys.labkit.checkerror`, the one error they raise.
* :mod:`mlsys.labkit.librarycalls` and :mod:`mlsys.labkit.policy`: implement it, don't call it; one table of
  what each kind of exercise may dispatch.
* :mod:`mlsys.labkit.proxy`: the plain-data wire between a test cell and the learner's kernel.

This room imports the models, :mod:`mlsys.runtime` and :mod:`mlsys.bench` only: never :mod:`mlsys.book` or
:mod:`mlsys.grader` (``tests/test_architecture.py`` holds it). The grader may import it.
"""

from __future__ import annotations

from ..runtime.lazy import lazy_submodules

__all__, __getattr__, __dir__ = lazy_submodules(__name__, __path__)
