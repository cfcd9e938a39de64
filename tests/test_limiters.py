"""Measured limiters (mlsys.bench.limiters): the ncu CSV read, the limiter rule, and the page check that a
chapter names a kernel's limiter only where a recorded profile of it says so (review part2.md, pattern 1)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlsys.bench import limiters

ROOT = Path(__file__).resolve().parents[1]

# a table in the shape ncu --csv --page raw prints: log lines, a header, a units row, one row per kernel
_CSV = "\n".join([
    "==PROF== Connected to process 123",
    '"ID","Process ID","Kernel Name","' + '","'.join(limiters.metric_names()) + '"',
    '"","","","' + '","'.join("%" for _ in limiters.metric_names()) + '"',
    '"0","123","splitK_gemv","58.0","40.1","30.0","35.5","0","12.0","14.7","12200","12.7","0.3","0.1","1.0",'
    '"0","0.2","0.1","0","0","0"',
    '"1","123","reduce","10.0","9.0","8.0","11.0","0","5.0","20.0","1500","2.0","0.1","0","0.4","0","0","0","0",'
    '"0","0"',
])


def test_the_csv_is_read_kernel_by_kernel():
    rows = limiters.parse_ncu_csv(_CSV)
    assert [r["name"] for r in rows] == ["splitK_gemv", "reduce"]  # the units row and log lines skipped
    m = rows[0]["metrics"]
    assert m[limiters.UNITS["dram"]] == 58.0 and m[limiters.OCCUPANCY] == 14.7 and m[limiters.DURATION] == 12200
    with pytest.raises(ValueError, match="no CSV"):
        limiters.parse_ncu_csv("==PROF== nothing profiled")


def test_the_rule_names_the_busiest_unit_or_latency():
    u = limiters.UNITS
    # the review's H200 LayerNorm: issue slots 76% busy, DRAM 57% -> issue
    ln = {u["dram"]: 56.8, u["l2"]: 40, u["l1"]: 45, u["issue"]: 76, u["tensor"]: 0, u["fp32"]: 30}
    assert limiters.classify(ln) == "issue"
    # the review's decode GEMV main kernel: DRAM 58%, nothing at 60% -> latency (too few bytes in flight)
    gemv = limiters.parse_ncu_csv(_CSV)[0]["metrics"]
    assert limiters.classify(gemv) == "latency"
    # a matmul with its tensor pipe 85% busy
    assert limiters.classify({**ln, u["tensor"]: 85}) == "tensor"
    with pytest.raises(KeyError, match="lacks"):
        limiters.classify({u["dram"]: 90})
    with pytest.raises(ValueError, match="percentage"):
        limiters.classify(ln, busy=0)


def test_a_level_that_carries_drams_bytes_is_not_named_over_dram():
    # kernel_limiters on an H200 (2026-12-02): the streaming add, DRAM 90% and the L2 93% of their peaks: the L2
    # counts the bytes DRAM delivers, so the add is DRAM-bound (ncu's "memory throughput" is the same bytes)
    add = {"dram": 90.26, "l2": 93.31, "l1": 22.96, "issue": 4.85, "tensor": 0.0, "fp32": 2.85}
    assert limiters.classify_units(add) == "dram"
    # the 64x64-tile matmul: the L2 at 91%, DRAM at 17%: tiles re-read through the L2, which is the limiter
    assert limiters.classify_units({**add, "dram": 16.91, "l2": 91.25, "l1": 46.38, "tensor": 40.2}) == "l2"
    # a compute unit busiest beside a busy DRAM stays the limiter (the fused GELU: issue 80%, DRAM 46%)
    assert limiters.classify_units({**add, "dram": 65.0, "l2": 70.0, "issue": 80.41}) == "issue"
    # the decode GEMV at 1 token: the L2 at 60.3%, DRAM at 59.2% (under 60): the L2, by a hair
    assert limiters.classify_units({**add, "dram": 59.23, "l2": 60.33, "l1": 13.19}) == "l2"
    with pytest.raises(KeyError, match="lacks"):
        limiters.classify_units({"dram": 90.0})


def test_a_recorded_case_is_judged_by_todays_rule_not_its_stored_label():
    kernel = {"units": {"dram": 90.26, "l2": 93.31, "l1": 22.96, "issue": 4.85, "tensor": 0.0, "fp32": 2.85},
              "duration": {"value": 1.8e-4}}
    old = {"kernels": [kernel], "limiter": "l2", "busy_threshold": 60.0}  # labelled by the busiest-unit rule
    assert limiters.case_limiter(old) == "dram"
    assert limiters.named_limiter_holds(old, "dram") and not limiters.named_limiter_holds(old, "l2")
    with pytest.raises(KeyError, match="no profiled kernels"):
        limiters.case_limiter({"limiter": "l2"})


def test_a_case_takes_the_limiter_of_its_longest_kernel_and_keeps_the_stalls():
    case = limiters.kernel_limiters(limiters.parse_ncu_csv(_CSV))
    assert case["limiter"] == "latency"  # the 12.2 us GEMV kernel, not the 1.5 us reduction
    top = case["kernels"][0]["top_stalls"]
    assert top[0] == ("long_scoreboard", 12.7)  # the largest of the ten stall ratios in the row
    assert limiters.named_limiter_holds(case, "latency")
    assert not limiters.named_limiter_holds(case, "dram")
    with pytest.raises(ValueError, match="unknown limiter"):
        limiters.named_limiter_holds(case, "memory")
    assert case["kernels"][0]["duration"] == {"value": pytest.approx(12.2e-6), "unit": "s",
                                              "method": "ncu gpu__time_duration.sum"}


def test_a_case_is_a_valid_experiment_record():
    import json

    from mlsys.bench.experiment import EXPERIMENT_SCHEMA
    from mlsys.bench.records import validate_experiment

    case = limiters.kernel_limiters(limiters.parse_ncu_csv(_CSV))
    validate_experiment({"schema": EXPERIMENT_SCHEMA, "experiment": "layer_limiters", "date": "2026-12-02",
                         "device": {"kind": "cuda", "name": "NVIDIA H200", "slug": "nvidia-h200"},
                         "software": {"python": "3.12", "torch": "2.13.0"}, "quick": False,
                         "shown_in": ["chapters/06_roofline"],
                         "results": {"linear_t1": {"limiters": json.loads(json.dumps(case))}}})


def test_ncu_command_profiles_only_the_bracketed_call(monkeypatch):
    argv = limiters.ncu_argv("layer_roofline", "linear_t1", ncu="/opt/ncu")
    assert argv[0] == "/opt/ncu" and "--profile-from-start" in argv and argv[argv.index("--profile-from-start") + 1] == "off"
    assert argv[-3:] == ["mlsys.bench.limiters", "layer_roofline", "linear_t1"]
    monkeypatch.setattr(limiters.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="ncu"):
        limiters.ncu_argv("layer_roofline", "linear_t1")


# --- the page check -----------------------------------------------------------------------------------

_PHRASE = re.compile(r"\b(issue|latency|L2|FP32|DRAM|HBM|bandwidth|memory|compute|tensor)[- ]bound\b"
                     r"|\blimited by (?:the )?(memory|HBM|DRAM|L2|issue|instruction|FP32|tensor|latency)", re.I)
_LABEL = re.compile(r"roofline|ridge|label", re.I)  # "left of the ridge" is a roofline label, not a limiter
# the words a page uses -> the limiter names of mlsys.bench.limiters ("compute" may be any pipe or issue)
_NAMES = {"issue": {"issue"}, "instruction": {"issue"}, "latency": {"latency"}, "l2": {"l2"}, "fp32": {"fp32"},
          "dram": {"dram"}, "hbm": {"dram"}, "bandwidth": {"dram"}, "memory": {"dram"}, "tensor": {"tensor"},
          "compute": {"tensor", "fp32", "issue"}}


def limiter_claims(md: str) -> list[str]:
    """Sentences that say what limits a measured kernel: a limiter phrase in a paragraph or bullet that
    shows a glued figure, and not a statement about the roofline label."""
    md = re.sub(r"^---\n.*?\n---\n", "", md, flags=re.S)
    md = re.sub(r"```.*?```", "", md, flags=re.S)
    blocks = re.split(r"\n\s*\n|\n(?=- )", md)
    return [" ".join(s.split()) for b in blocks if "{glue:text}" in b
            for s in re.split(r"(?<=[.!?])\s+|(?<=\.\*\*)\s+", b) if _PHRASE.search(s) and not _LABEL.search(s)]


def named_limiters(claim: str) -> set[frozenset[str]]:
    """The limiter names a claim uses, each as the set of record names that would make it true."""
    # "is not limited by the memory" rules a limiter out (from a measured scaling, say); it names none
    return {frozenset(_NAMES[(m.group(1) or m.group(2)).lower()]) for m in _PHRASE.finditer(claim)
            if not re.search(r"\bnot\s+(?:\w+\s+)?$", claim[:m.start()])}


def test_the_page_check_catches_an_unprofiled_limiter():
    assert limiter_claims("The GEMV runs at {glue:text}`bw`: it is latency-bound.")
    assert limiter_claims("The fused kernel is limited by HBM bandwidth at {glue:text}`x`.")
    assert limiter_claims("- **Softmax is issue-bound.** It keeps {glue:text}`x` of its slots busy.")
    assert not limiter_claims("It sits left of the ridge at {glue:text}`i` FLOP/byte: memory-bound on the roofline.")
    assert not limiter_claims("A kernel with few threads is latency-bound.")  # a definition, no measured figure
    assert named_limiters("It is issue-bound, then limited by HBM.") == {frozenset({"issue"}), frozenset({"dram"})}
    assert named_limiters("It is issue-bound, not limited by HBM.") == {frozenset({"issue"})}


def checked_limiters(md: str) -> set[str]:
    """The limiter names a page's cells check against a record: ``named_limiter_holds(..., "name")``."""
    return set(re.findall(r"named_limiter_holds\([^()]*(?:\([^()]*\)[^()]*)*,\s*\"(\w+)\"\)", md))


def test_the_page_check_wants_the_named_limiter_checked():
    page = 'x = named_limiter_holds(lim["softmax"]["limiters"], "issue")'
    assert checked_limiters(page) == {"issue"}
    assert not checked_limiters("named_limiter_holds")


PART2 = sorted([*ROOT.glob("chapters/0[6-9]_*.md"), *ROOT.glob("chapters/10*_*.md")])


@pytest.mark.parametrize("path", PART2, ids=[p.stem for p in PART2])
def test_part2_names_a_limiter_only_with_a_recorded_profile(path):
    """Each limiter a page names beside a measured figure is one its cells check against a record (the
    check fails the build when the record shows another)."""
    text = path.read_text(encoding="utf-8")
    checked = checked_limiters(text)
    unchecked = [c for c in limiter_claims(text) if any(not (names & checked) for names in named_limiters(c))]
    assert not unchecked, (
        f"{path.name} names what limits a measured kernel without checking that limiter against a recorded "
        f"profile (mlsys.bench.limiters.named_limiter_holds(case, name) on the layer_limiters record): {unchecked}")


def test_the_roofline_chapter_checks_the_limiters_the_h200_record_shows():
    """The limiter section of the roofline chapter checks each limiter it names, on the record it reads."""
    text = (ROOT / "chapters" / "06_roofline.md").read_text(encoding="utf-8")
    assert {"issue", "latency", "tensor"} <= checked_limiters(text)
    assert 'second("layer_limiters")' in text


def test_split_cases_cuts_ncu_rows_at_the_boundary_kernels():
    rows = [{"name": n} for n in ("add", "mlsys_case_boundary", "sm_a", "sm_b", "mlsys_case_boundary",
                                  "mlsys_case_boundary")]
    # three cases: one kernel, two kernels, none (a case that failed to build still gets its boundary)
    assert limiters.split_cases(rows, "mlsys_case_boundary", 3) == [[{"name": "add"}], [{"name": "sm_a"}, {"name": "sm_b"}],
                                                                    []]
    with pytest.raises(ValueError, match="expected 2 cases"):
        limiters.split_cases(rows, "mlsys_case_boundary", 2)
    with pytest.raises(ValueError, match="found 1 boundaries"):  # kernels after the last boundary: a lost case
        limiters.split_cases(rows[:3], "mlsys_case_boundary", 1)


def test_the_ncu_child_refuses_an_experiment_with_no_profile():
    with pytest.raises(ValueError, match="profile_child"):
        limiters.child("tile_configs", "all")


def _case(t: float, nbytes: int, units: dict, occupancy: float, limiter: str) -> dict:
    units = {u: units.get(u, 0.0) for u in limiters.UNITS}  # units a case does not name were idle
    return {"bytes": nbytes, "time": {"value": t, "unit": "s"},
            "limiters": {"limiter": limiter, "kernels": [
                {"name": "k", "units": units, "occupancy": occupancy, "duration": {"value": t * 0.9}},
                {"name": "tiny", "units": {"dram": 99.0}, "occupancy": 5.0, "duration": {"value": t * 0.01}}]}}


def test_kernel_limiters_summary_by_hand_and_missing_without_a_record():
    from mlsys.bench.experiments import kernel_limiters as kl

    units = {"dram": 88.0, "l2": 40.0, "issue": 20.0}
    data = {"add_cuda": _case(200e-6, 805_306_368, units, 90.0, "dram"), "add_triton": {"failed": "no nvcc"}}
    rows = kl.summary(data, ["add_cuda", "add_triton", "softmax_cuda"], copy_bandwidth=4.0e12)
    # 805,306,368 B in 200 us = 4.03 TB/s, 100.7% of a 4.0 TB/s copy roof; the longest kernel names the unit
    assert rows[0]["bandwidth"] == pytest.approx(4.0265e12, rel=1e-4) and rows[0]["share"] == pytest.approx(1.0066, rel=1e-3)
    assert (rows[0]["time_us"], rows[0]["tb_per_s"]) == (pytest.approx(200.0), pytest.approx(4.0265, rel=1e-4))
    assert (rows[0]["limiter"], rows[0]["busiest"], rows[0]["busiest_pct"], rows[0]["occupancy"]) == ("dram", "dram", 88.0, 90.0)
    assert rows[1] == {"case": "add_triton", "failed": "no nvcc"}
    assert rows[2] == {"case": "softmax_cuda", "failed": "not recorded"}
    timed_only = {"add_cuda": {**data["add_cuda"], "limiters": {"failed": "RuntimeError: ncu failed"}}}
    (row,) = kl.summary(timed_only, ["add_cuda"], 4.0e12)  # a time without a profile keeps its bandwidth
    assert row["share"] == pytest.approx(1.0066, rel=1e-3) and row["limiter"] is None
    assert row["not_profiled"] == "RuntimeError: ncu failed"
    assert kl.summary(None, ["add_cuda"], 4.0e12) is None  # no record: the page shows the figures as missing
    with pytest.raises(ValueError, match="copy_bandwidth"):
        kl.summary(data, ["add_cuda"], 0)


def test_limiter_phrase_names_the_busiest_unit_and_dram_beside_it():
    from mlsys.bench.experiments import kernel_limiters as kl

    units = {"dram": 45.7, "l2": 30.0, "issue": 78.9}
    (row,) = kl.summary({"c": _case(1e-4, 10**8, units, 60.0, "issue")}, ["c"], 4.0e12)
    assert kl.limiter_phrase(row) == "issue-bound: instruction issue at 79% of its peak, DRAM at 46%, occupancy 60%"
    (row,) = kl.summary({"c": _case(1e-4, 10**8, {"dram": 91.0, "l2": 20.0}, 88.0, "dram")}, ["c"], 4.0e12)
    assert kl.limiter_phrase(row) == "dram-bound: DRAM at 91% of its peak, occupancy 88%"
    # the H200's streaming add: DRAM 90%, the L2 93%: DRAM-bound, the L2 named as carrying the same bytes
    (row,) = kl.summary({"c": _case(1e-4, 10**8, {"dram": 90.26, "l2": 93.31}, 84.05, "l2")}, ["c"], 4.0e12)
    assert kl.limiter_phrase(row) == ("dram-bound: DRAM at 90% of its peak, the L2 at 93% (the same bytes, counted "
                                      "again on their way in), occupancy 84%")
    assert kl.limiter_phrase(None) is None
