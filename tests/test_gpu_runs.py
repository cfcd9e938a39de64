"""Issue 25's recorded GPU runs (tests/gpu_runs/issue25_trusted_*.json) hold what "done" asks of a GPU grader.

For each step, the newest run that made it is the one judged (a later run re-makes what an earlier one
showed wrong): every hostile corpus case 0 for what it attacked, every honest one its share (expected.json,
worked out by hand from each case), and the instructor solutions full credit in every grading (10 of 10 for
Labs 2 and 3), within 2% of the points each time.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

RUNS = Path(__file__).resolve().parent / "gpu_runs"
EXPECTED = json.loads((Path(__file__).resolve().parent / "bad_submissions" / "expected.json").read_text())
GPU_EXPECTED = {"library_override": 1}
"""Rows whose attack reaches a CPU only: ``library_override`` re-registers aten::mul for the CPU dispatch key,
so on a GPU its ``double`` is honest CUDA work and earns its share (expected.json holds the CPU row, 0)."""


def _expected(name: str) -> float | None:
    return GPU_EXPECTED.get(name, EXPECTED.get(name, {}).get("performance_score"))


def _runs() -> list[tuple[int, dict]]:
    out = []
    for p in RUNS.glob("issue25_trusted_nvidia-h200_run*.json"):
        m = re.fullmatch(r"issue25_trusted_nvidia-h200_run(\d+)\.json", p.name)
        if m:
            out.append((int(m.group(1)), json.loads(p.read_text(encoding="utf-8"))))
    return sorted(out, key=lambda x: x[0])


def _newest(pred) -> tuple[int, dict]:  # noqa: ANN001
    found = [(n, r) for n, r in _runs() if pred(r)]
    assert found, "no recorded GPU run holds this step"
    return found[-1]


def test_records_name_their_device_date_and_software():
    for n, r in _runs():
        assert r["provenance"]["device"]["name"] == "NVIDIA H200", n
        assert r["date"].startswith("2026-11-"), n
        assert {"torch", "triton", "driver"} <= set(r["provenance"]["software"]), n


def test_newest_corpus_run_gives_every_case_its_expected_performance_score():
    n, run = _newest(lambda r: "corpus" in r["steps"] and len(r["steps"]["corpus"]["rows"]) >= 15)
    rows = run["steps"]["corpus"]["rows"]
    assert n >= 6, f"run {n}: the runs before 6 refused honest corpus cases (trace coverage under contention)"
    wrong = {name: (row["verdict"]["score"], _expected(name), row["verdict"]["reason"])
             for name, row in rows.items() if _expected(name) is not None and row["verdict"]["score"] != _expected(name)}
    assert not wrong, f"run {n}: {wrong}"
    hostile = [name for name in rows if _expected(name) == 0]
    assert len(hostile) >= 12, hostile  # every class of the issue: caches, streams, lazy results, libraries, patches


@pytest.mark.parametrize("lab, grade_ids, gradings", [
    ("lab3_fusion", ("perf_fused_elementwise", "perf_softmax"), 10),
    ("lab2_tiled_matmul", ("perf_matmul",), 10),
    ("lab5_attention", ("perf_attention", "perf_attention_causal"), 4),  # run 8: the device time left held four
])
def test_newest_repeated_gradings_give_the_instructor_full_credit_every_time(lab, grade_ids, gradings):
    n, run = _newest(lambda r: lab in r["steps"].get("repeat", {}) and r["steps"]["repeat"][lab].get("verdicts"))
    verdicts = run["steps"]["repeat"][lab]["verdicts"]
    for gid in grade_ids:
        got = [v for g, v in verdicts.items() if g.rsplit("__", 1)[0] == gid]
        assert len(got) >= gradings, (n, gid, len(got))
        short = [(v["score"], v["reason"]) for v in got if v["score"] is None or v["score"] < 0.98 * v["points"]]
        assert not short, (n, gid, short)
