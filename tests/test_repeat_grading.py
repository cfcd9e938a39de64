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


def test_an_honest_lab1_keeps_every_point_with_both_cores_busy():
    """Issue 48's done-when: 20 of 20 honest Lab 1 gradings with both cores of the 2-core grading machine busy
    (two busy loops for the whole run, so the 1-minute load never falls below 2). The run before the bound changed
    lost one point to a peak 20.3x slower than the grader's figure: the bound now in force accepts that ratio and
    still refuses a unit slip of 1000x."""
    from mlsys.labkit.silentchecks import ROOF_SLOWER

    rec = json.loads((REPO / "data" / "grading" / "lab1_busy_cores.json").read_text())
    (lab,) = rec["labs"]
    assert lab["lab"] == "lab1_roofline" and len(lab["runs"]) == 20
    assert all(g["full_marks"] and g["score"] == g["max"] > 0 for g in lab["runs"])
    assert all(g["load_average_1_5_15"][0] >= 2.0 for g in lab["runs"])  # both cores had work beside the grading
    before = json.loads((REPO / "data" / "grading" / "lab1_busy_cores_bound20.json").read_text())["labs"][0]
    lost = [c for g in before["runs"] for c in g.get("lost", [])]
    assert [c["cell"] for c in lost] == ["test_measured_roof"]
    ratio = float(re.search(r"\((0\.\d+) times that\)", lost[0]["output_tail"]).group(1))
    assert 1 / ratio > 20 and 1 / ratio < ROOF_SLOWER < 1000
