"""Grading cost: per-submission seconds from the records, and a class's hours under the stated model."""

import math

import pytest

from mlsys.grader import grading_cost as gc


def test_one_grading_is_the_verdict_start_plus_one_repeat_of_the_cases():
    entry = {"phases_s": {"verdict_start": 3.0, "baseline_worker_start": 7.0, "baseline_prepare": 2.0,
                          "learner_cells": 4.0, "learner_cells_own_s": 99.0,  # the learner's own share: not added
                          "case:perf_a__01": 6.0, "case:perf_b__01": 4.0, "case:perf_a__02": 2.0,
                          "case:perf_b__02": 4.0}}
    # start 3 + 7 + 2 + 4 = 16 s; two repeats of two cases: (6 + 4 + 2 + 4) / 2 = 8 s
    assert gc._one_grading(entry) == pytest.approx(24.0)
    assert gc._one_grading({"phases_s": None}) is None


def test_class_cost_follows_the_model():
    costs = [gc.LabCost("a", 60.0, 30.0), gc.LabCost("b", 120.0, None)]
    node = gc.Setting("node", 8)
    r = gc.class_cost(100, costs, node)
    assert r["cpu_h"] == pytest.approx(100 * 180 / 3600) == pytest.approx(5.0)
    assert r["gpu_h"] == pytest.approx(100 * 30 / 3600)
    assert r["wall_h"] == pytest.approx(13 * 210 / 3600)  # ceil(100 / 8) = 13 rounds of 180 + 30 s
    slurm = gc.class_cost(30, costs, gc.Setting("slurm", 32, 3.0))
    assert slurm["wall_h"] == pytest.approx(math.ceil(30 / 32) * (210 + 2 * 3.0) / 3600)
    with pytest.raises(ValueError, match="at least one student"):
        gc.class_cost(0, costs, node)


def test_the_records_give_every_labs_cpu_figure_and_the_gpu_figures_they_hold():
    cpu = gc.cpu_seconds()
    assert all(v is not None and 5 < v < 3600 for v in cpu.values()), cpu
    gpu = gc.gpu_seconds()
    assert gpu["lab1_roofline"] == 0.0  # Lab 1 has no performance tier (no perf.toml): no GPU time
    assert all(10 < gpu[lab] < 600 for lab in ("lab2_tiled_matmul", "lab3_fusion", "lab4_collectives",
                                                "lab5_attention")), gpu
    assert gc.settings()[2].overhead_s == pytest.approx(2.85)  # data/grading/lab1_throughput.json
