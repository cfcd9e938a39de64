"""The book's page helpers: what the chapters' cells and the site's build use.

* :mod:`mlsys.book.claims`: ``check`` (a claim the prose makes; a false one fails the build) and ``fmt``.
* :mod:`mlsys.book.page`: what a chapter's and a lab's cells share (the reference device's records, ``glue``,
  ``table``).
* :mod:`mlsys.book.site` and :mod:`mlsys.book.notebooks`: the repository URL and what the labs and the
  chapters' notebooks generate from it; glossary, notes, readability, slides and syllabus build pages.

This room may import the models, :mod:`mlsys.runtime`, :mod:`mlsys.bench` and :mod:`mlsys.labkit`; never
:mod:`mlsys.grader` (``tests/test_architecture.py`` holds it).
"""

from __future__ import annotations

from ..runtime.lazy import lazy_submodules

__all__, __getattr__, __dir__ = lazy_submodules(__name__, __path__)
