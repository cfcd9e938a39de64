"""The named-TOML loader behind hardware.get and transformer.get_model (mlsys.datafile)."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from mlsys.datafile import name_key, read_named


class Thing(NamedTuple):
    name: str
    aliases: tuple[str, ...]


class ThingError(ValueError):
    pass


def build(raw: dict) -> Thing:
    return Thing(raw["name"], tuple(raw.get("aliases", ())))


def write(tmp_path, text: str):
    path = tmp_path / "things.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_name_key_ignores_case_spaces_dashes_underscores_and_dots():
    assert name_key("H100-SXM") == name_key("h100 sxm") == name_key("H100_Sxm") == "h100sxm"
    assert name_key("Llama-3.1-8B") == "llama318b"


def test_entries_in_file_order_found_by_name_or_alias(tmp_path):
    path = write(tmp_path, '[[thing]]\nname = "B-2"\naliases = ["bee two"]\n\n[[thing]]\nname = "A1"\n')
    table = read_named(path, "thing", build, ThingError, "MLSYS_THINGS")
    assert list(table.entries) == ["B-2", "A1"]
    assert table.get("bee_two").name == "B-2" and table.get("b2").name == "B-2" and table.get("a.1").name == "A1"
    with pytest.raises(KeyError, match=r"unknown thing 'C3'; known: B-2, A1"):
        table.get("C3")


@pytest.mark.parametrize(("text", "message"), [
    ('[[thing]]\nname = "X1"\n\n[[thing]]\nname = "X1"\n', r"thing 'X1' appears twice"),
    ('[[thing]]\nname = "X1"\n\n[[thing]]\nname = "Y"\naliases = ["x-1"]\n', r"'x-1' is used by both X1 and Y"),
    ('[[other]]\nname = "X1"\n', r"no \[\[thing\]\] entries"),
    ('[[thing]\n', r"not valid TOML"),
])
def test_a_malformed_file_raises_the_callers_error_naming_what_is_wrong(tmp_path, text, message):
    with pytest.raises(ThingError, match=message):
        read_named(write(tmp_path, text), "thing", build, ThingError, "MLSYS_THINGS")


def test_a_missing_file_names_the_variable_that_may_point_elsewhere(tmp_path):
    with pytest.raises(ThingError, match=r"thing data file .*missing.toml does not exist \(check \$MLSYS_THINGS\)"):
        read_named(tmp_path / "missing.toml", "thing", build, ThingError, "MLSYS_THINGS")
