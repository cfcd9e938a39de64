"""Visible checks that name a learner's typical slip without giving the answer away.

A lab's visible check runs on a case small enough to count on one's fingers, compares the learner's
count with the count each *typical slip* would give (``N`` adds for a sum of ``N`` numbers, where
there are ``N - 1``; the input bytes without the output; LayerNorm's bytes without its weight and
bias), and, on a match, names that slip and the hint that helps. A wrong count that matches no known
slip is reported without the expected value: the hidden tests grade other sizes, and the point of a
visible check is to send the learner back to the convention, not to hand over the number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlsys.labkit.grading import GradingError

__all__ = ["check_count"]


def _magnitude(label: str, found: Any, unit: str) -> float:
    """``found`` in ``unit`` (a pint quantity of that dimension), or a GradingError saying what was expected."""
    if not (hasattr(found, "to") and hasattr(found, "check")):
        raise GradingError(f"{label}: expected a quantity in {unit} (e.g. Q_(x, {unit!r})), "
                           f"found {type(found).__name__} {found!r:.60}")
    try:
        return float(found.to(unit).magnitude)
    except Exception:  # pint's DimensionalityError, or anything a hostile object raises
        raise GradingError(f"{label}: expected a quantity in {unit}, found {found!r:.60} "
                           "(FLOPs and bytes swapped, or a unit missing?)") from None


def check_count(label: str, found: Any, unit: str, want: float, slips: Mapping[float, str], *,
                hint: str = "") -> None:
    """Fail unless ``found`` is ``want`` ``unit`` (to 1e-9 relative).

    ``slips`` maps the value each typical slip gives (in ``unit``) to a sentence naming that slip;
    a match raises with that sentence. Any other wrong value raises without stating ``want``. ``hint``
    (e.g. "see the hints under Part 1") ends every message.
    """
    value = _magnitude(label, found, unit)
    if abs(value - want) <= 1e-9 * max(abs(want), 1.0):
        return
    tail = f" ({hint})" if hint else ""
    for slip, sentence in slips.items():
        if abs(value - slip) <= 1e-9 * max(abs(slip), 1.0):
            raise GradingError(f"{label}: you found {value:g} {unit}: {sentence}{tail}")
    raise GradingError(f"{label}: you found {value:g} {unit}, which is not what Part 1's conventions give "
                       f"for this case; count it by hand from the table{tail}")
