"""The recorded GPU runs of the verdict process (tests/gpu_runs/verdict_*.json) hold what "done" asks of a GPU grader.

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
GPU_EXPECTED = {name: want["gpu"]["performance_score"] for name, want in EXPECTED.items()
                if "performance_score" in want.get("gpu", {})}
"""Rows scored otherwise on a GPU (expected.json's ``gpu`` entries, with why): ``library_override`` re-registers
aten::mul for the CPU dispatch key, so on a GPU its ``double`` is honest CUDA work and earns its share."""


def _expected(name: str) -> float | None:
    return GPU_EXPECTED.get(name, EXPECTED.get(name, {}).get("performance_score"))


DEVICES = {"nvidia-h200": "NVIDIA H200", "nvidia-h100": "NVIDIA H100 80GB HBM3"}
"""The devices runs were recorded on (file name -> the name in the run's provenance). Runs are numbered across
devices: runs 1-9 on one H200 (2026-11-25/26), runs 10-12 on one H100 of a two-GPU machine (2026-11-27), the
first runs of the replayed timed rounds (mlsys.grader.clean.replay), runs 13 and 17 on one H100, runs 14-16 on one H200
(2026-11-27/28)."""

KNOWN_MISSES: dict[tuple[str, int, str], str] = {}
"""Instructor gradings below full credit in the judged run, each with what it was: stated here so that the test
keeps every other grading to full credit and a new miss still fails (issue 25 stays open while any is listed).
Runs 11 and 12 missed once each, on Lab 3's element-wise kernel (the first case of the verdict process, its replayed
rounds slowed while torch.compile's worker pool started in the learner's processes, credit 0.79 and 0.73); run 13,
with the learner's processes stopped through replayed rounds (3691073), gave both Lab 3 kernels 10 of 10."""


def _runs() -> list[tuple[int, dict]]:
    out = []
    for p in RUNS.glob("verdict_nvidia-*_run*.json"):
        m = re.fullmatch(r"verdict_(nvidia-h\d00)_run(\d+)\.json", p.name)
        if m:
            run = json.loads(p.read_text(encoding="utf-8"))
            run["_device_file"] = m.group(1)
            out.append((int(m.group(2)), run))
    numbers = [n for n, _ in out]
    assert len(numbers) == len(set(numbers)), f"two recorded runs share a number: {sorted(numbers)}"
    return sorted(out, key=lambda x: x[0])


def _newest(pred) -> tuple[int, dict]:  # noqa: ANN001
    found = [(n, r) for n, r in _runs() if pred(r)]
    assert found, "no recorded GPU run holds this step"
    return found[-1]


def test_records_name_their_device_date_and_software():
    for n, r in _runs():
        assert r["provenance"]["device"]["name"] == DEVICES[r["_device_file"]], n
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
    ("lab5_attention", ("perf_attention", "perf_attention_causal"), 10),
])
def test_newest_repeated_gradings_give_the_instructor_full_credit_every_time(lab, grade_ids, gradings):
    def graded_enough(r: dict) -> bool:  # the newest run that graded this lab the number of times judged
        verdicts = r["steps"].get("repeat", {}).get(lab, {}).get("verdicts") or {}
        return all(sum(g.rsplit("__", 1)[0] == gid for g in verdicts) >= gradings for gid in grade_ids)

    n, run = _newest(graded_enough)
    verdicts = run["steps"]["repeat"][lab]["verdicts"]
    for gid in grade_ids:
        got = [v for g, v in verdicts.items() if g.rsplit("__", 1)[0] == gid]
        assert len(got) >= gradings, (n, gid, len(got))
        short = [(g, v["score"], v["reason"]) for g, v in verdicts.items() if g.rsplit("__", 1)[0] == gid
                 and (v["score"] is None or v["score"] < 0.98 * v["points"]) and (lab, n, g) not in KNOWN_MISSES]
        assert not short, (n, gid, short)
    listed = [g for (lb, m, g) in KNOWN_MISSES if lb == lab and m == n]
    assert all(verdicts[g]["score"] < 0.98 * verdicts[g]["points"] for g in listed), (n, listed)  # each is a real miss


def test_lab4_ring_on_two_nccl_ranks_refuses_every_attack_and_credits_honest_work():
    """Lab 4's perf_ring through the verdict process on two H100s (NCCL, 2026-11-27): lab4 run 1 (the
    instructor and four cases) and run 11's lab4 step (the three cases run 1's budget left out). Every attack of
    tests/bad_submissions/lab4_perf earns 0 for the reason expected.json names; the instructor's ring and the
    two honest cases earn their share of NCCL's all-reduce."""
    first = json.loads((RUNS / "verdict_lab4_nccl_nvidia-h100-x2_run1.json").read_text())["steps"]["lab4"]
    later = json.loads((RUNS / "verdict_nvidia-h100_run11.json").read_text())["steps"]["lab4"]
    rows = {**{k: v for k, v in first["corpus"].items() if "verdict" in v and v["verdict"].get("score") is not None},
            **later["corpus"]}
    want = json.loads((Path(__file__).resolve().parent / "bad_submissions" / "lab4_perf" / "expected.json").read_text())
    assert set(rows) == set(want)
    for name, w in want.items():
        v = rows[name]["verdict"]
        if w["performance_score"] == 0:
            assert v["score"] == 0.0 and w["reason"].split(":")[0] in v["reason"], (name, v)
        else:
            assert v["score"] == 2.0 and v["reason"] == "" and "verdict clock on cuda" in v["line"], (name, v)
    ring = first["instructor"]["verdicts"]["perf_ring__01"]
    assert ring["score"] == 2.0 and "share 0.748" in ring["line"] and "link floor" in ring["line"], ring


def test_lab2_grading_time_is_within_1_3x_of_the_old_in_process_timer():
    """Issue 25: grading a Lab 2 submission on a GPU takes at most 1.3x the old in-process timer's time, side by
    side (each ``time`` step grades the instructor's cells with the verdict process, then with the module of
    commit 4203854 on its own spec). The first step of a run compiles every kernel (cold caches, paid by the new
    process only: the old one runs second), so the warm steps after it are the ones judged: every warm pair of
    every run since the answer cells overlap the workers' start-up (f725e23: runs 13, 16 and 17), on both GPUs.
    Run 13 (H100): 1.24x and 1.18x; run 16 (H200): 1.14x and 1.31x; run 17 (H100): 1.25x and 0.98x. Their median
    is held to 1.3x and each pair to 1.35x (the old module's own warm time varied 16.3-21.4 s between steps)."""
    ratios = []
    for n, run in _runs():
        steps = [run["steps"][k] for k in sorted(k for k in run["steps"] if k.startswith("time"))]
        if n < 13 or len(steps) < 3:
            continue
        for step in steps:
            assert all(v["score"] == v["points"] for v in step["new"]["verdicts"].values()), (n, step["new"]["verdicts"])
        ratios += [(n, s["new"]["wall_s"] / s["old"]["wall_s"]) for s in steps[1:]]
    assert {run["_device_file"] for n, run in _runs() if n in {m for m, _ in ratios}} == set(DEVICES), ratios
    values = sorted(r for _, r in ratios)
    median = (values[(len(values) - 1) // 2] + values[len(values) // 2]) / 2
    assert median <= 1.3 and values[-1] <= 1.35, ratios


def test_instructor_launchers_dispatch_only_what_a_kernel_exercise_allows_on_a_gpu():
    """Labs 2, 3 and 5's kernel exercises are checked with grading.FORBIDDEN_TORCH_OPS: a launcher may dispatch only
    allocations, views and copies, and no matmul by any name. A GPU takes code paths a CPU does not (TMA descriptors,
    persistent grids), so tests/gpu_runs/launcher_ops.py ran every instructor launcher on an H200 under the course's
    dispatch recorder: each op it recorded is judged here by today's patterns (not by the run's own verdict)."""
    import fnmatch

    from mlsys.labkit import grading

    run = json.loads((RUNS / "launcher_ops_nvidia-h200.json").read_text(encoding="utf-8"))
    assert run["provenance"]["device"]["name"] == DEVICES["nvidia-h200"]
    assert {"torch", "triton", "driver"} <= set(run["provenance"]["software"])
    judged = 0
    for lab, entry in run["labs"].items():
        for name, got in entry.items():
            if name == "cell_errors":
                continue
            assert got["ops"] and not got["errors"], (lab, name, got)  # it ran, and something was recorded
            for op in got["ops"]:
                assert not any(fnmatch.fnmatchcase(op, p) for p in grading.MATMUL_OPS), (lab, name, op)
                assert any(fnmatch.fnmatchcase(op, p) for p in grading._ALLOWED_OPS), (lab, name, op)
            judged += 1
    assert judged == 8  # Lab 2's add, naive, tiled, grouped and TMA launchers; Lab 3's two; Lab 5's attention


def test_lab4_data_parallel_check_forks_its_ranks_after_dynamo_on_a_gpu_machine():
    """checks.worker_dp_runs imports Dynamo once before forking Lab 4's gloo ranks (39.5 s to 3.2 s of CI per graded
    notebook). On a GPU machine that import must neither initialise CUDA nor start a thread (a forked rank could
    then no longer use either), and the check must pass the instructor's step with CUDA untouched and after a CUDA
    operation in the learner's process (tests/gpu_runs/lab4_dynamo_fork.py on an H200)."""
    run = json.loads((RUNS / "lab4_dynamo_fork_nvidia-h200.json").read_text(encoding="utf-8"))
    assert run["provenance"]["device"]["name"] == DEVICES["nvidia-h200"] and run["cuda_available"]
    assert not run["cuda_initialized_before"] and not run["cuda_initialized_after_dynamo"]
    assert run["threads_after_dynamo"] == run["threads_before"]
    assert run["cuda not initialised"]["ok"] and run["after a CUDA op in the parent"]["ok"], run


def test_sandboxed_verdict_on_a_gpu_credits_honest_work_and_binds_one_gpu():
    """Issue 48's trust boundaries on one H200 (scripts/gpu/grader_boundaries.py, 2026-12-02): the slot's sandbox
    sees its GPU only and runs a kernel; the verdict with the learner's workers in a sandbox of their own gives
    the instructor answers of Labs 2, 3 and 5 full credit; the setsid and cache attacks leave the baseline's
    rounds where the honest run's are (their credit cannot show it: an honest `double` already earns 1)."""
    run = json.loads((RUNS / "grader_boundaries_nvidia-h200_2026-12-02.json").read_text(encoding="utf-8"))
    assert run["device"] == "NVIDIA H200" and {"torch", "triton", "driver"} <= set(run["software"])
    nodes = run["steps"]["nodes"]
    assert nodes["ok"] and nodes["seen"]["count"] == 1 and nodes["seen"]["sum"] == float(sum(range(1 << 20)) * 2)
    assert [n for n in nodes["seen"]["nodes"] if n[len("/dev/nvidia"):].isdigit()] == ["/dev/nvidia0"]
    sandboxed = run["steps"]["sandboxed"]["runs"]
    labs = {r["what"] for r in sandboxed if r["mode"] == "bwrap"}
    assert {"lab2_tiled_matmul", "lab3_fusion", "lab5_attention"} <= labs
    for r in sandboxed:
        assert r["fatal"] is None and r["ended"] == "done", r
        assert all(c["credit"] == 1.0 for c in r["cases"].values()), r
    cases = run["steps"]["verdict"]["cases"]
    honest = max(cases["good"]["evidence"]["baseline_rounds_s"])
    for attack in ("perf_signal_baseline", "perf_poison_caches"):
        assert max(cases[attack]["evidence"]["baseline_rounds_s"]) <= 1.1 * honest, attack  # the baseline was not slowed
        assert all(s > 0.9 for s in cases[attack]["baseline_ran_share"]), attack  # it ran through every round


def test_the_read_sweep_keeps_the_instructors_full_credit_through_the_sandboxed_verdict():
    """Issue 43 item 4 on one H200: with the grader's rounds clearing the L2 by a read sweep, every recorded grading
    of the instructor answers (Labs 2, 3, 5) through the sandboxed verdict earned full credit on every case; Lab 3
    reached ten gradings. The sweep is in the overhead: Lab 3's softmax overhead rounds exceed the 08:33 run's
    (11.0-11.2 ms) by at least the time to read 256 MiB at the H200's 4.8 TB/s datasheet peak, 20 times (1.1 ms)."""
    run = json.loads((RUNS / "sandboxed_solutions_read_flush_nvidia-h200_2026-12-02.json").read_text(encoding="utf-8"))
    assert run["device"] == "NVIDIA H200" and {"torch", "triton", "driver"} <= set(run["software"])
    counts: dict[str, int] = {}
    for r in run["runs"]:
        assert r["mode"] == "bwrap" and r["fatal"] is None and r["ended"] == "done", r
        assert r["cases"] and all(c["credit"] == 1.0 for c in r["cases"].values()), r
        counts[r["what"]] = counts.get(r["what"], 0) + 1
    assert counts["lab3_fusion"] == 10 and counts["lab2_tiled_matmul"] >= 9 and counts["lab5_attention"] >= 6
    before = json.loads((RUNS / "grader_boundaries_nvidia-h200_2026-12-02.json").read_text(encoding="utf-8"))
    old = [r for r in before["steps"]["sandboxed"]["runs"] if r["what"] == "lab3_fusion"][0]
    old_over = min(old["cases"]["perf_softmax"]["overhead_rounds_s"])
    sweep_s = 20 * 256 * 2**20 / 4.8e12
    for r in run["runs"]:
        if r["what"] == "lab3_fusion":
            assert min(r["cases"]["perf_softmax"]["overhead_rounds_s"]) >= old_over + sweep_s, r


def test_the_corpus_through_nbgrader_on_gpus_pays_no_attack_and_refuses_honest_work_only_by_trace_noise():
    """The tiny lab's corpus through ``teach.grade`` (nbgrader in sandboxes) on an H100 (2026-12-02) and an H200
    (2026-12-03): every performance case graded at least once; no case whose attack expected.json (or
    its ``gpu`` entry) scores 0 ever earned a performance point; an honest ``double`` refused only by the trace
    coverage rule (3 of the 14 gradings that timed it before the fix: 41 and 31 us of add traced against 1.3-1.5 ms per call, about 1 ms of it the
    grader's own untraced time on both sides), which is why a refusal is now measured again and the baseline's
    own spread of untraced time counts as noise (tests/test_trusted.py holds that rule to these numbers); in the
    newest run that graded it, each honest case earned its point."""
    import sys

    sys.path.insert(0, str(RUNS.parent / "bad_submissions"))
    from grade_corpus import PERF_CASES, on_device

    rec = json.loads((RUNS / "corpus_nbgrader_nvidia-h100-h200_2026-12-03.json").read_text(encoding="utf-8"))
    runs = rec["runs"]
    assert {r["device"] for r in runs} == {DEVICES["nvidia-h100"], DEVICES["nvidia-h200"]}
    assert all({"torch", "triton", "driver", "nbgrader"} <= set(r["software"]) for r in runs)
    graded = {name for r in runs for name in r["rows"]}
    assert set(PERF_CASES) <= graded | {"perf_signal_baseline"} and "perf_signal_baseline" in graded, set(PERF_CASES) - graded
    newest: dict[str, dict] = {}
    for r in runs:
        for name, row in r["rows"].items():
            want = _expected(name)
            if want == 0:
                assert row["performance_score"] == 0, (r["started"], name, row)
                why = on_device(EXPECTED[name], r["device"]).get("reason", "")
                assert why in row["reason"], (r["started"], name, why, row["reason"])  # refused for its attack
            elif want == 1 and row["performance_score"] != 1:
                assert "the kernel trace accounts for" in row["reason"], (r["started"], name, row)
            newest[name] = row
    honest = [name for name in newest if _expected(name) == 1]
    assert {"good", "perf_signal_baseline", "perf_poison_caches", "library_override"} <= set(honest)
    assert all(newest[name]["performance_score"] == 1 for name in honest), {n: newest[n]["reason"] for n in honest}
    fixed = runs[-1]  # with the fix: calls_library's first rounds were uncovered, measured again, and credited
    assert fixed["evidence"]["calls_library"]["remeasured_for_coverage"] is True
    assert fixed["rows"]["calls_library"]["performance_score"] == 1 and "re-measured" in fixed["rows"]["calls_library"]["line"]


def _corpus_rows_and_full_credit_runs(run: dict) -> dict[str, int]:
    """Check a record's four corpus rows (expected.json's) and that every sandboxed instructor grading in it finished
    at full credit on every case; how many gradings of each lab it holds."""
    assert run["device"] == DEVICES["nvidia-h200"] and {"torch", "triton", "driver", "nbgrader"} <= set(run["software"])
    rows = run["corpus"]["rows"]
    assert set(rows) == {"good", "perf_signal_baseline", "perf_poison_caches", "hidden_library_call"}
    assert run["corpus"]["perf"] == "cuda" and run["corpus"]["sandbox"] is True
    for name, row in rows.items():
        assert row["matches_expected"] and row["performance_score"] == _expected(name), (name, row)
        assert row["correctness_score"] == EXPECTED[name]["correctness_score"], (name, row)
    counts: dict[str, int] = {}
    for r in run["runs"]:
        assert r["mode"] == "bwrap" and r["fatal"] is None and r["ended"] == "done", r
        assert r["cases"] and all(c["credit"] == 1.0 for c in r["cases"].values()), r
        counts[r["what"]] = counts.get(r["what"], 0) + 1
    assert {len(r["cases"]) for r in run["runs"] if r["what"] == "lab5_attention"} == {2}  # plain and causal
    return counts


def test_the_split_grader_on_a_gpu_keeps_the_corpus_rows_and_the_instructors_ten_of_ten():
    """One H200 (2026-12-03), after the cell runner's main was split and the clean workers learned to fork on a CPU:
    four corpus cases through teach.grade's pipeline got expected.json's rows, and the instructor answers of Labs 2 and
    5 earned full credit on every case in ten gradings each through the sandboxed verdict."""
    run = json.loads((RUNS / "grader_after_split_nvidia-h200_2026-12-03.json").read_text(encoding="utf-8"))
    assert _corpus_rows_and_full_credit_runs(run) == {"lab2_tiled_matmul": 10, "lab5_attention": 10}


def test_the_grader_with_forked_commands_on_a_gpu_keeps_its_rows_and_the_instructors_credit():
    """One H200 (2026-12-03, 7dcefea), after nbgrader's commands, the learner's workers (CPU only) and the launcher
    changed how they start: the slot's nodes, the verdict's two attacks, four corpus rows through teach.grade, and
    every instructor grading of Labs 2 and 5 that fit in the session at full credit."""
    run = json.loads((RUNS / "grader_after_forks_nvidia-h200_2026-12-03.json").read_text(encoding="utf-8"))
    assert _corpus_rows_and_full_credit_runs(run) == {"lab2_tiled_matmul": 10, "lab5_attention": 7}
    assert run["nodes"]["ok"] and run["nodes"]["seen"]["count"] == 1
    assert "/dev/nvidia1" not in run["nodes"]["seen"]["nodes"] and "/dev/nvidia0" in run["nodes"]["seen"]["nodes"]
    assert set(run["verdict"]) == {"good", "perf_signal_baseline", "perf_poison_caches"}
    assert all(c["ended"] == "done" and c["credit"] == 1.0 for c in run["verdict"].values()), run["verdict"]
    assert run["launch"]["gloo_three_ranks_failed_of_30"] == 0 and run["launch"]["nccl_one_rank"] == [[1.0, "nccl"]]
