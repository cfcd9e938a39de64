"""mlsys.costs: published prices and grid intensities, checked by hand and against bad data files."""

import textwrap

import pytest

from mlsys import Q_, costs


def test_h100_capacity_block_per_chip_hour_by_hand():
    q = costs.rate("H100")
    assert (q.provider, q.terms, q.per_instance) == ("AWS", "capacity-block", 8)
    # $39.33 per p5.48xlarge-hour / 8 GPUs = $4.91625 (AWS prints $4.916)
    assert q.per_chip.to("USD/hour").m == pytest.approx(4.91625)
    assert "aws.amazon.com" in q.url and q.as_of == "2024-12"


def test_cost_of_a_day_on_a_thousand_h100s_by_hand():
    # 1000 chips x $4.91625 x 24 h = $117,990
    cost = costs.cost_of(1000, costs.rate("H100").per_chip, Q_(1, "day"))
    assert cost.to("USD").m == pytest.approx(117_990)
    with pytest.raises(ValueError, match="USD/hour"):
        costs.cost_of(1, 4.9, Q_(1, "hour"))
    with pytest.raises((ValueError, TypeError), match="chips"):
        costs.cost_of(0, costs.rate("H100").per_chip, Q_(1, "hour"))


def test_pay_as_you_go_rate_is_chosen_over_commitments():
    assert costs.rate("TPUv6e").per_chip.m == pytest.approx(2.70)
    assert costs.rate("L4") is None  # nothing published in the file for it


def test_published_prices_pass_independent_expectations():
    # every public-cloud accelerator-hour of the 2020s rents for between 10 cents and 20 dollars
    for q in costs.quotes():
        assert 0.10 < q.per_chip.to("USD/hour").m < 20, q
    # Trillium's commitments are discounts: 3-year < 1-year < on-demand
    v6e = {q.terms: q.per_chip.m for q in costs.quotes("TPUv6e")}
    assert v6e["3-year"] < v6e["1-year"] < v6e["on-demand"]
    # from one provider, a bigger chip of the same family costs more per hour
    per_chip = {q.accelerator: q.per_chip.m for q in costs.quotes() if q.terms != "1-year" and q.terms != "3-year"}
    assert per_chip["H200-SXM"] > per_chip["H100-SXM"] > per_chip["A100-SXM4-40GB"]
    assert per_chip["TPUv5p"] > per_chip["TPUv5e"]


def test_world_grid_intensity():
    g = costs.grid()
    assert g.intensity.to("g/(kW*hour)").m == pytest.approx(480) and g.year == 2023
    # 1 MWh at 480 g/kWh = 480 kg of CO2
    assert (Q_(1, "MW*hour") * g.intensity).to("kg").m == pytest.approx(480)
    with pytest.raises(KeyError, match="known: world-2023"):
        costs.grid("mars")


GOOD = """
[[quote]]
accelerator = "H100"
provider = "P"
offering = "o"
terms = "on-demand"
instance_price = { value = 16.0, unit = "USD/hour" }
per_instance = 8
listed_per_chip = { value = 2.0, unit = "USD/hour" }
as_of = "2025-01"
publisher = "P"
title = "t"
url = "https://example.com/p"
"""


def _write(tmp_path, text):
    p = tmp_path / "costs.toml"
    p.write_text(textwrap.dedent(text))
    return p


def test_a_good_minimal_file_loads(tmp_path):
    qs, grids = costs.load(_write(tmp_path, GOOD))
    assert len(qs) == 1 and qs[0].accelerator == "H100-SXM" and qs[0].per_chip.m == pytest.approx(2.0)
    assert grids == {}


@pytest.mark.parametrize("edit, message", [
    (('value = 2.0, unit = "USD/hour" }', 'value = 2.5, unit = "USD/hour" }'), "printed figures disagree"),
    (('accelerator = "H100"', 'accelerator = "H1000"'), "unknown accelerator 'H1000'"),
    (('terms = "on-demand"', 'terms = "spot"'), "terms must be one of"),
    (('per_instance = 8', 'per_instance = 0'), "per_instance must be a whole number"),
    (('value = 16.0, unit = "USD/hour"', 'value = 16.0, unit = "USD"'), "price per time"),
    (('value = 16.0,', 'value = -16.0,'), "positive finite number"),
    (('as_of = "2025-01"', 'as_of = "January 2025"'), "as_of must be a date"),
    (('url = "https://example.com/p"', 'url = "http://example.com/p"'), "https://"),
    (('title = "t"', 'title = "t"\nprice = 3'), "unknown field"),
    (('title = "t"', 'title = ""'), "'title' must be a non-empty string"),
])
def test_bad_files_are_refused_with_the_field_named(tmp_path, edit, message):
    with pytest.raises(costs.CostDataError, match=message):
        costs.load(_write(tmp_path, GOOD.replace(*edit)))


def test_duplicates_and_dearer_commitments_are_refused(tmp_path):
    with pytest.raises(costs.CostDataError, match="two on-demand quotes"):
        costs.load(_write(tmp_path, GOOD + GOOD))
    dear = GOOD.replace('terms = "on-demand"', 'terms = "1-year"').replace("16.0", "24.0").replace(
        'value = 2.0, unit', 'value = 3.0, unit')
    with pytest.raises(costs.CostDataError, match="1-year price of H100-SXM from P .* is not below"):
        costs.load(_write(tmp_path, GOOD + dear))
    with pytest.raises(costs.CostDataError, match="does not exist"):
        costs.load(tmp_path / "missing.toml")
