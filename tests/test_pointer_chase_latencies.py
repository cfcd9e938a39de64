"""The pointer-chase record reader: working-set size -> latency, for each kind of load."""

from __future__ import annotations

from typing import Any

import pytest

from mlsys import Q_
from mlsys.bench.experiments.pointer_chase import latencies


class _Rec:
    """The two things ``latencies`` reads of a Record: ``results`` and ``q`` (and item access)."""

    def __init__(self, results: dict[str, Any]) -> None:
        self.results = results

    def __getitem__(self, key: str) -> Any:
        return self.results[key]

    def q(self, key: str, i: int, leaf: str) -> Any:
        node = self.results[key][i][leaf]
        return Q_(node["value"], node["unit"])


def _rows(pairs: list[tuple[int, float]]) -> list[dict[str, Any]]:
    return [{"working_set": {"value": ws, "unit": "byte"}, "latency": {"value": ns, "unit": "ns"}} for ws, ns in pairs]


def test_latencies_reads_each_kind_of_load() -> None:
    rec = _Rec({"results": _rows([(16384, 30.0)]), "results_cg": _rows([(16384, 250.0), (2**28, 800.0)])})
    assert latencies(rec) == {16384: Q_(250.0, "ns"), 2**28: Q_(800.0, "ns")}
    assert latencies(rec, "ca") == {16384: Q_(30.0, "ns")}
    with pytest.raises(ValueError, match="expected one of"):
        latencies(rec, "l1")
