"""One unit registry for the whole course.

pint's default registry defines ``byte`` as 8 ``bit`` and ``bit`` as dimensionless, so
``1 TB/s`` silently converts to ``8e12 1/s``: a bandwidth could be added to a clock rate and
nobody would notice. Here FLOP and byte each have a dimension of their own
(``[compute]`` and ``[data]``), so ``TB/s`` can only ever become another data rate and
``FLOP/byte`` (arithmetic intensity) is a real, checkable dimension.

Decimal prefixes (kB, MB, GB, TB) are powers of 1000, as vendors use them for bandwidth;
binary prefixes (KiB, MiB, GiB) are powers of 1024, as used for memory sizes.

The units readers meet in datasheets are known too: ``Gbps`` (network links, bits per second: 1 Gbps
= 0.125 GB/s), ``kWh`` (energy: 1 kWh = 3.6 MJ) and ``TOPS`` (integer throughput, 10**12 operations
per second; an operation counts as one FLOP).
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import pint

__all__ = [
    "ureg", "Q_", "DimensionError", "BARE_UNITS", "as_quantity", "as_amount", "positive",
    "require_finite", "require_positive", "require_count", "require_fraction",
]

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
dollar = [currency] = USD  # prices (mlsys.costs): an hour of a chip, a million tokens

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

# units readers meet in datasheets: link speeds in bits per second (400 Gbps = 50 GB/s), energy in
# kilowatt-hours (1 kWh = 3.6 MJ), integer throughput in operations per second (TOPS = 1e12 OP/s)
bit_per_second = bit / second = bps
watt_hour = watt * hour = Wh
operation_per_second = OP / second = OPS
"""
ureg.load_definitions(_DEFINITIONS.splitlines())
ureg.formatter.default_format = "~P"
Q_ = ureg.Quantity
pint.set_application_registry(ureg)


class DimensionError(ValueError):
    """A quantity had the wrong physical dimension (e.g. FLOP/s where byte/s was expected)."""


# ---------------------------------------------------------------------------------------------
# One input-validation policy for every public function of the models
# ---------------------------------------------------------------------------------------------
#
# * A quantity must be a pint quantity (of any registry) or a string such as "3.35 TB/s".
# * Its magnitude must be a finite real number: inf and NaN are refused everywhere (no model
#   gives a meaningful answer for an infinite bandwidth or a NaN size).
# * A plain number is accepted only where the base unit is a count that cannot be misread:
#   FLOP, byte and FLOP/byte (BARE_UNITS). Times and rates (s, byte/s, FLOP/s) must carry
#   their unit, because "450" could be B/s, GB/s or GiB/s.
# * Data and work sizes cannot have sub-unit prefixes: "1 mB" is refused (a millibyte is
#   never meant; write "1 MB"), as are mFLOP and mbit.
# * Counts (GPUs, elements, layers) are ints, never bools or floats: require_count.
# * Fractions are real numbers in [0, 1]: require_fraction.

#: base units in which a plain number is accepted (a count of FLOPs, of bytes, or their ratio)
BARE_UNITS = ("FLOP", "byte", "FLOP/byte")

_SUBUNIT_PREFIXES = ("yocto", "zepto", "atto", "femto", "pico", "nano", "micro", "milli", "centi")
_COUNTED = ("byte", "bit", "FLOP", "MAC", "element")


def _check_no_subunit(q: pint.Quantity, name: str) -> None:
    for unit in q._units:  # unit names, e.g. "millibyte"
        for prefix in _SUBUNIT_PREFIXES:
            if unit.startswith(prefix) and unit[len(prefix):] in _COUNTED:
                raise DimensionError(
                    f"{name}: {unit} is a fraction of a {unit[len(prefix):]}, which is never meant; "
                    f"use a capital prefix for millions (MB, MFLOP) or kB/KiB for thousands"
                )


def require_finite(value: Any, name: str = "value") -> Any:
    """Return ``value`` (a real number or a quantity) if its magnitude is finite, else raise ``ValueError``.

    Booleans and non-numbers raise ``TypeError``.
    """
    mag = value.magnitude if isinstance(value, pint.Quantity) else value
    if isinstance(mag, bool) or not isinstance(mag, Real):
        raise TypeError(f"{name} must be a real number, got {type(mag).__name__} {mag!r}")
    if not math.isfinite(mag):
        raise ValueError(f"{name} must be a finite number, got {mag!r}")
    return value


def as_quantity(value: Any, expected: str, name: str = "value") -> pint.Quantity:
    """Return ``value`` as a finite quantity of this registry with the dimension of ``expected``.

    ``expected`` is a unit expression such as ``"byte/s"``; ``value`` may be a quantity of
    any compatible unit or a string such as ``"3.35 TB/s"``. Plain numbers are refused
    (a bandwidth of ``3.35`` is ambiguous; see :func:`as_amount` for counts), as are infinite
    or NaN magnitudes and sub-unit prefixes on data or work ("1 mB"). Raises
    :class:`DimensionError` for a wrong dimension or an unparseable string, ``ValueError`` for
    a non-finite magnitude.
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
    _check_no_subunit(value, name)
    require_finite(value, name)
    return value


def as_amount(value: Any, expected: str, name: str = "value") -> pint.Quantity:
    """Like :func:`as_quantity`, but a plain int or float is read in ``expected`` when that is one
    of :data:`BARE_UNITS` (FLOP, byte, FLOP/byte): ``as_amount(1e9, "byte")`` is 1 GB.

    For any other unit a plain number is refused, as by :func:`as_quantity`.
    """
    if expected in BARE_UNITS and isinstance(value, Real) and not isinstance(value, bool):
        require_finite(value, name)
        value = ureg.Quantity(float(value), expected)
    return as_quantity(value, expected, name)


def positive(value: Any, expected: str, name: str = "value", allow_zero: bool = False) -> pint.Quantity:
    """:func:`as_amount` followed by :func:`require_positive`: the one call most models need.

    Returns a finite quantity with the dimension of ``expected`` that is > 0 (or >= 0 with
    ``allow_zero``).
    """
    return require_positive(as_amount(value, expected, name), name, allow_zero=allow_zero)


def require_positive(value: Any, name: str, allow_zero: bool = False) -> Any:
    """Raise unless ``value`` (a number or quantity) is finite and positive (or zero if allowed).

    ``TypeError`` for non-numbers and booleans, ``ValueError`` for NaN, infinities, negatives
    and (unless ``allow_zero``) zero.
    """
    require_finite(value, name)
    mag = value.magnitude if isinstance(value, pint.Quantity) else value
    if mag < 0 or (mag == 0 and not allow_zero):
        need = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be {need}, got {value}")
    return value


def require_count(value: Any, name: str, minimum: int = 1) -> int:
    """Return ``value`` if it is an ``int`` >= ``minimum`` (a count: elements, GPUs, layers), else raise.

    Booleans and floats are refused with ``TypeError`` (``2.0`` GPUs is a bug upstream),
    values below ``minimum`` with ``ValueError``.
    """
    what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be {what} (a count), got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be {what} (a count), got {value}")
    return int(value)


def require_fraction(value: Any, name: str) -> float:
    """Return ``value`` as a float if it is a real number in [0, 1], else raise ``ValueError``/``TypeError``."""
    require_finite(value, name)
    if isinstance(value, pint.Quantity):
        value = value.to("").magnitude
    if not 0 <= value <= 1:
        raise ValueError(f"{name} must be a fraction in [0, 1], got {value!r}")
    return float(value)
