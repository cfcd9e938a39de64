"""Claims the book makes, checked at build time, and numbers formatted for prose.

``check(condition, message)`` raises :class:`ClaimError` when a claim stops holding (for
example after a constant changes), so ``make book`` fails instead of printing a wrong
sentence. ``fmt`` turns numbers and quantities into short strings for prose.
"""

from __future__ import annotations

import math
from numbers import Real

import pint

__all__ = ["ClaimError", "check", "fmt"]


class ClaimError(AssertionError):
    """A claim made in the book's prose no longer holds."""


def check(condition: object, message: str) -> None:
    """Raise :class:`ClaimError` with ``message`` unless ``condition`` is true."""
    if not bool(condition):
        raise ClaimError(f"claim does not hold: {message}")


def _sig(x: float, digits: int) -> str:
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    mag = math.floor(math.log10(abs(x)))
    if mag >= 15 or mag <= -5:
        text = f"{x:.{digits - 1}e}"
        mant, exp = text.split("e")
        mant = mant.rstrip("0").rstrip(".") if "." in mant else mant
        return f"{mant}e{int(exp)}"
    decimals = max(digits - 1 - mag, 0)
    text = f"{x:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def fmt(value: object, unit: str | None = None, digits: int = 3) -> str:
    """Format a number or quantity for prose with ``digits`` significant figures.

    ``fmt(Q_(989.5e12, "FLOP/s"), "TFLOP/s")`` -> ``"990 TFLOP/s"``;
    ``fmt(0.000123)`` -> ``"0.000123"``; a non-zero value is never printed as ``0``.
    Integers below 10**15 print exactly, with thousands separators. ``unit`` converts a
    quantity first; omitting it keeps the quantity's own unit.
    """
    if isinstance(value, pint.Quantity):
        q = value.to(unit) if unit else value
        mag = q.magnitude
        unit_text = f"{q.units:~P}"
        number = fmt(mag, digits=digits)
        return f"{number} {unit_text}".strip() if unit_text else number
    if unit is not None:
        raise TypeError(f"fmt: unit {unit!r} given but {value!r} is not a quantity")
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"fmt expects a number or a pint quantity, got {type(value).__name__}")
    if isinstance(value, int) and abs(value) < 10**15:
        return f"{value:,}"
    x = float(value)
    if x.is_integer() and abs(x) < 10**15 and abs(x) >= 10 ** (digits - 1):
        return f"{int(x):,}"
    return _sig(x, digits)
