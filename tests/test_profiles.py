"""mlsys.profiles on hand-made profiles: every expected value is worked out in the comments."""

from __future__ import annotations

import pytest

from mlsys.profiles import (
    ProfileEvent,
    cause_shares,
    events_from_torch,
    idle_fraction,
    operator_count,
    rank_causes,
    sync_calls,
    union_length,
    window_of,
    work_events,
)


def test_union_length_counts_overlaps_once():
    # [0,10] and [5,15] cover [0,15] = 15; [20,25] adds 5; [21,22] is inside it: 20 in all
    assert union_length([(0, 10), (5, 15), (20, 25), (21, 22)]) == 20
    assert union_length([]) == 0
    with pytest.raises(ValueError, match="end before"):
        union_length([(3, 1)])


def _cpu_step() -> list[ProfileEvent]:
    # a 100 us step on one CPU thread:
    #   [0,10] aten::linear containing aten::addmm [1,9]  (nested: counted once, as linear's 10 us)
    #   [15,20] aten::add (element-wise), [22,24] aten::item (a sync, and an outermost aten op)
    #   [30,50] aten::gelu (element-wise), [60,70] aten::mul (element-wise)
    #   MulBackward0 [80,95] (not aten) containing aten::mul [82,92] (outermost aten: 10 us, element-wise)
    return [ProfileEvent("step", 0, 100), ProfileEvent("aten::linear", 0, 10), ProfileEvent("aten::addmm", 1, 8),
            ProfileEvent("aten::add", 15, 5), ProfileEvent("aten::item", 22, 2), ProfileEvent("aten::_local_scalar_dense", 22.5, 1),
            ProfileEvent("aten::gelu", 30, 20), ProfileEvent("aten::mul", 60, 10), ProfileEvent("MulBackward0", 80, 15),
            ProfileEvent("aten::mul", 82, 10)]


def test_cpu_idle_fraction_is_wall_time_outside_outermost_operators():
    ev = _cpu_step()
    # outermost aten ops: linear 10 + add 5 + item 2 + gelu 20 + mul 10 + mul 10 = 57 us of 100: idle 0.43
    assert [e.name for e in work_events(ev)] == ["aten::linear", "aten::add", "aten::item", "aten::gelu",
                                                 "aten::mul", "aten::mul"]
    assert idle_fraction(ev, window_of(ev, "step")) == pytest.approx(0.43)
    # a window [10, 60] holds add 5 + item 2 + gelu 20 = 27 of 50 us (mul starts at 60): idle 0.46
    assert idle_fraction(ev, (10, 60)) == pytest.approx(0.46)


def test_cpu_cause_shares_and_ranking():
    ev = _cpu_step()
    shares = cause_shares(ev, (0, 100))
    # host overhead = idle 0.43; sync: item [22,24] with _local_scalar_dense inside it = 2 us -> 0.02;
    # element-wise: add 5 + gelu 20 + mul 10 + mul 10 = 45 us -> 0.45 (addmm, inside linear, is no cause)
    assert shares == pytest.approx({"host overhead": 0.43, "synchronisation": 0.02, "element-wise": 0.45})
    assert [c for c, _ in rank_causes(ev, (0, 100))] == ["element-wise", "host overhead", "synchronisation"]
    # counts: six outermost operators start in [0, 100] (linear, add, item, gelu, mul, mul), three in [10, 60]
    # (add, item, gelu); one sync call (_local_scalar_dense [22.5, 23.5] is inside item [22, 24])
    assert operator_count(ev, (0, 100)) == 6 and operator_count(ev, (10, 60)) == 3
    assert sync_calls(ev, (0, 100)) == 1 and sync_calls(ev, (30, 100)) == 0


def test_gpu_profile_uses_kernels_as_work():
    # host: a 1000 us step whose aten ops cover it all, one cudaStreamSynchronize [600, 900];
    # device: kernels [100,200] (gemm), [250,300] (vectorized_elementwise_kernel), [280,320] (elementwise,
    # overlapping on another stream) and [950,1000]: union 100 + 70 + 50 = 220 us -> idle 0.78
    ev = [ProfileEvent("step", 0, 1000), ProfileEvent("aten::linear", 0, 1000), ProfileEvent("cudaStreamSynchronize", 600, 300),
          ProfileEvent("sm90_xmma_gemm_f32", 100, 100, "cuda"), ProfileEvent("vectorized_elementwise_kernel<add>", 250, 50, "cuda"),
          ProfileEvent("elementwise_kernel<gelu>", 280, 40, "cuda"), ProfileEvent("ampere_sgemm", 950, 50, "cuda")]
    assert idle_fraction(ev, (0, 1000)) == pytest.approx(0.78)
    # sync 300/1000 = 0.3; element-wise kernels: union [250, 320] = 70 us -> 0.07
    assert cause_shares(ev, (0, 1000)) == pytest.approx({"host overhead": 0.78, "synchronisation": 0.3,
                                                         "element-wise": 0.07})
    assert [c for c, _ in rank_causes(ev, (0, 1000))] == ["host overhead", "synchronisation", "element-wise"]
    # on a GPU the operators are the kernels: four; one synchronisation
    assert operator_count(ev, (0, 1000)) == 4 and sync_calls(ev, (0, 1000)) == 1


def test_bad_windows_and_missing_regions_are_named():
    with pytest.raises(ValueError, match="t1 > t0"):
        idle_fraction(_cpu_step(), (5, 5))
    with pytest.raises(ValueError, match="record_function"):
        window_of(_cpu_step(), "no such step")
    # an empty step: no work at all, idle 1.0
    assert idle_fraction([], (0, 10)) == 1.0


def test_events_from_a_real_torch_profile():
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("step"):
            y = torch.relu(x) * 2.0
            float(y.sum().item())
    ev = events_from_torch(prof)
    names = {e.name for e in ev}
    assert {"step", "aten::relu", "aten::mul", "aten::item"} <= names
    window = window_of(ev, "step")
    # the ops run inside the region, so some of it is work and some (Python between them) is not
    assert 0.0 < idle_fraction(ev, window) < 1.0
    assert cause_shares(ev, window)["synchronisation"] > 0.0


def test_median_over_steps_and_rank():
    from mlsys.profiles import median_shares, rank, windows_of

    # three 10 us steps; work (aten::add, element-wise) covers 2, 8 and 4 us of them: idle 0.8, 0.2, 0.6
    ev = [ProfileEvent("step", 0, 10), ProfileEvent("aten::add", 0, 2), ProfileEvent("step", 10, 10), ProfileEvent("aten::add", 10, 8),
          ProfileEvent("step", 20, 10), ProfileEvent("aten::add", 20, 4)]
    windows = windows_of(ev, "step")
    assert windows == [(0, 10), (10, 20), (20, 30)]
    # medians: idle of {0.8, 0.2, 0.6} = 0.6; element-wise of {0.2, 0.8, 0.4} = 0.4; sync 0
    assert median_shares(ev, windows) == pytest.approx({"host overhead": 0.6, "synchronisation": 0.0,
                                                        "element-wise": 0.4})
    # two steps: the median is the mean of the middle two: idle (0.8 + 0.2) / 2 = 0.5
    assert median_shares(ev, windows[:2])["host overhead"] == pytest.approx(0.5)
    assert [c for c, _ in rank({"host overhead": 0.1, "synchronisation": 0.1, "element-wise": 0.3})] == [
        "element-wise", "host overhead", "synchronisation"]  # a tie keeps CAUSES' order
    with pytest.raises(ValueError, match="at least one"):
        median_shares(ev, [])
