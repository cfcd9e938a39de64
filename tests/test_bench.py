"""The timing harness, the counted work of the roofline-check kernels, and the JSON it writes.

Statistics are checked with a fake clock, so nothing here depends on how fast this machine is.
"""

from __future__ import annotations

import itertools
import json

import pytest

from mlsys import Q_
from mlsys.bench import micro, roofcheck, roofs, timing
from mlsys.bench import records as ms
from mlsys.bench.timing import CheckFailed, Timing, choose_repeats, time_cpu, time_fn
from mlsys.roofline import Roof


def fake_clock(durations):
    """A timer whose consecutive (start, end) pairs are ``durations`` apart."""
    ticks, now = [], 100.0
    for d in durations:
        ticks += [now, now + d]
        now += d + 1.0
    it = iter(ticks)
    return lambda: next(it)


def test_statistics_from_a_fake_clock():
    calls = itertools.count()
    t = time_cpu(lambda: next(calls), what="noop", repeats=5, warmup=2, timer=fake_clock([3, 1, 2, 5, 4]))
    # sorted 1, 2, 3, 4, 5: min 1, median 3, max 5
    assert (t.min, t.median, t.max) == (1, 3, 5)
    assert t.repeats == 5 and t.warmup == 2
    assert next(calls) == 7  # 2 warm-up + 5 timed calls
    assert t.method.startswith("time.perf_counter")


def test_even_count_median_and_per_call():
    t = time_cpu(lambda: None, what="loop", repeats=4, warmup=0, per_call=10, timer=fake_clock([10, 40, 20, 30]))
    # median of 10, 20, 30, 40 is (20 + 30) / 2 = 25; per operation 25 / 10 = 2.5
    assert t.median == pytest.approx(2.5)
    assert t.min == pytest.approx(1.0) and t.max == pytest.approx(4.0)
    j = t.to_json()
    assert j["unit"] == "s" and j["per_call"] == 10 and j["median"] == pytest.approx(2.5)


def test_budget_grows_the_repeats():
    # first call takes 0.1 s; a 1 s budget fits 10 calls, more than the 3 asked for
    t = time_cpu(lambda: None, what="x", repeats=3, warmup=0, budget_s=1.0, timer=fake_clock([0.1] * 20))
    assert t.repeats == 10


def test_budget_counts_the_flush_before_each_call(monkeypatch):
    """A CPU flush (here one that sleeps 10 ms) before a call timed at 1 ms: a 0.1 s budget holds at most
    0.1 / (0.010 + 0.001) = 9 iterations, not the 0.1 / 0.001 = 100 the call's time alone would allow."""
    import time

    from mlsys.bench import timing

    class SlowFlush:
        nbytes = 1

        def __call__(self) -> None:
            time.sleep(0.010)

    monkeypatch.setattr(timing, "_CPU_FLUSHER", [SlowFlush()])
    t = time_cpu(lambda: None, what="x", repeats=3, warmup=0, flush=True, budget_s=0.1,
                 timer=fake_clock([0.001] * 200))
    assert 3 <= t.repeats <= 9


def test_choose_repeats_clamps():
    assert choose_repeats(0.01, 1.0, 5, 50) == 50   # 100 fit, capped at 50
    assert choose_repeats(0.5, 1.0, 5, 50) == 5     # 2 fit, raised to 5
    assert choose_repeats(0.05, 1.0, 5, 50) == 20   # 1 / 0.05 = 20
    with pytest.raises(ValueError, match="min_repeats"):
        choose_repeats(0.1, 1.0, 0, 5)


def test_check_runs_after_timing_and_fails_loudly():
    seen = []
    time_cpu(lambda: 42, what="x", repeats=2, warmup=0, check=seen.append, timer=fake_clock([1, 1]))
    assert seen == [42]
    with pytest.raises(CheckFailed, match="wrong"):
        time_cpu(lambda: 41, what="answer", repeats=2, warmup=0, check=lambda r: r == 42,
                 timer=fake_clock([1, 1]))


def test_bad_arguments():
    with pytest.raises(ValueError, match="repeats"):
        time_cpu(lambda: None, what="x", repeats=0)
    with pytest.raises(ValueError, match="at least one"):
        Timing("x", "m", (), 0, "none")
    with pytest.raises(ValueError, match="non-negative"):
        Timing("x", "m", (1.0, -1.0), 0, "none")
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        time_fn(lambda: None, "tpu", what="x")


def test_cpu_flush_is_recorded():
    t = time_fn(lambda: None, "cpu", what="x", repeats=2, warmup=0)
    # the flush buffer is at least 64 MiB = 67108864 bytes
    nbytes = int(t.flush.split("writing ")[1].split(" ")[0])
    assert nbytes >= 67108864 and nbytes >= 2 * timing.cpu_cache_bytes()
    assert time_fn(lambda: None, "cpu", what="x", repeats=2, warmup=0, flush_l2=False).flush.startswith("none")


def test_gpu_sizes_are_larger_than_the_l2():
    s = micro.sizes_for("cuda")
    # 2^28 fp32 elements = 1 GiB per buffer, 20x a 50 MB L2; 8192^3 matmuls
    assert s.stream_numel * 4 == 2**30 and s.matmul_n == 8192


# ---------------------------------------------------------------- counted work of the check kernels


def test_kernel_counts_by_hand():
    k = roofcheck.elementwise_add(1024, "bf16")
    assert (k.flops, k.nbytes) == (1024, 3 * 1024 * 2)          # two reads, one write, 2 bytes each
    k = roofcheck.reduction_sum(1024, "fp32")
    assert (k.flops, k.nbytes) == (1023, 1025 * 4)              # 1023 adds; 1024 read + 1 written
    k = roofcheck.layernorm(4, 8, "fp32")
    assert (k.flops, k.nbytes) == (8 * 32, (2 * 32 + 2 * 8) * 4)  # x in, y out, weight and bias
    k = roofcheck.softmax(2, 4, "bf16")
    assert (k.flops, k.nbytes) == (5 * 8, 2 * 8 * 2)
    k = roofcheck.matmul(2, 3, 4, "fp32")
    assert (k.flops, k.nbytes) == (2 * 2 * 3 * 4, (2 * 4 + 4 * 3 + 2 * 3) * 4)


def test_recorded_layer_counts_are_the_layer_models():
    """The recorded roofline checks counted LayerNorm and softmax as mlsys.layers does (one formula)."""
    from mlsys import layers
    from mlsys.bench import records

    seen = 0
    for slug in records.available():
        for k in records.load(slug).data.get("roofline_check", {}).get("kernels", []):
            model = {"layernorm": layers.layer_norm, "softmax": layers.softmax}.get(k["kernel"].split()[0])
            if model is None:
                continue
            cost = model(*k["shape"], k["dtype"])
            assert k["flops"]["value"] == cost.flops.to("FLOP").m and k["bytes"]["value"] == cost.bytes.to("byte").m
            seen += 1
    assert seen >= 2


def test_check_kernels_span_the_ridge():
    for device in ("cpu", "cuda"):
        _, ks = roofcheck.kernels_for(device)
        intensities = [k.flops / k.nbytes for k in ks]
        # a CPU ridge point is a few FLOP/byte, an H100 bf16 one about 300
        assert min(intensities) < 1 and max(intensities) > 100, device


def test_prediction_and_overhead_model():
    roof = Roof(Q_(1e12, "FLOP/s"), Q_(1e11, "byte/s"))
    big = roofcheck.elementwise_add(2**20, "fp32")
    p = roofcheck.predict(big, roof, 5e-6)
    # bytes 12 * 2^20 = 12582912 at 1e11 byte/s -> 1.2582912e-4 s; FLOPs 2^20 / 1e12 = 1.05e-6 s
    assert p["predicted"]["value"] == pytest.approx(1.2582912e-4)
    assert p["bound"] == "memory" and not p["launch_dominated"]
    assert p["predicted_with_overhead"]["value"] == pytest.approx(1.2582912e-4 + 5e-6)
    tiny = roofcheck.elementwise_add(16, "fp32")
    p = roofcheck.predict(tiny, roof, 2e-6)
    # 192 bytes -> 1.92e-9 s, far below a 2 us fixed cost per kernel
    assert p["launch_dominated"]
    assert p["predicted_with_overhead"]["value"] == pytest.approx(2e-6 + 1.92e-9)
    mm = roofcheck.matmul(1024, 1024, 1024, "bf16")
    p = roofcheck.predict(mm, roof, 2e-6)
    # 2 * 2^30 FLOP / 1e12 = 2.147e-3 s > 6291456 byte / 1e11 = 6.3e-5 s
    assert p["bound"] == "compute" and p["predicted"]["value"] == pytest.approx(2 * 2**30 / 1e12)


def test_fixed_cost_preference():
    figs = {"launch_eager": {"value": 8e-6}, "launch_graph": {"value": 1e-6}, "kernel_latency": {"value": 5e-6}}
    assert roofcheck.fixed_cost(figs, "cuda")[0] == 5e-6
    del figs["kernel_latency"]
    assert roofcheck.fixed_cost(figs, "cuda")[0] == 1e-6
    assert roofcheck.fixed_cost(figs, "cpu")[0] == 8e-6


@pytest.mark.slow  # times every roofline-check kernel: ~3 s of CPU
def test_run_check_on_cpu_gives_schema_valid_rows():
    roof = Roof(Q_(1e11, "FLOP/s"), Q_(1e10, "byte/s"))
    ks = [roofcheck.elementwise_add(256, "fp32"), roofcheck.softmax(4, 64, "fp32"),
          roofcheck.layernorm(4, 64, "fp32"), roofcheck.reduction_sum(256, "fp32"),
          roofcheck.matmul(8, 8, 8, "fp32")]
    block = roofcheck.run_check("cpu", roof, "fp32", ks, 1e-6, "test", 0.001, 2)
    assert [r["kernel"] for r in block["kernels"]] == [k.name for k in ks]
    for i, row in enumerate(block["kernels"]):
        ms._kernel(row, f"kernels[{i}]")
        assert row["ratio"] == pytest.approx(row["predicted"]["value"] / row["measured"]["median"])


def test_microbenchmarks_on_cpu_and_skips():
    s = micro.Sizes(2**12, 32, 0, 5, 0.001, 2)
    fig = micro.copy_bandwidth("cpu", s)
    assert fig["unit"] == "byte/s" and fig["value"] > 0
    # bytes = read + written = 2 * 4 * 4096; value * median time gives them back
    assert fig["value"] * fig["timing"]["median"] == pytest.approx(2 * 4 * 4096)
    fig = micro.matmul_throughput("cpu", s, "fp32")
    assert fig["value"] * fig["timing"]["median"] == pytest.approx(2 * 32**3)
    for name in ("matmul_tf32", "matmul_fp8", "launch_graph", "h2d_pinned"):
        with pytest.raises(micro.Skip):
            micro.MICROBENCHMARKS[name]("cpu", s)


def test_output_path(tmp_path):
    assert roofs.output_path(str(tmp_path) + "/", "dev") == tmp_path / "dev" / "roofs.json"
    assert roofs.output_path(str(tmp_path), "dev") == tmp_path / "dev" / "roofs.json"  # an existing directory
    assert roofs.output_path(str(tmp_path / "x.json"), "dev") == tmp_path / "x.json"
    assert roofs.output_path(None, "dev") == ms.path_for("dev")
    with pytest.raises(ValueError, match=".json"):
        roofs.output_path(str(tmp_path / "x.txt"), "dev")


def test_written_file_round_trips(tmp_path):
    from test_measurements import good

    p = tmp_path / "g.json"
    p.write_text(json.dumps(good()))
    text = roofs.summary(ms.load(p))
    assert "copy_bandwidth" in text and "of datasheet" in text


def test_matmul_records_burst_and_sustained_when_asked():
    """With sustain_s > 0 the matmul figure carries burst vs sustained from mlsys.bench.sustained:
    throughput = 2 n^3 / time, slowdown = sustained time / burst time (worked out here), no clocks on a CPU."""
    s = micro.Sizes(2**12, 48, 0, 5, 0.001, 2, 0.05)
    fig = micro.matmul_throughput("cpu", s, "fp32")
    ps = fig["power_state"]
    flops = 2 * 48**3
    for key in ("burst", "sustained"):
        t = ps[key]["time"]["value"]
        assert ps[key]["throughput"]["unit"] == "TFLOP/s"
        assert ps[key]["throughput"]["value"] == pytest.approx(flops / t / 1e12)
    assert ps["slowdown"]["value"] == pytest.approx(ps["sustained"]["time"]["value"] / ps["burst"]["time"]["value"])
    assert ps["repeats"] >= 40 and "clocks" not in ps and "series" not in ps
    assert "no clock readings" in ps["method"]
    assert "power_state" not in micro.matmul_throughput("cpu", micro.Sizes(2**12, 32, 0, 5, 0.001, 2), "fp32")


def test_time_interleaved_alternates_the_callables_round_by_round():
    """Every round times each callable once, in the given order, after the warm-up calls of each."""
    from mlsys.bench.timing import time_interleaved

    calls: list[str] = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    timings = time_interleaved(fns, "cpu", what="order", repeats=3, warmup=2)
    assert calls == ["a", "a", "b", "b"] + ["a", "b"] * 3
    assert set(timings) == {"a", "b"} and all(t.repeats == 3 and t.warmup == 2 for t in timings.values())
    assert "interleaved" in timings["a"].method
    with pytest.raises(ValueError, match="device must be"):
        time_interleaved(fns, "tpu", what="bad", repeats=1, warmup=0)


def test_spin_up_runs_for_the_time_it_is_given():
    import time

    from mlsys.bench.timing import spin_up

    t0 = time.perf_counter()
    n = spin_up(lambda: None, 0.05)
    assert time.perf_counter() - t0 >= 0.05 and n >= 1


def test_relative_spread_and_a_drop_beyond_it_by_hand():
    from mlsys.bench.timing import Timing, drop_exceeds_spread, relative_spread

    # repeats 1.0, 1.1, 1.3 ms: (1.3 - 1.0) / 1.1 = 0.2727...
    assert relative_spread({"min": 1.0e-3, "median": 1.1e-3, "max": 1.3e-3}) == pytest.approx(0.3 / 1.1)
    timing = Timing(what="t", method="m", times=(1.3e-3, 1.0e-3, 1.1e-3), warmup=0, flush="none")
    assert timing.spread == pytest.approx(0.3 / 1.1)
    # 100 -> 90 TFLOP/s is a 10% drop: beyond a 5% spread, not beyond a 12% one
    assert drop_exceeds_spread(100.0, 90.0, 0.05) and not drop_exceeds_spread(100.0, 90.0, 0.12)
    with pytest.raises(ValueError, match="min <= median <= max"):
        relative_spread({"min": 2.0, "median": 1.0, "max": 3.0})


# --- the L2 flush: read by default, write kept for the side-by-side (review part2.md R3) ---

def test_default_flush_is_the_read_sweep():
    # the review measured +20% on a sub-L2 GEMV after a write-flush: the default must be the read one
    assert timing.DEFAULT_FLUSH_MODE == "read"
    assert set(timing.FLUSH_MODES) == {"read", "write"}
    import inspect
    for fn in (timing.time_cuda, timing.time_interleaved):
        assert inspect.signature(fn).parameters["flush_mode"].default == "read"


def test_read_flush_reads_and_does_not_write_its_buffer():
    import torch
    f = timing.L2Flusher(4 * 1000, "cpu", mode="read")
    f.buffer.copy_(torch.arange(1000, dtype=torch.float32))  # 0 + 1 + ... + 999 = 499500
    before_version, before = f.buffer._version, f.buffer.clone()
    f()
    assert f.buffer._version == before_version          # torch counts every in-place write
    assert torch.equal(f.buffer, before)
    assert float(f.sink) == 999 * 1000 / 2                 # it did read every element


def test_write_flush_writes_its_buffer():
    import torch
    f = timing.L2Flusher(4 * 1000, "cpu", mode="write")
    f.buffer.fill_(7.0)
    v = f.buffer._version
    f()
    assert f.buffer._version > v and torch.count_nonzero(f.buffer) == 0


def test_flush_mode_is_checked_and_recorded():
    with pytest.raises(ValueError, match="read"):
        timing.L2Flusher(4096, "cpu", mode="sweep")
    with pytest.raises(ValueError, match="flush_mode"):
        time_fn(lambda: None, "cpu", what="x", flush_mode="clean")
    t = Timing("x", "m", (1.0,), 0, "L2 flushed ... by reading", flush_mode="read")
    assert t.to_json()["flush_mode"] == "read"
    assert Timing("x", "m", (1.0,), 0, "none").to_json()["flush_mode"] == "none"
    with pytest.raises(ValueError, match="flush_mode"):
        Timing("x", "m", (1.0,), 0, "none", flush_mode="zero")
    assert "reading 4096 bytes" in timing.L2Flusher(4096, "cpu", "read").describe()
    assert "writing 4096 bytes" in timing.L2Flusher(4096, "cpu", "write").describe()
    cpu = time_fn(lambda: None, "cpu", what="x", repeats=1, warmup=0)
    assert cpu.to_json()["flush_mode"] == "cpu-write"


def test_experiment_record_names_its_flush(monkeypatch):
    import types

    from mlsys.bench import experiment
    mod = types.ModuleType("fake_experiment")
    mod.run = lambda ctx: {"x": {"value": 1.0, "unit": "s", "method": "none"}}
    fake = experiment.Experiment("fake", "a stub", ("chapters/06_roofline",), "any", mod)
    monkeypatch.setattr(experiment, "get", lambda name: fake)
    rec = experiment.run("fake", quick=True, device="cpu")
    assert rec["l2_flush"] == "none"  # a CPU run clears no L2


def test_flush_modes_side_by_side_refuses_unknown_modes():
    with pytest.raises(ValueError, match="modes"):
        timing.time_flush_modes(lambda: None, what="x", modes=("read", "dirty"))
    from mlsys.bench import experiment
    exp = experiment.get("flush_bias")
    assert exp.needs == "cuda" and exp.module.LAYERS[0] == "linear_t1"  # the GEMV the review measured
