"""One unit registry for the whole course.

pint's default registry defines ``byte`` as 8 ``bit`` and ``bit`` as dimensionless, so
``1 TB/s`` silently converts to ``8e12 1/s``: a bandwidth could be added to a clock rate and
nobody would notice. Here FLOP and byte each have a dimension of their own
(``[compute]`` and ``[data]``), so ``TB/s`` can only ever become another data rate and
``FLOP/byte`` (arithmetic intensity) is a real, checkable dimension.

Decimal prefixes (kB, MB, GB, TB) are powers of 1000, as vendors use them for bandwidth;
binary prefixes (KiB, MiB, GiB) are powers of 1024, as used for memory sizes.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

import pint

__all__ = ["ureg", "Q_", "DimensionError", "as_quantity", "require_positive", "require_count"]

ureg = pint.UnitRegistry(
    filename=None,  # start empty: no bit, no dimensionless byte
    autoconvert_offset_to_baseunit=True,
    non_int_type=float,
)
_DEFINITIONS = """
@defaults
    group = root
    system = SI
@end

# SI prefixes (decimal) and IEC prefixes (binary)
yocto- = 1e-24 = y-
zepto- = 1e-21 = z-
atto- =  1e-18 = a-
femto- = 1e-15 = f-
pico- =  1e-12 = p-
nano- =  1e-9  = n-
micro- = 1e-6  = µ- = μ- = u-
milli- = 1e-3  = m-
centi- = 1e-2  = c-
kilo- =  1e3   = k- = K-
mega- =  1e6   = M-
giga- =  1e9   = G-
tera- =  1e12  = T-
peta- =  1e15  = P-
exa- =   1e18  = E-
zetta- = 1e21  = Z-
kibi- = 2**10 = Ki-
mebi- = 2**20 = Mi-
gibi- = 2**30 = Gi-
tebi- = 2**40 = Ti-
pebi- = 2**50 = Pi-

# base dimensions
second = [time] = s = sec
meter = [length] = m = metre
gram = [mass] = g
ampere = [current] = A
kelvin = [temperature] = K
degree_Celsius = kelvin; offset: 273.15 = degC = celsius  # GPU temperatures in provenance records
FLOP = [compute] = _ = flop = FLOPs = OP = op
byte = [data] = B = octet
bit = byte / 8 = b
element = [elements] = elem

# derived
minute = 60 * second = min
hour = 60 * minute = h = hr
day = 24 * hour = d
hertz = 1 / second = Hz
newton = kilogram * meter / second ** 2 = N
joule = newton * meter = J
watt = joule / second = W
volt = watt / ampere = V
MAC = 2 * FLOP = mac = FMA = fma
transfer = [] = T_
"""
ureg.load_definitions(_DEFINITIONS.splitlines())
ureg.formatter.default_format = "~P"
Q_ = ureg.Quantity
pint.set_application_registry(ureg)


class DimensionError(ValueError):
    """A quantity had the wrong physical dimension (e.g. FLOP/s where byte/s was expected)."""


def as_quantity(value: Any, expected: str, name: str = "value") -> pint.Quantity:
    """Return ``value`` as a quantity of this registry with the dimension of ``expected``.

    ``expected`` is a unit expression such as ``"byte/s"``; ``value`` may be a quantity of
    any compatible unit or a string such as ``"3.35 TB/s"``. Plain numbers are refused
    (a bandwidth of ``3.35`` is ambiguous). Raises :class:`DimensionError` otherwise.
    """
    if isinstance(value, str):
        try:
            value = ureg.Quantity(value)
        except Exception as exc:  # pint raises several error types for bad strings
            raise DimensionError(f"{name}: cannot parse {value!r} as a quantity in {expected}") from exc
    if not isinstance(value, pint.Quantity):
        raise DimensionError(
            f"{name} must be a quantity in {expected} (e.g. mlsys.Q_(1, {expected!r})), "
            f"got the plain {type(value).__name__} {value!r}"
        )
    if value._REGISTRY is not ureg:
        value = ureg.Quantity(value.magnitude, str(value.units))
    target = ureg.Quantity(1, expected)
    if value.dimensionality != target.dimensionality:
        raise DimensionError(
            f"{name} must have the dimension of {expected} ({target.dimensionality}), "
            f"got {value:~P} ({value.dimensionality})"
        )
    return value


def require_positive(value: Any, name: str, allow_zero: bool = False) -> Any:
    """Raise ``ValueError`` unless ``value`` (a number or quantity) is positive (or zero if allowed)."""
    mag = value.magnitude if isinstance(value, pint.Quantity) else value
    if isinstance(mag, bool) or not isinstance(mag, Real):
        raise TypeError(f"{name} must be a number, got {type(mag).__name__} {mag!r}")
    if mag != mag:  # NaN
        raise ValueError(f"{name} must be a number, got NaN")
    if mag < 0 or (mag == 0 and not allow_zero):
        need = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be {need}, got {value}")
    return value


def require_count(value: Any, name: str) -> int:
    """Return ``value`` if it is a positive ``int`` (a count or a size in elements), else raise.

    Booleans and floats are refused with ``TypeError``, zero and negatives with ``ValueError``.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive integer (a count of elements), got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer (a count of elements), got {value}")
    return value
