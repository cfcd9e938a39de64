"""Course machinery: what teachers and the book's build use, never what a model needs.

* :mod:`mlsys.course.claims`: ``check`` (a claim the prose makes; a false one fails the build) and ``fmt``.
* :mod:`mlsys.course.device`: ``setup()`` (Triton's interpreter where there is no CUDA) and ``has_cuda``,
  re-exported from :mod:`mlsys.runtime.device` under the name every lab's first cell uses.
* :mod:`mlsys.course.page`: what a chapter's and a lab's cells share (the reference device's records, ``glue``,
  ``table``).
* :mod:`mlsys.course.grading`: helpers the labs' test cells call.
* :mod:`mlsys.course.checks`: guarded kernel runs (out-of-bounds feedback) and checks for silent mistakes.
* :mod:`mlsys.course.site`: the repository URL (from `_config.yml`) and what the labs generate from it.
* :mod:`mlsys.course.teach`: release and grade labs (``python -m mlsys.course.teach``).
* :mod:`mlsys.course.sandbox`: the bubblewrap sandbox each submission runs in; :mod:`mlsys.course.cellrunner`
  (inside it) and :mod:`mlsys.course.sandboxed_execute` (nbgrader's execution step, moved into it).
* :mod:`mlsys.course.trusted`: performance credit measured by trusted code (``grade_performance``, perf.toml).
* :mod:`mlsys.course.audit`: the static audit of answer cells behind the ``flags`` column.

This room may import the models (``mlsys.*``), the runtime (:mod:`mlsys.runtime`: devices, notebook cells,
process launch, paths) and measurement (``mlsys.bench``); none of them imports it.
"""

from __future__ import annotations

from ..runtime.lazy import lazy_submodules

__all__, __getattr__, __dir__ = lazy_submodules(__name__, __path__)
