"""One gradebook for the course: ``make grade``'s results in nbgrader's ``labs/gradebook.db``, and back.

``make grade`` grades each submission in a scratch course with a gradebook of its own; then
:func:`record` writes the result into the course's gradebook (``<root>/gradebook.db``), through
nbgrader's own ``Gradebook`` API and its ``SaveAutoGrades`` step, exactly as ``nbgrader autograde``
would: the student, the submission, and one autograded score per grade cell. So formgrader (where
a teacher grades the written answers) lists every submission with its autograded scores and the
manual-grading queue, without running any student's code a second time.

:func:`cell_scores` reads the gradebook back: the scores a teacher entered (a written answer's
manual score, or an override of an autograded cell) go into the next ``grades.csv``, so the CSV
and ``nbgrader export`` give the same total for every submission. A score's value follows nbgrader:
``manual_score`` where a teacher gave one, else ``auto_score``.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

__all__ = ["db_url", "CellScore", "record", "cell_scores", "has_assignment", "alembic_on_path", "schema_head",
           "schema_head_in_process"]


def db_url(root: Path) -> str:
    """The course gradebook of the course folder ``root`` (nbgrader's default name, ``gradebook.db``)."""
    return f"sqlite:///{Path(root).resolve() / 'gradebook.db'}"


def alembic_on_path() -> None:
    """nbgrader creates a gradebook by running its environment's ``alembic`` script: put that on PATH (where
    :func:`schema_head_in_process` could not take its place)."""
    schema_head_in_process()
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])


@functools.cache
def schema_head() -> str:
    """The newest revision of nbgrader's gradebook schema, read from nbgrader's own migration scripts in this process.

    nbgrader stamps every new gradebook with it, and asks for it by starting ``alembic heads`` in a new process
    (about 1.6 CPU-seconds, for every gradebook a grading run, a release or a test creates): the same scripts read
    here take 0.1 CPU-s."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader import dbutil

    config = Config()
    config.set_main_option("script_location", dbutil.ALEMBIC_DIR)
    head = ScriptDirectory.from_config(config).get_current_head()
    if not head:
        raise RuntimeError(f"nbgrader's migration scripts in {dbutil.ALEMBIC_DIR} name no head revision")
    return head


def schema_head_in_process() -> None:
    """Let nbgrader's ``Gradebook`` take :func:`schema_head` instead of starting ``alembic heads`` (kept where
    the scripts cannot be read here: then nbgrader's own way runs)."""
    import nbgrader.api

    if getattr(nbgrader.api.get_alembic_version, "__wrapped__", None) is not None:
        return
    original = nbgrader.api.get_alembic_version

    @functools.wraps(original)
    def head() -> str:
        try:
            return schema_head()
        except Exception:  # noqa: BLE001 -- nbgrader's own subprocess gives the answer or its error
            return original()

    nbgrader.api.get_alembic_version = head


@dataclass(frozen=True)
class CellScore:
    """One grade cell of one submission in the gradebook (points)."""

    grade_id: str
    auto: float | None
    manual: float | None
    max: float
    written: bool  # a written answer (a solution cell with points): graded by hand

    @property
    def score(self) -> float | None:
        return self.manual if self.manual is not None else self.auto


def has_assignment(root: Path, lab: str) -> bool:
    """Whether ``lab`` is registered in the course gradebook (``make release`` registers every lab)."""
    if not (Path(root) / "gradebook.db").is_file():
        return False
    from nbgrader.api import Gradebook, MissingEntry

    alembic_on_path()
    with Gradebook(db_url(root)) as gb:
        try:
            gb.find_assignment(lab)
        except MissingEntry:
            return False
    return True


def record(root: Path, student: str, lab: str, graded: Path) -> None:
    """Store the autograded notebook ``graded`` of (``student``, ``lab``) in the course gradebook.

    The lab must be registered (:func:`has_assignment`). Scores a teacher entered are kept: nbgrader's
    ``SaveAutoGrades`` sets each cell's ``auto_score`` only.
    """
    import nbformat
    from nbgrader.api import Gradebook
    from nbgrader.preprocessors import SaveAutoGrades

    alembic_on_path()
    url = db_url(root)
    with Gradebook(url) as gb, warnings.catch_warnings():
        # nbgrader's own autoflush notes (SAWarning) when a submission is first added; the rows are right
        warnings.simplefilter("ignore")
        gb.update_or_create_student(student)
        gb.update_or_create_submission(lab, student)
    nb = nbformat.read(str(graded), as_version=nbformat.NO_CONVERT)
    resources = {"nbgrader": {"notebook": lab, "assignment": lab, "student": student, "db_url": url}}
    SaveAutoGrades().preprocess(nb, resources)


def cell_scores(root: Path, lab: str) -> dict[str, list[CellScore]]:
    """student -> the grade cells of their ``lab`` submission in the course gradebook ({} without one)."""
    if not has_assignment(root, lab):
        return {}
    from nbgrader.api import Gradebook

    out: dict[str, list[CellScore]] = {}
    with Gradebook(db_url(root)) as gb:
        for sub in gb.find_assignment(lab).submissions:
            cells = []
            for nb in sub.notebooks:
                auto = _autograded(nb)
                for g in nb.grades:
                    cells.append(CellScore(g.name, g.auto_score, g.manual_score, float(g.max_score or 0),
                                           g.name not in auto))
            out[sub.student.id] = cells
    return out


def _autograded(nb: object) -> set[str]:
    """grade ids of the notebook's autograded cells (test cells: a grade cell that is not a solution cell)."""
    solutions = {c.name for c in nb.notebook.solution_cells}  # type: ignore[attr-defined]
    return {c.name for c in nb.notebook.grade_cells if c.name not in solutions}  # type: ignore[attr-defined]
