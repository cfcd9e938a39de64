"""The Part III experiments' CPU-checkable pieces: the NVML sampler, burst vs sustained, trace gaps, ncu parsing."""

from __future__ import annotations

import time

import pytest

from mlsys.bench import experiment
from mlsys.bench.experiments import ncu_lab2, power_clocks, profiler_trace
from mlsys.bench.nvml import Sample, Sampler, decode_reasons, summarise
from mlsys.bench.records import validate_experiment


def test_experiments_register_with_their_needs():
    cat = experiment.catalogue()
    assert cat["power_clocks"].needs == "cuda"
    assert cat["ncu_lab2"].needs == "cuda"
    assert cat["profiler_trace"].needs == "any"


def test_decode_reasons_names_bits():
    assert decode_reasons(0) == []
    assert decode_reasons(0x4 | 0x20) == ["sw_power_cap", "sw_thermal_slowdown"]
    assert decode_reasons(0x4000) == ["bit0x4000"]
    with pytest.raises(ValueError, match="non-negative"):
        decode_reasons(-1)


def test_sampler_reads_in_the_background_and_marks_times():
    ticks = iter(range(10**6))
    fake_clock = lambda: float(next(ticks))  # noqa: E731 - each call one "second" later

    def reader(t: float) -> Sample:
        return Sample(t, 1500.0, 2600.0, 300.0, 40.0, 0)

    s = Sampler(reader, interval_s=0.001, clock=fake_clock)
    with s:
        time.sleep(0.05)
        s.mark("x")
    assert len(s.samples) >= 2
    ts = [x.t for x in s.samples]
    assert ts == sorted(ts) and ts[0] >= 1.0
    assert s.marks["x"] > ts[0]


def test_sampler_rejects_bad_arguments_and_reports_reader_errors():
    with pytest.raises(ValueError, match="interval_s"):
        Sampler(lambda t: None, interval_s=0)  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError, match="callable"):
        Sampler("nvml")  # type: ignore[arg-type]

    def broken(t: float) -> Sample:
        raise OSError("driver gone")

    s = Sampler(broken, interval_s=0.001).start()
    time.sleep(0.01)
    with pytest.raises(RuntimeError, match="driver gone"):
        s.stop()


def test_summarise_takes_only_the_window():
    samples = [Sample(t=t, sm_clock=clk, memory_clock=2600, power=p, temperature=50.0, reasons=r) for t, clk, p, r in
               [(0.0, 345, 70, 1), (1.0, 1980, 690, 0), (2.0, 1700, 700, 4), (3.0, 1750, 700, 4)]]
    out = summarise(samples, 1.0, 3.0)
    assert out["samples"] == 3
    assert out["sm_clock"]["median"]["value"] == 1750
    assert out["sm_clock"]["min"]["value"] == 1700
    assert out["power"]["max"]["value"] == 700
    assert out["reasons"] == ["sw_power_cap"]
    with pytest.raises(ValueError, match="no samples"):
        summarise(samples, 10, 11)


def test_power_clocks_analysis_on_a_made_up_run():
    # 10 fast repeats (1 ms) then 90 slow ones (1.25 ms): burst 1 ms, sustained 1.25 ms, slowdown 1.25
    times = [1e-3] * 10 + [1.25e-3] * 90
    flops = 2e12  # 2 TFLOP per repeat -> 2000 TFLOP/s burst, 1600 sustained
    samples = [Sample(t=0.01 * i, sm_clock=345.0 if i < 100 else 1980.0, memory_clock=2600.0,
                      power=100.0 if i < 100 else 700.0, temperature=40.0)
               for i in range(130)]
    out = power_clocks.analyse(times, flops, samples, start=1.0, idle_from=0.0, n_bins=10)
    assert out["burst"]["throughput"]["value"] == pytest.approx(2000)
    assert out["sustained"]["throughput"]["value"] == pytest.approx(1600)
    assert out["slowdown"]["value"] == pytest.approx(1.25)
    assert out["run_length"]["value"] == pytest.approx(10e-3 + 90 * 1.25e-3)
    assert out["clocks"]["idle"]["sm_clock"]["median"]["value"] == 345
    assert out["clocks"]["sustained"]["power"]["median"]["value"] == 700
    assert len(out["series"]["t"]) == 10 and out["series"]["t"][-1] < out["run_length"]["value"] + 1e-9
    rec = {"schema": "mlsys-experiment/1", "experiment": "power_clocks", "date": "2026-11-23",
           "device": {"kind": "cuda", "name": "X", "slug": "x"}, "software": {"python": "3", "torch": "2"},
           "quick": False, "shown_in": ["c"], "results": out}
    validate_experiment(rec)
    with pytest.raises(ValueError, match="at least"):
        power_clocks.analyse(times[:20], flops, samples, 1.0, 0.0)


def test_kernel_stats_gaps_and_busy_time():
    # three kernels: [0,10) [15,25) [40,50) us over one step: busy 30, span 50, gaps 5 and 15
    ev = [{"cat": "kernel", "name": "gemm", "ts": 0, "dur": 10}, {"cat": "kernel", "name": "gelu", "ts": 15, "dur": 10},
          {"cat": "kernel", "name": "gemm", "ts": 40, "dur": 10}, {"cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 99}]
    out = profiler_trace.kernel_stats(ev, steps=1)
    assert out["kernels"] == 3 and out["distinct"] == 2
    assert out["busy_per_step"]["value"] == pytest.approx(30e-6)
    assert out["busy_fraction"]["value"] == pytest.approx(0.6)
    assert out["gap_median"]["value"] == pytest.approx(10e-6)
    assert out["gaps_per_step"]["value"] == pytest.approx(20e-6)
    assert out["top"][0]["name"] == "gemm" and out["top"][0]["share"]["value"] == pytest.approx(2 / 3)
    assert profiler_trace.kernel_stats([], steps=1) == {"kernels": 0}


def test_ncu_raw_csv_parsing_and_units():
    text = ('"ID","Kernel Name","gpu__time_duration.sum","sm__warps_active.avg.pct_of_peak_sustained_active"\n'
            '"","","usecond","%"\n"0","matmul_kernel","1,234.5","12.5"\n')
    parsed = ncu_lab2.parse_raw_csv(text)
    assert parsed["gpu__time_duration.sum"] == ("usecond", "1,234.5")
    assert ncu_lab2._quantity(*parsed["gpu__time_duration.sum"]) == {"value": 1234.5, "unit": "us"}
    assert ncu_lab2._quantity(*parsed["sm__warps_active.avg.pct_of_peak_sustained_active"]) == {"value": 0.125,
                                                                                               "unit": ""}
    assert ncu_lab2._quantity("furlong", "3") is None
    with pytest.raises(ValueError, match="header"):
        ncu_lab2.parse_raw_csv('"a"\n')


def test_burst_and_sustained_on_the_cpu_without_clocks():
    import numpy as np

    from mlsys.bench.sustained import burst_and_sustained

    a = np.random.default_rng(0).normal(size=(64, 64))
    out = burst_and_sustained(lambda: a @ a, "cpu", what="64^3 fp64 matmul", flops=2 * 64**3, seconds=0.2,
                              idle_s=0.02, burst=5)
    assert out["repeats"] >= 20 and "clocks" not in out
    assert out["burst"]["throughput"]["unit"] == "TFLOP/s"
    # by definition: slowdown = sustained time / burst time
    assert out["slowdown"]["value"] == pytest.approx(out["sustained"]["time"]["value"] / out["burst"]["time"]["value"])
    with pytest.raises(ValueError, match="flops"):
        burst_and_sustained(lambda: None, "cpu", what="x", flops=0)
    with pytest.raises(ValueError, match="seconds"):
        burst_and_sustained(lambda: None, "cpu", what="x", flops=1, seconds=-1)


def test_a_fast_burst_still_has_clock_readings():
    """Ten 0.6 ms repeats end 6 ms after the start, between two 10 ms NVML readings: the burst window
    widens to 0.2 s, so it holds the readings at 10, 20, ... 200 ms after the start (here at 1980 MHz)."""
    times = [0.6e-3] * 400
    samples = [Sample(t=1.0 + 0.01 * i + 0.0095, sm_clock=1980.0, memory_clock=2600.0, power=500.0,
                      temperature=50.0) for i in range(-50, 60)]
    out = power_clocks.analyse(times, 2e9, samples, start=1.0, idle_from=0.6)
    assert 15 <= out["clocks"]["burst"]["samples"] <= 26
    assert out["clocks"]["burst"]["sm_clock"]["median"]["value"] == 1980


def test_sensor_update_interval_is_the_time_between_changes():
    """Readings every 10 ms whose clock changes at 0.10, 0.20, 0.31 and 0.41 s: the clock sensor
    updates about every 100 ms (median of 0.10, 0.11, 0.10), whatever the sampling interval."""
    from mlsys.bench.nvml import Sample, update_interval

    def clock_at(t):
        return 1980.0 - 15.0 * sum(t >= x - 1e-9 for x in (0.10, 0.20, 0.31, 0.41))

    samples = [Sample(t=i / 100, sm_clock=clock_at(i / 100), memory_clock=2619.0, power=300.0, temperature=40.0)
               for i in range(60)]
    assert update_interval(samples, "sm_clock") == pytest.approx(0.10)
    assert update_interval(samples, "power") is None  # never changed: no interval can be read
    with pytest.raises(ValueError, match="field"):
        update_interval(samples, "t")


def test_clock_from_a_spin_of_known_cycles():
    """100,000 cycles in 50.5 us is 1980 MHz (100e3 / 50.505e-6 s); a bad input says what was expected."""
    from mlsys.bench.clockprobe import clock_from_spin

    assert clock_from_spin(100_000, 100_000 / 1980e6 * 1e3) == pytest.approx(1980.0)
    assert clock_from_spin(200_000, 0.2) == pytest.approx(1000.0)
    with pytest.raises(ValueError, match="cycles"):
        clock_from_spin(0, 1.0)
    with pytest.raises(ValueError, match="elapsed"):
        clock_from_spin(100, 0.0)
