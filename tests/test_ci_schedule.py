"""The order `make test` sends work to its workers (tests/conftest.py): every unit LONGEST names exists,
so a renamed test or group cannot silently fall back to the end of the queue."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import LONGEST, _order

from mlsys.grader import teach

TESTS = Path(__file__).resolve().parent


def test_every_unit_started_first_exists():
    labs = set(teach.lab_names())
    for unit in LONGEST:
        if "::" in unit:
            path, test = unit.split("::")
            assert re.search(rf"^def {test}\(", (TESTS / path).read_text(encoding="utf-8"), re.M), unit
        elif unit.startswith("graded-"):
            assert unit.removeprefix("graded-") in labs, unit
        else:
            assert any(f'xdist_group("{unit}")' in p.read_text(encoding="utf-8") for p in TESTS.glob("test_*.py")), unit


def test_longest_units_go_first_and_fast_tests_last():
    class Item:  # the two things _order reads of a pytest item
        def __init__(self, name, slow=False, group=None):
            self.path, self.originalname = Path(name.split("::")[0]), name.split("::")[1]
            self.name = self.originalname
            self.marks = {"slow": pytest.mark.slow.mark} if slow else {}
            if group:
                self.marks["xdist_group"] = pytest.mark.xdist_group(group).mark

        def get_closest_marker(self, name):
            return self.marks.get(name)

    items = [Item("test_a.py::test_fast"), Item("test_b.py::test_slow", slow=True),
             Item("test_lab4.py::test_x", slow=True, group="graded-lab4_collectives"),
             Item("test_lab_pipeline.py::test_bad_submission_corpus", slow=True)]
    ordered = [i.originalname for i in sorted(items, key=_order)]
    assert ordered == ["test_x", "test_bad_submission_corpus", "test_slow", "test_fast"]


def test_make_test_keeps_the_order_conftest_gives():
    """xdist's load-group scheduling sorts the work units by their number of tests unless told not to, which
    sends a short group of three tests before a long one of two: `make test` must pass --no-loadscope-reorder."""
    recipe = re.search(r"^test: .*\n((?:\t.*\n)+)", (TESTS.parent / "Makefile").read_text(encoding="utf-8"), re.M)
    assert recipe, "no test target in the Makefile"
    pytest_line = next(line for line in recipe.group(1).splitlines() if "pytest" in line)
    assert "--dist loadgroup" in pytest_line and "--no-loadscope-reorder" in pytest_line, pytest_line
