"""What accelerator time costs, in dollars and in carbon: published prices and grid intensities.

Loaded from ``mlsys/data/costs.toml`` (or ``$MLSYS_COSTS``) and validated. Every price is a
:class:`Quote` as its publisher printed it, with the terms, the date it was in force and a link:

    price per chip-hour  = instance price (USD/hour) / accelerators per instance
    cost of a run        = chips x price per chip-hour x hours
    cost per token       = chips x price per chip-hour / tokens per second
    emissions            = energy (kWh) x grid intensity (g CO2 / kWh)

>>> from mlsys import costs
>>> costs.rate("H100").per_chip            # doctest: +SKIP
<Quantity(4.91625, 'USD / hour')>
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pint

from . import hardware
from .datafile import read_toml
from .units import Q_, DimensionError, as_quantity, require_count

__all__ = ["TERMS", "COMMITMENTS", "Quote", "Grid", "CostDataError", "DATA_FILE", "data_file", "load",
           "quotes", "rate", "grid", "cost_of", "chips_to_hold", "tensor_parallel_degree", "serving_degree", "ServingCost",
           "serving_cost", "TrainingCost", "training_cost"]

DATA_FILE = Path(__file__).with_name("data") / "costs.toml"

#: the terms a price may be offered on; the last two are committed-use discounts
TERMS = ("on-demand", "capacity-block", "1-year", "3-year")
COMMITMENTS = ("1-year", "3-year")
_DATE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?$")
_QUOTE_KEYS = {"accelerator", "provider", "offering", "terms", "instance_price", "per_instance",
               "listed_per_chip", "as_of", "publisher", "title", "url"}
_GRID_KEYS = {"name", "region", "intensity", "year", "publisher", "title", "url"}


class CostDataError(ValueError):
    """The cost data file is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class Quote:
    """One published price of accelerator time."""

    accelerator: str          #: canonical name in mlsys/data/accelerators.toml
    provider: str
    offering: str
    terms: str                #: one of TERMS
    instance_price: pint.Quantity  #: USD/hour for one instance
    per_instance: int         #: accelerators per instance
    as_of: str
    publisher: str
    title: str
    url: str

    @property
    def per_chip(self) -> pint.Quantity:
        """Price of one accelerator-hour, USD/hour: instance price / accelerators per instance."""
        return (self.instance_price / self.per_instance).to("USD/hour")


@dataclass(frozen=True)
class Grid:
    """The carbon intensity of a region's electricity in one year (g CO2 per kWh)."""

    name: str
    region: str
    intensity: pint.Quantity
    year: int
    publisher: str
    title: str
    url: str


def _fail(where: str, msg: str) -> None:
    raise CostDataError(f"{where}: {msg}")


def _text(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        _fail(where, f"field {key!r} must be a non-empty string, got {value!r}")
    return value


def _link(raw: dict[str, Any], where: str) -> str:
    """The entry's ``url``: an https:// link to where its figure is printed."""
    url = _text(raw, "url", where)
    if not url.startswith("https://"):
        _fail(where, f"url must be an https:// link to where the figure is printed, got {url!r}")
    return url


def _table(raw: Any, where: str, keys: set[str]) -> None:
    """A TOML table whose fields are all among ``keys``."""
    if not isinstance(raw, dict):
        _fail(where, f"expected a table, got {type(raw).__name__}")
    unknown = set(raw) - keys
    if unknown:
        _fail(where, f"unknown field(s) {sorted(unknown)}; expected some of {sorted(keys)}")


def _entry(raw: dict[str, Any], key: str, where: str, unit: str, what: str, allow_zero: bool = False) -> pint.Quantity:
    """``raw[key]`` as ``{ value = <number>, unit = "..." }``, converted to ``unit``; ``what`` names the
    dimension in the error ("a price per time")."""
    entry = raw.get(key)
    if not isinstance(entry, dict) or set(entry) != {"value", "unit"}:
        _fail(where, f"field {key!r} must be {{ value = <number>, unit = \"{unit}\" }}, got {entry!r}")
    value = entry["value"]
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value < 0 or (value == 0 and not allow_zero)):
        _fail(where, f"{key}.value must be a {'non-negative' if allow_zero else 'positive'} finite number, "
                     f"got {value!r}")
    try:
        return Q_(float(value), entry["unit"]).to(unit)
    except (pint.errors.UndefinedUnitError, pint.errors.DimensionalityError, DimensionError) as exc:
        _fail(where, f"{key}.unit must be {what} such as \"{unit}\", got {entry['unit']!r} ({exc})")
    raise AssertionError  # unreachable


def _quote(raw: Any, i: int, source: str) -> Quote:
    where = f"{source}: quote {i + 1}"
    _table(raw, where, _QUOTE_KEYS)
    name = _text(raw, "accelerator", where)
    try:
        acc = hardware.get(name)
    except KeyError as exc:
        _fail(where, str(exc.args[0]))
    where = f"{source}: quote {i + 1} ({acc.name}, {raw.get('provider')})"
    terms = _text(raw, "terms", where)
    if terms not in TERMS:
        _fail(where, f"terms must be one of {TERMS}, got {terms!r}")
    n = raw.get("per_instance")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        _fail(where, f"per_instance must be a whole number of accelerators (>= 1), got {n!r}")
    price = _entry(raw, "instance_price", where, "USD/hour", "a price per time")
    if "listed_per_chip" in raw:
        listed = _entry(raw, "listed_per_chip", where, "USD/hour", "a price per time")
        worked = price / n
        # printed figures are rounded to the cent (instance) and a tenth of a cent (per chip)
        if abs((worked - listed).to("USD/hour").m) > 0.005 / n + 0.0005:
            _fail(where, f"the printed figures disagree: {price:~P} / {n} = {worked:~P}, but the listed "
                         f"per-accelerator price is {listed:~P}")
    as_of = _text(raw, "as_of", where)
    if not _DATE.match(as_of):
        _fail(where, f"as_of must be a date YYYY-MM or YYYY-MM-DD, got {as_of!r}")
    url = _link(raw, where)
    return Quote(acc.name, _text(raw, "provider", where), _text(raw, "offering", where), terms, price, n, as_of,
                 _text(raw, "publisher", where), _text(raw, "title", where), url)


def _grid(raw: Any, i: int, source: str) -> Grid:
    where = f"{source}: grid {i + 1}"
    _table(raw, where, _GRID_KEYS)
    intensity = _entry(raw, "intensity", where, "g/(kW*hour)", "a mass per energy", allow_zero=True)
    year = raw.get("year")
    if isinstance(year, bool) or not isinstance(year, int) or not 1990 <= year <= 2100:
        _fail(where, f"year must be a year such as 2023, got {year!r}")
    url = _link(raw, where)
    return Grid(_text(raw, "name", where), _text(raw, "region", where), intensity, year,
                _text(raw, "publisher", where), _text(raw, "title", where), url)


def data_file() -> Path:
    """The data file in use: ``$MLSYS_COSTS`` if set (your own quotes), else the packaged one."""
    return Path(os.environ.get("MLSYS_COSTS") or DATA_FILE)


def load(path: str | Path | None = None) -> tuple[list[Quote], dict[str, Grid]]:
    """Load and validate a cost data file: its quotes, and its grid intensities by name.

    Refused with :class:`CostDataError`: unknown accelerators or fields, prices that are not a
    positive USD rate, printed per-instance and per-chip prices that disagree, two quotes with the
    same accelerator, provider and terms, commitments that are not cheaper than the same provider's
    pay-as-you-go price, dates and links that are not dates and links.
    """
    path = Path(path) if path is not None else data_file()
    data = read_toml(path, CostDataError, "cost data file", "MLSYS_COSTS")
    unknown = set(data) - {"quote", "grid"}
    if unknown:
        raise CostDataError(f"{path}: unknown section(s) {sorted(unknown)}; expected [[quote]] and [[grid]]")
    qs = [_quote(raw, i, str(path)) for i, raw in enumerate(data.get("quote", []))]
    if not qs:
        raise CostDataError(f"{path}: no [[quote]] entries")
    seen: dict[tuple[str, str, str], Quote] = {}
    for q in qs:
        key = (q.accelerator, q.provider, q.terms)
        if key in seen:
            raise CostDataError(f"{path}: two {q.terms} quotes for {q.accelerator} from {q.provider}; keep one")
        seen[key] = q
    for q in qs:
        if q.terms in COMMITMENTS:
            base = [p for p in qs if (p.accelerator, p.provider) == (q.accelerator, q.provider)
                    and p.terms not in COMMITMENTS]
            if base and q.per_chip >= min(p.per_chip for p in base):
                raise CostDataError(f"{path}: the {q.terms} price of {q.accelerator} from {q.provider} "
                                    f"({q.per_chip:~P}) is not below its pay-as-you-go price")
    grids: dict[str, Grid] = {}
    for i, raw in enumerate(data.get("grid", [])):
        g = _grid(raw, i, str(path))
        if g.name in grids:
            raise CostDataError(f"{path}: grid {g.name!r} appears twice")
        grids[g.name] = g
    return qs, grids


@lru_cache(maxsize=4)
def _cached(path: str) -> tuple[list[Quote], dict[str, Grid]]:
    return load(path)


def quotes(accelerator: str | None = None) -> list[Quote]:
    """Every quote in the data file, or those for one accelerator (any name or alias)."""
    qs, _ = _cached(str(data_file()))
    if accelerator is None:
        return list(qs)
    name = hardware.get(accelerator).name
    return [q for q in qs if q.accelerator == name]


def rate(accelerator: str) -> Quote | None:
    """The pay-as-you-go quote for ``accelerator`` (no commitment: on-demand, else a capacity block;
    the lowest per chip-hour where several providers are listed), or ``None`` if none is listed."""
    payg = [q for q in quotes(accelerator) if q.terms not in COMMITMENTS]
    if not payg:
        return None
    order = {t: i for i, t in enumerate(TERMS)}
    return min(payg, key=lambda q: (order[q.terms], q.per_chip.m))


def grid(name: str = "world-2023") -> Grid:
    """A grid intensity by name (the data file's ``[[grid]]`` entries)."""
    _, grids = _cached(str(data_file()))
    if name not in grids:
        raise KeyError(f"unknown grid {name!r}; known: {', '.join(grids)}")
    return grids[name]


def cost_of(chips: int, price_per_chip: pint.Quantity, duration: pint.Quantity) -> pint.Quantity:
    """Dollars for ``chips`` accelerators at ``price_per_chip`` (USD/hour) for ``duration``:
    ``chips x price x duration``."""
    chips = require_count(chips, "chips")
    price = as_quantity(price_per_chip, "USD/hour", "price_per_chip")
    time = as_quantity(duration, "s", "duration")
    return (chips * price * time).to("USD")


# ----------------------------------------------------------------------------------------------
# the comparison of chapter 15: chips to hold a workload, and what serving and training cost


def chips_to_hold(need: object, accelerator: object, usable: float = 0.9) -> int:
    """Chips whose memory, at a ``usable`` share (room for the runtime), holds ``need`` bytes:
    ``ceil(need / (usable * capacity))``."""
    acc = hardware.get(accelerator) if isinstance(accelerator, str) else accelerator
    if not 0 < usable <= 1:
        raise ValueError(f"usable={usable!r}; expected a share of memory in (0, 1]")
    n = as_quantity(need, "byte", "need")
    return max(1, math.ceil((n / (usable * acc.memory_capacity)).to("").m))


def tensor_parallel_degree(chips: int, heads: int) -> int | None:
    """The smallest tensor-parallel degree ``>= chips`` that divides ``heads`` (each chip takes whole
    heads), or ``None`` if no such degree exists (more chips than heads).

    Whether the chips have a link fast enough to make the split worthwhile is a separate question
    (:attr:`mlsys.hardware.Accelerator.interconnect`); a link missing from the data file is a gap in
    the data, not a chip that cannot be split."""
    chips, heads = require_count(chips, "chips"), require_count(heads, "heads")
    return next((d for d in range(chips, heads + 1) if heads % d == 0), None)


def serving_degree(model: object, accelerator: object, context: int, batch: int, dtype: str = "bf16",
                   usable: float = 0.9) -> int | None:
    """The smallest tensor-parallel degree (a divisor of the query heads) at which one chip holds its
    share: ``resident_bytes_per_chip(t) <= usable * capacity``, with key/value heads copied past
    their count (:func:`mlsys.serving.resident_bytes_per_chip`); ``None`` if no degree fits."""
    from . import serving, transformer

    acc = hardware.get(accelerator) if isinstance(accelerator, str) else accelerator
    if not 0 < usable <= 1:
        raise ValueError(f"usable={usable!r}; expected a share of memory in (0, 1]")
    m = transformer.get_model(model)
    room = usable * acc.memory_capacity
    return next((t for t in range(1, m.heads + 1) if m.heads % t == 0
                 and serving.resident_bytes_per_chip(m, context, batch, t, dtype) <= room), None)


@dataclass(frozen=True)
class ServingCost:
    """Decode of a model on ``chips`` accelerators at one price (chapter 15's table)."""

    accelerator: str
    chips: int
    step: pint.Quantity            #: s per decode step (bandwidth bound, split over the chips)
    tokens_per_second: pint.Quantity
    usd_per_million: pint.Quantity  #: USD per million generated tokens
    joules_per_token: pint.Quantity | None  #: at the chips' TDP, None without one


def serving_cost(model: object, accelerator: object, context: int, batch: int, quote: Quote,
                 dtype: str = "bf16", usable: float = 0.9) -> ServingCost:
    """Decode cost on ``chips`` = :func:`serving_degree` (key/value heads copied past their count,
    in memory and in the bytes each chip reads); step = the roofline bound of one chip's share,
    :func:`mlsys.serving.decode_cost_per_chip` (communication ignored); USD per million tokens =
    ``chips * price / tokens per second * 1e6``; J per token = ``chips * TDP / tokens per second``."""
    from . import serving, transformer
    from .roofline import time_lower_bound

    acc = hardware.get(accelerator) if isinstance(accelerator, str) else accelerator
    m = transformer.get_model(model)
    n = serving_degree(m, acc, context, batch, dtype, usable)
    if n is None:
        raise ValueError(f"{acc.name} cannot serve {m.name}: even {m.heads}-way tensor parallelism leaves a "
                         f"chip more than {usable:.0%} of its memory to hold")
    share = serving.decode_cost_per_chip(m, context, batch, n, dtype)
    step = time_lower_bound(share.flops, share.bytes, acc, dtype).to("s")
    tps = (batch / step).to("1/s")
    usd = (n * quote.per_chip / tps * 1e6).to("USD")
    joules = (n * acc.tdp / tps).to("J") if acc.tdp is not None else None
    return ServingCost(acc.name, n, step, tps, usd, joules)


@dataclass(frozen=True)
class TrainingCost:
    """A training run priced on one accelerator (chapter 15's table)."""

    accelerator: str
    chip_hours: pint.Quantity   #: hour
    usd: pint.Quantity
    energy: pint.Quantity | None  #: MWh at TDP, None without one


def training_cost(params: float, tokens: float, accelerator: object, quote: Quote, mfu: float = 0.4,
                  dtype: str = "bf16") -> TrainingCost:
    """Chip-hours ``6 N D / (mfu * peak)``, dollars ``chip-hours * price``, energy ``chip-hours * TDP``."""
    acc = hardware.get(accelerator) if isinstance(accelerator, str) else accelerator
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu={mfu!r}; expected a share of the peak in (0, 1]")
    hours = (Q_(6 * params * tokens, "FLOP") / (mfu * acc.peak(dtype))).to("hour")
    energy = (acc.tdp * hours).to("MW*hour") if acc.tdp is not None else None
    return TrainingCost(acc.name, hours, cost_of(1, quote.per_chip, hours), energy)
