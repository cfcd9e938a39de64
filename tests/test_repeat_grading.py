"""The README's "full marks under load" sentence quotes data/grading/repeat_grading_cpu.json (scripts/repeat_grading.py)."""

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_quotes_the_repeat_grading_record():
    rec = json.loads((REPO / "data" / "grading" / "repeat_grading_cpu.json").read_text())
    labs = {r["lab"]: r for r in rec["labs"]}
    assert sorted(labs) == sorted(p.name for p in (REPO / "labs" / "source").iterdir() if p.is_dir())
    for r in labs.values():
        assert len(r["runs"]) == r["gradings"] == 20
        assert r["full_marks"] == sum(g["full_marks"] for g in r["runs"])  # the count is the runs', not typed
        assert all(g["score"] == g["max"] > 0 for g in r["runs"] if g["full_marks"])
    text = " ".join((REPO / "README.md").read_text().split())
    assert f"20 of 20 full marks for each of Labs 1-{len(labs)}" in text
    assert all(r["full_marks"] == 20 for r in labs.values())
    medians = [float(x) for x in re.findall(r"(\d+) s \(Lab \d\)", text)]
    assert medians == [round(labs[name]["wall_min_median_max"]["value"][1]) for name in sorted(labs)]
    loads = [x for r in labs.values() for x in r["load_average_1min_min_median_max"]]
    assert f"1-minute load average {round(min(loads))} to {round(max(loads))}" in text
