"""The course's protections on nbgrader's own routes: its CLI and formgrader's buttons, not only ``make grade``.

``labs/nbgrader_config.py`` loads this module, so every nbgrader process of the course gets it (the
``nbgrader`` commands a teacher types, formgrader's Autograde and Generate Feedback buttons, and the
nbgrader commands ``make grade`` runs in its scratch courses):

* :class:`ReturnableFeedback`, a preprocessor of ``GenerateFeedback``: the page returned to a learner
  is :func:`mlsys.grader.sanitize.feedback_notebook` of the autograded notebook (no hidden test source,
  no live markup, nothing produced after the tests started, hidden failures as a generic message).
  It reads the instructor notebook ``source/<lab>/<lab>.ipynb`` of the course root and refuses to
  render a page when there is none (it could not know what to hide).
* :class:`ReturnableAutograded`, a step of ``Autograde`` after the scores are saved: the teacher's
  autograded notebook is sanitised as ``make grade``'s is (formgrader renders it in the teacher's browser).
* :func:`install_restore_on_failure`: nbgrader removes a destination folder (``release/<lab>``,
  ``autograded/<student>/<lab>``, ``feedback/...``) before it converts into it (``--force``) and again
  when the conversion fails, so a refused or failed run used to lose the committed release or the
  graded notebook. Each destination that exists is copied aside first and put back, whole, when the
  run ends without it (a failure); a run that succeeds keeps its new output, whatever it left out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from nbgrader.preprocessors import NbGraderPreprocessor

from mlsys.grader import sanitize

__all__ = ["ReturnableFeedback", "ReturnableAutograded", "install_restore_on_failure", "instructor_notebook"]


def instructor_notebook(root: Path, lab: str, notebook: str) -> dict[str, Any]:
    """The instructor's ``source/<lab>/<notebook>.ipynb`` under the course ``root``; a clear error if absent."""
    path = Path(root) / "source" / lab / f"{notebook}.ipynb"
    if not path.is_file():
        raise FileNotFoundError(
            f"refusing to write feedback for {lab}/{notebook}: the instructor notebook {path} is missing, so "
            "the grader cannot tell which lines are hidden tests (run nbgrader from the course folder, labs/)")
    return json.loads(path.read_text(encoding="utf-8"))


class ReturnableFeedback(NbGraderPreprocessor):
    """``GenerateFeedback`` step: the notebook becomes what a learner may see (module doc)."""

    def preprocess(self, nb: Any, resources: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        import nbformat

        info = resources.get("nbgrader", {})
        source = instructor_notebook(Path.cwd(), str(info.get("assignment", "")), str(info.get("notebook", "")))
        clean = sanitize.feedback_notebook(json.loads(nbformat.writes(nb)), source)
        return nbformat.reads(json.dumps(clean), as_version=nbformat.NO_CONVERT), resources  # sources joined


class ReturnableAutograded(NbGraderPreprocessor):
    """``Autograde`` step after the scores are saved: the autograded notebook (the teacher's copy, which formgrader
    shows in the teacher's browser) gets :func:`mlsys.grader.sanitize.sanitize_notebook`, as ``make grade``'s does:
    no live markup a submission wrote (it would run with the teacher's formgrader session), no hidden test source."""

    def preprocess(self, nb: Any, resources: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        import nbformat

        info = resources.get("nbgrader", {})
        source = instructor_notebook(Path.cwd(), str(info.get("assignment", "")), str(info.get("notebook", "")))
        clean = sanitize.sanitize_notebook(json.loads(nbformat.writes(nb)), source)
        return nbformat.reads(json.dumps(clean), as_version=nbformat.NO_CONVERT), resources


_INSTALLED = "_mlsys_restore_on_failure"


def _destinations(conv: Any) -> list[Path]:
    """The output folders ``conv`` (an nbgrader converter) may remove, one per (assignment, student) found."""
    regexp = conv._format_source("(?P<assignment_id>.*)", "(?P<student_id>.*)", escape=True)
    out = []
    for source in getattr(conv, "assignments", {}):
        m = re.match(regexp, source)
        if m is not None:
            out.append(Path(os.path.normpath(conv._format_dest(m["assignment_id"], m["student_id"]))))
    return out


def _restore(backups: dict[Path, Path], log: Any, failed: bool) -> None:
    """Put back each destination nbgrader removed and did not write again: a folder that is gone (nbgrader's failure
    handler removes it whole), or, when the run failed, one that lost a notebook or page it had."""
    for dest, saved in backups.items():
        lost = failed and any(p.suffix in (".ipynb", ".html") and not (dest / p.relative_to(saved)).exists()
                              for p in saved.rglob("*") if p.is_file())
        if not dest.is_dir() or lost:
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(saved, dest, symlinks=True)
            log.warning("nbgrader did not finish %s: restored it as it was before this run (nothing was lost)", dest)


def install_restore_on_failure() -> None:
    """Wrap ``BaseConverter.convert_notebooks`` so that a failed run puts back what it removed (module doc)."""
    from nbgrader.converters.base import BaseConverter

    original = BaseConverter.convert_notebooks
    if getattr(original, _INSTALLED, False):
        return

    def convert_notebooks(self: Any) -> None:
        with tempfile.TemporaryDirectory(prefix="nbgrader-backup-") as tmp:
            backups: dict[Path, Path] = {}
            for i, dest in enumerate(_destinations(self)):
                if dest.is_dir():
                    backups[dest] = Path(tmp) / str(i)
                    shutil.copytree(dest, backups[dest], symlinks=True)
            failed = True
            try:
                original(self)
                failed = False
            finally:
                _restore(backups, self.log, failed)

    setattr(convert_notebooks, _INSTALLED, True)
    BaseConverter.convert_notebooks = convert_notebooks
