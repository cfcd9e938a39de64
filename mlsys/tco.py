"""Total cost of ownership: what an owned GPU-hour costs, to set beside a rented one.

Buying a server of ``g`` GPUs for ``price`` and running it for ``years`` (straight-line
depreciation to zero, no financing or resale) costs, per hour the server exists:

    capex per hour  = price / (years * 8766 h)
    IT power        = g * P_gpu + P_rest          P_rest = rated server power - g * GPU TDP
    facility power  = PUE * IT power              (cooling and power conversion)
    energy per hour = facility power * electricity price
    per GPU-hour    = (capex per hour + energy per hour) / g
    per useful GPU-hour = per GPU-hour / utilisation

``P_gpu`` is what each GPU draws (its TDP at worst; a measured sustained draw, chapter 13, where
known). ``P_rest`` is the rest of the server at its rating: CPUs, memory, NVSwitches, network cards,
fans and power-supply losses; it is IT load, counted before the PUE (which multiplies all IT load,
not the GPUs alone). Utilisation is the share of hours the GPUs do paid work: an idle hour still
depreciates. Inputs come from ``mlsys/data/tco.toml``, each with its source. Left out: networking
beyond the server's cards, the building, staff, financing and resale; a sketch to compare with
rental prices, not a quote.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pint

from . import hardware
from .datafile import read_toml
from .units import Q_, positive, require_count, require_fraction

__all__ = ["Server", "Facility", "TcoBreakdown", "servers", "server", "facility", "ownership_cost", "DATA_FILE"]

DATA_FILE = Path(__file__).with_name("data") / "tco.toml"
HOURS_PER_YEAR = Q_(365.25 * 24, "hour")


class TcoDataError(ValueError):
    """The TCO data file is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class Server:
    """A purchasable server: its accelerators, price and rated power, with the source."""

    name: str
    accelerator: str
    gpus: int
    price: pint.Quantity  #: USD
    power: pint.Quantity  #: kW, rated maximum
    as_of: str
    url: str

    @property
    def non_gpu_power(self) -> pint.Quantity:
        """Rated power not drawn by the GPUs at TDP: ``power - gpus * TDP`` (kW)."""
        tdp = hardware.get(self.accelerator).tdp
        if tdp is None:
            raise TcoDataError(f"{self.accelerator} has no TDP in accelerators.toml")
        rest = (self.power - self.gpus * tdp).to("kW")
        if rest.m <= 0:
            raise TcoDataError(f"server {self.name}: rated power {self.power} is below its GPUs' TDP")
        return rest


@dataclass(frozen=True)
class Facility:
    """A data centre's overhead (PUE) and electricity price, with the source."""

    name: str
    pue: float
    electricity: pint.Quantity  #: USD/kWh
    as_of: str
    url: str


@dataclass(frozen=True)
class TcoBreakdown:
    """Per GPU-hour costs of an owned server (USD/hour)."""

    capex: pint.Quantity
    energy: pint.Quantity
    it_power: pint.Quantity        #: kW, whole server
    facility_power: pint.Quantity  #: kW, whole server with PUE
    utilisation: float

    @property
    def per_gpu_hour(self) -> pint.Quantity:
        """Cost of one GPU for one hour, used or not: ``capex + energy``."""
        return (self.capex + self.energy).to("USD/hour")

    @property
    def per_useful_gpu_hour(self) -> pint.Quantity:
        """Cost of one GPU-hour of paid work: ``per_gpu_hour / utilisation``."""
        return (self.per_gpu_hour / self.utilisation).to("USD/hour")


def _where(kind: str, i: int) -> str:
    return f"{DATA_FILE.name} [[{kind}]] {i + 1}"


def _check_keys(raw: dict, keys: set[str], where: str) -> None:
    extra, missing = set(raw) - keys, keys - set(raw)
    if extra or missing:
        raise TcoDataError(f"{where}: unknown keys {sorted(extra)}, missing keys {sorted(missing)}")


@lru_cache(maxsize=1)
def _load() -> tuple[dict[str, Server], dict[str, Facility]]:
    data = read_toml(DATA_FILE, TcoDataError, "TCO data file", "")
    srv: dict[str, Server] = {}
    for i, raw in enumerate(data.get("server", [])):
        where = _where("server", i)
        _check_keys(raw, {"name", "accelerator", "gpus", "price", "power", "as_of", "publisher", "title", "url"}, where)
        srv[raw["name"]] = Server(raw["name"], hardware.get(raw["accelerator"]).name,
                                  require_count(raw["gpus"], f"{where}.gpus"),
                                  positive(Q_(raw["price"]["value"], raw["price"]["unit"]), "USD", f"{where}.price"),
                                  positive(Q_(raw["power"]["value"], raw["power"]["unit"]), "kW", f"{where}.power"),
                                  raw["as_of"], raw["url"])
    fac: dict[str, Facility] = {}
    for i, raw in enumerate(data.get("facility", [])):
        where = _where("facility", i)
        _check_keys(raw, {"name", "pue", "electricity", "as_of", "publisher", "title", "url"}, where)
        if not 1 <= float(raw["pue"]) < 3:
            raise TcoDataError(f"{where}: pue {raw['pue']} out of range; expected 1 <= PUE < 3")
        e = raw["electricity"]
        fac[raw["name"]] = Facility(raw["name"], float(raw["pue"]),
                                    positive(Q_(e["value"], e["unit"]), "USD/(kW*hour)", f"{where}.electricity"),
                                    raw["as_of"], raw["url"])
    return srv, fac


def servers() -> dict[str, Server]:
    """Every server of the data file, by name."""
    return dict(_load()[0])


def server(name: str) -> Server:
    """One server by name ("DGX-H100")."""
    srv = _load()[0]
    if name not in srv:
        raise KeyError(f"unknown server {name!r}; known: {', '.join(srv)}")
    return srv[name]


def facility(name: str = "average-2023") -> Facility:
    """One facility by name ("average-2023", "hyperscale")."""
    fac = _load()[1]
    if name not in fac:
        raise KeyError(f"unknown facility {name!r}; known: {', '.join(fac)}")
    return fac[name]


def ownership_cost(srv: Server, fac: Facility, years: float = 4.0, utilisation: float = 1.0,
                   gpu_power: object | None = None) -> TcoBreakdown:
    """Per GPU-hour cost of owning ``srv`` in ``fac`` for ``years`` at ``utilisation`` (module docstring).

    ``gpu_power`` is each GPU's draw (W or kW; default its TDP): a measured sustained draw lowers
    the energy term; the rest of the server is counted at its rating.
    """
    if not isinstance(years, (int, float)) or isinstance(years, bool) or not 0 < years < 50:
        raise ValueError(f"years={years!r}; expected a number of years of service in (0, 50)")
    util = require_fraction(utilisation, "utilisation")
    if util == 0:
        raise ValueError("utilisation is 0: no useful hours to spread the cost over; expected a share in (0, 1]")
    tdp = hardware.get(srv.accelerator).tdp
    per_gpu = tdp if gpu_power is None else positive(gpu_power, "W", "gpu_power")
    it = (srv.gpus * per_gpu + srv.non_gpu_power).to("kW")
    fp = (fac.pue * it).to("kW")
    capex = (srv.price / (years * HOURS_PER_YEAR) / srv.gpus).to("USD/hour")
    energy = (fp * fac.electricity / srv.gpus).to("USD/hour")
    return TcoBreakdown(capex, energy, it, fp, util)
