"""A performance verdict: one type from the process that decides it to the graded notebook's cell.

The verdict process (:mod:`mlsys.grader.decide.trusted`) makes a :class:`Verdict` per ``perf_*`` cell and sends it
as :meth:`Verdict.to_dict` (JSON); the nbgrader step (:mod:`mlsys.grader.sandboxed_execute`) reads it back
with :meth:`Verdict.from_dict` and writes the cell from it: its outputs (:meth:`Verdict.outputs`, which
nbgrader scores) and its status in the cell's metadata (``metadata.mlsys.verdict``: ``status``, ``score``,
``reason``), so that what reads the graded notebook learns whether a cell was graded, refused or not graded
from a field, never by searching the output's text.

``status``: ``graded`` (a credit, no reason), ``refused`` (credit 0 with the reason), ``not_graded`` (no
credit decided here: no GPU, too few GPUs; the cell says :data:`mlsys.labkit.grading.NOT_GRADED`),
``not_measured`` (the grader could not measure it: no spec for the cell, the verdict process failed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Verdict", "STATUSES", "METADATA_KEY", "cell_status"]

STATUSES = ("graded", "refused", "not_graded", "not_measured")
METADATA_KEY = "verdict"
"""Where a graded cell's status is kept: ``cell.metadata["mlsys"]["verdict"]``."""


def cell_status(cell: Any) -> str | None:
    """The status the grader wrote into a graded ``perf_*`` cell (``metadata.mlsys.verdict.status``, one of
    :data:`STATUSES`), or None where it wrote none. What reads a graded notebook asks this field, never the
    outputs' text (which an answer could print)."""
    meta = cell.get("metadata") if hasattr(cell, "get") else None
    status = (((meta or {}).get("mlsys") or {}).get(METADATA_KEY) or {}).get("status")
    return status if status in STATUSES else None


@dataclass(frozen=True)
class Verdict:
    """One ``perf_*`` cell's verdict: ``credit`` (0-1, None where not decided here) of ``points``, the
    ``reason`` of a refusal, the ``lines`` shown to the learner, the ``evidence`` kept for the teacher."""

    grade_id: str
    points: float
    credit: float | None
    reason: str = ""
    lines: tuple[str, ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict)
    unmeasured: bool = False

    def __post_init__(self) -> None:
        if self.credit is not None and not 0.0 <= float(self.credit) <= 1.0:
            raise ValueError(f"Verdict {self.grade_id}: credit must be within [0, 1] or None, got {self.credit!r}")

    @property
    def status(self) -> str:
        if self.unmeasured:
            return "not_measured"
        if self.credit is None:
            return "not_graded"
        return "refused" if self.reason else "graded"

    @property
    def score(self) -> float | None:
        return None if self.credit is None else round(float(self.points) * float(self.credit), 4)

    def to_dict(self) -> dict[str, Any]:
        """The wire form (JSON): every field, with ``score`` and ``status``."""
        return {"grade_id": self.grade_id, "points": self.points, "credit": self.credit, "reason": self.reason,
                "lines": list(self.lines), "score": self.score, "evidence": self.evidence, "status": self.status}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        """A verdict read back from :meth:`to_dict`'s form; a malformed one is a clear error."""
        if not isinstance(d, dict) or not isinstance(d.get("grade_id"), str):
            raise ValueError(f"expected a verdict with a grade_id, got {str(d)[:200]}")
        credit = d.get("credit")
        if credit is not None and not isinstance(credit, (int, float)):
            raise ValueError(f"verdict {d['grade_id']}: credit must be a number or None, got {credit!r}")
        return cls(d["grade_id"], float(d.get("points") or 0), None if credit is None else float(credit),
                   str(d.get("reason") or ""), tuple(str(x) for x in d.get("lines") or ()),
                   dict(d.get("evidence") or {}), d.get("status") == "not_measured")

    @classmethod
    def not_measured(cls, grade_id: str, points: float, why: str) -> Verdict:
        return cls(grade_id, points, None, why, (), {}, True)

    def metadata(self) -> dict[str, Any]:
        """What the graded cell's metadata keeps (``metadata.mlsys.verdict``)."""
        return {"status": self.status, "score": self.score, "reason": self.reason}

    def outputs(self, cell_points: float, not_graded_text: str = "") -> list[dict[str, Any]]:
        """The cell's outputs as nbgrader scores them: the score as the cell's value, or an error with the reason
        (refused: ``PerformanceRefused``; not measured: ``PerformanceNotMeasured``), or, not graded here, the
        not-graded line and 0.0."""
        from mlsys.runtime.notebook import error_output

        text = "".join(line + "\n" for line in self.lines)
        if self.status == "not_graded":
            return [{"output_type": "stream", "name": "stdout", "text": text or not_graded_text + "\n"},
                    {"output_type": "execute_result", "execution_count": None, "metadata": {},
                     "data": {"text/plain": "0.0"}}]
        if self.status == "not_measured":
            return [error_output("PerformanceNotMeasured", self.reason)]
        if self.status == "refused":
            return ([{"output_type": "stream", "name": "stdout", "text": text}] if text else []) + [
                error_output("PerformanceRefused", self.reason)]
        score = min(cell_points, cell_points * float(self.credit or 0.0))
        return [{"output_type": "stream", "name": "stdout", "text": text or "measured by the grader\n"},
                {"output_type": "execute_result", "execution_count": None, "metadata": {},
                 "data": {"text/plain": f"{score:.4g}"}}]
