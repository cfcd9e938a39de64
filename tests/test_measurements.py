"""The measurements file schema: good files load, bad files fail with a message naming the field."""

from __future__ import annotations

import copy
import json

import pytest

from mlsys import Q_
from mlsys.bench import records as ms


def _timing(median: float) -> dict:
    return {"what": "x", "method": "CUDA events around each call", "unit": "s", "min": median * 0.9,
            "median": median, "max": median * 1.2, "repeats": 30, "warmup": 3,
            "flush": "L2 flushed", "per_call": 1}


def _fig(value: float, unit: str, median: float = 1e-3) -> dict:
    return {"value": value, "unit": unit, "method": "bytes / median time", "size": "n", "timing": _timing(median)}


def good() -> dict:
    """A hand-made file for an imaginary GPU: 2 TB/s copy, 500 TFLOP/s bf16."""
    # the one kernel: a 1024^3 bf16 matmul: 2 * 1024^3 = 2147483648 FLOP,
    # 3 * 1024^2 * 2 bytes = 6291456 byte, intensity 2147483648 / 6291456 = 341.33 FLOP/byte
    return {
        "schema": "mlsys-measurements/1",
        "date": "2026-11-21T20:00:00+00:00",
        "device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "slug": "nvidia-h100-80gb-hbm3",
                   "sm_count": 132, "memory": {"value": 85e9, "unit": "byte"}},
        "software": {"python": "3.11.9", "torch": "2.11.0", "cuda": "13.0", "triton": "3.6.0"},
        "figures": {
            "copy_bandwidth": _fig(2.0e12, "byte/s"),
            "read_bandwidth": _fig(2.5e12, "byte/s"),
            "matmul_fp32": _fig(5.0e13, "FLOP/s"),
            "matmul_bf16": _fig(5.0e14, "FLOP/s"),
            "launch_eager": _fig(5e-6, "s"),
        },
        "skipped": {"matmul_fp8": "not supported"},
        "roofline_check": {"dtype": "bf16", "kernels": [{
            "kernel": "matmul 1024x1024x1024", "kind": "matmul", "dtype": "bf16",
            "flops": {"value": 2147483648, "unit": "FLOP"}, "bytes": {"value": 6291456, "unit": "byte"},
            "intensity": {"value": 2147483648 / 6291456, "unit": "FLOP/byte"}, "bound": "compute",
            "predicted": {"value": 4.295e-6, "unit": "s"}, "measured": _timing(8.59e-6),
            "overhead": {"value": 2e-6, "unit": "s"}, "predicted_with_overhead": {"value": 6.295e-6, "unit": "s"},
            "ratio": 0.5, "ratio_with_overhead": 0.733, "launch_dominated": False}]},
    }


def test_device_slug():
    assert ms.device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert ms.device_slug("Intel(R) Xeon(R) CPU @ 2.20GHz") == "intel-xeon-cpu-2-20ghz"
    assert ms.device_slug("AMD EPYC") == "amd-epyc"
    for bad in ("", "  ", "()", None):
        with pytest.raises(ValueError, match="device"):
            ms.device_slug(bad)


def test_good_file_validates_and_gives_quantities():
    m = ms.Measurement(good())
    assert m.name == "NVIDIA H100 80GB HBM3" and m.kind == "cuda" and m.day == "2026-11-21"
    bw = m.figure("copy_bandwidth")
    assert bw.to("TB/s").m == pytest.approx(2.0)
    assert m.figure("launch_eager").to("us").m == pytest.approx(5.0)
    assert m.matmul_dtypes() == ["fp32", "bf16"]
    roof = m.roof("bf16")
    assert roof.peak.to("TFLOP/s").m == pytest.approx(500)
    # ridge point 5e14 / 2e12 = 250 FLOP/byte
    assert roof.ridge_point.to("FLOP/byte").m == pytest.approx(250)
    assert m.roof("bf16", "read_bandwidth").ridge_point.m == pytest.approx(200)  # 5e14 / 2.5e12
    assert m.accelerator().name == "H100-SXM"
    assert m.kernels()[0]["kernel"] == "matmul 1024x1024x1024"


def test_missing_and_unknown_figures_raise_keyerror():
    m = ms.Measurement(good())
    with pytest.raises(KeyError, match="not supported"):
        m.figure("matmul_fp8")
    with pytest.raises(KeyError, match="known figures"):
        m.figure("matmul_int4")
    with pytest.raises(ValueError, match="copy_bandwidth"):
        m.roof("bf16", "h2d_pinned")


def _broken(edit) -> dict:
    d = copy.deepcopy(good())
    edit(d)
    return d


BAD = [
    (lambda d: d.update(schema="mlsys-measurements/0"), r"schema: expected 'mlsys-measurements/1'"),
    (lambda d: d["figures"].pop("copy_bandwidth"), r"missing required figure 'copy_bandwidth'"),
    (lambda d: d["figures"]["copy_bandwidth"].update(unit="FLOP/s"),
     r"figures\.copy_bandwidth\.unit: expected a unit of byte/s"),
    (lambda d: d["figures"]["matmul_bf16"].update(unit="furlongs"), r"not a unit known"),
    (lambda d: d["figures"]["matmul_bf16"].update(value=-1.0), r"matmul_bf16\.value: expected a positive"),
    (lambda d: d["figures"]["matmul_bf16"].update(value="fast"), r"matmul_bf16\.value: expected a number"),
    (lambda d: d["figures"]["copy_bandwidth"]["timing"].update(min=1.0), r"min <= median <= max"),
    (lambda d: d["figures"]["copy_bandwidth"]["timing"].update(unit="ms"), r"seconds"),
    (lambda d: d["figures"]["copy_bandwidth"].pop("method"), r"copy_bandwidth: missing field 'method'"),
    (lambda d: d["figures"].update(matmul_int4=_fig(1.0, "FLOP/s")), r"unknown figure 'matmul_int4'"),
    (lambda d: d["device"].update(slug="h100"), r"device\.slug: expected 'nvidia-h100-80gb-hbm3'"),
    (lambda d: d["device"].update(kind="tpu"), r"device\.kind: expected 'cpu' or 'cuda'"),
    (lambda d: d["device"].pop("sm_count"), r"device: missing field 'sm_count'"),
    (lambda d: d["roofline_check"].update(dtype="fp8"), r"matmul_fp8, which is not among the figures"),
    (lambda d: d["roofline_check"]["kernels"][0]["intensity"].update(value=1.0), r"intensity: expected flops / bytes"),
    (lambda d: d["roofline_check"]["kernels"][0].update(launch_dominated="no"), r"launch_dominated: expected true or false"),
    (lambda d: d["roofline_check"]["kernels"][0].update(bound="io"), r"bound: expected 'memory' or 'compute'"),
    (lambda d: d["roofline_check"]["kernels"][0].pop("ratio"), r"kernels\[0\]: missing field 'ratio'"),
    (lambda d: d.update(skipped=["x"]), r"skipped"),
]


@pytest.mark.parametrize("edit, message", BAD)
def test_bad_files_fail_with_a_clear_message(edit, message):
    with pytest.raises(ms.MeasurementError, match=message):
        ms.validate(_broken(edit), "f.json")


def test_error_names_the_source():
    with pytest.raises(ms.MeasurementError, match=r"^f\.json: expected a JSON object"):
        ms.validate([1, 2], "f.json")


def test_load_from_path_and_bad_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps(good()))
    m = ms.load(p)
    assert m.figure("matmul_bf16") == Q_(5.0e14, "FLOP/s")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ms.MeasurementError, match="not valid JSON"):
        ms.load(bad)
    with pytest.raises(FileNotFoundError, match="available"):
        ms.load("no-such-device")


def test_figure_units_are_the_documented_ones():
    assert ms.FIGURES["copy_bandwidth"] == "byte/s"
    assert ms.FIGURES["matmul_tf32"] == "FLOP/s"
    assert ms.FIGURES["launch_graph"] == "s"
    assert set(ms.REQUIRED_FIGURES) <= set(ms.FIGURES)


@pytest.mark.parametrize("slug", ms.available())
def test_committed_files_validate(slug):
    m = ms.load(slug)
    assert m.slug == slug, f"{slug}.json holds the measurements of {m.slug}"
    assert m.figure("copy_bandwidth").to("byte/s").m > 0


def test_datasheet_fractions_worked_out_by_hand():
    # the device name maps to the H100-SXM entry: 3.35 TB/s and a dense bf16 peak of 989.5 TFLOP/s
    data = ms.Measurement(good()).with_datasheet_fractions()
    copy = data["figures"]["copy_bandwidth"]["datasheet"]
    assert copy["accelerator"] == "H100-SXM"
    assert copy["fraction"] == pytest.approx(2.0e12 / 3.35e12)
    assert data["figures"]["matmul_bf16"]["datasheet"]["fraction"] == pytest.approx(5.0e14 / 989.5e12)
    assert "datasheet" not in data["figures"]["launch_eager"]  # no datasheet figure to compare with


def test_a_wrong_datasheet_fraction_is_rejected():
    data = ms.Measurement(good()).with_datasheet_fractions()
    data["figures"]["copy_bandwidth"]["datasheet"]["fraction"] = 0.99
    with pytest.raises(ms.MeasurementError, match="datasheet.fraction"):
        ms.validate(data)


def test_committed_h100_file_states_its_datasheet_fractions():
    data = ms.load("nvidia-h100-80gb-hbm3").data
    for name in ("copy_bandwidth", "matmul_bf16"):
        ds = data["figures"][name]["datasheet"]
        assert 0 < ds["fraction"] < 1, f"{name}: a measurement above the datasheet needs explaining"


def test_roofs_live_at_slug_slash_roofs_json(tmp_path, monkeypatch):
    monkeypatch.setenv("MLSYS_MEASUREMENTS_DIR", str(tmp_path))
    assert ms.path_for("dev") == tmp_path / "dev" / "roofs.json"
    data = good()
    (tmp_path / data["device"]["slug"]).mkdir()
    (tmp_path / data["device"]["slug"] / "roofs.json").write_text(json.dumps(data))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "divergence.json").write_text("{}")  # an experiment record is not a roofs file
    assert ms.available() == [data["device"]["slug"]]
    assert ms.load(data["device"]["slug"]).name == data["device"]["name"]


ROOT = ms.data_dir()
ALL_FILES = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.json"))


@pytest.mark.parametrize("rel", ALL_FILES)
def test_every_recorded_file_validates_and_names_its_experiment(rel):
    path = ROOT / rel
    assert path.parent.parent == ROOT, f"{rel}: records live at data/measurements/<device-slug>/<name>.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    if path.name == ms.ROOFS:
        m = ms.Measurement(data, str(path))
        assert m.slug == path.parent.name
        return
    record = ms.Record(data, str(path))
    assert record.experiment == path.stem, f"{rel} records experiment {record.experiment!r}"
    assert data["device"]["slug"] == path.parent.name
    assert not data["quick"], f"{rel} is a --quick record: never commit one"
    from mlsys.bench.experiment import catalogue

    assert record.experiment in catalogue(), f"{rel}: no experiment module {record.experiment!r}"


def test_every_experiment_says_where_it_is_shown():
    from mlsys.bench.experiment import catalogue

    repo = ROOT.parents[1]
    for exp in catalogue().values():
        for page in exp.shown_in:
            found = [(repo / f"{page}{ext}").is_file() for ext in (".md", ".ipynb")] + [(repo / page).is_dir()]
            assert any(found), f"{exp.name}: SHOWN_IN names {page}, which is no page or lab of this repository"


def test_recorded_matmul_fastest_is_the_fastest_call_not_a_burst():
    """``fastest`` = 2 n^3 / timing.min (worked out here from the timing), at least the median rate;
    "burst" belongs to mlsys.bench.sustained alone, so no roofs file uses that key."""
    seen = 0
    for slug in ms.available():
        data = ms.load(slug).data
        for name, fig in data["figures"].items():
            assert "burst" not in fig, f"{slug} {name}: 'burst' is mlsys.bench.sustained's figure; use 'fastest'"
            if not name.startswith("matmul_") or "fastest" not in fig:
                continue
            n = int(fig["size"].split("=")[-1])
            assert fig["fastest"]["unit"] == "FLOP/s"
            assert fig["fastest"]["value"] == pytest.approx(2 * n**3 / fig["timing"]["min"], rel=1e-9)
            assert fig["fastest"]["value"] >= fig["value"]
            seen += 1
    assert seen >= 1


def test_recorded_matmul_power_state_agrees_with_the_median_and_the_card_limits():
    """Where a roofs file records burst vs sustained for a matmul, it is checked against what is known
    independently: the sustained rate of the long run and the median of the short one measure the same
    steady state (within 25 %); the burst is at most the fastest single call (5 % noise); on a GPU the
    clocks seen never exceed the card's maximum SM clock and the power stays under its limit (+5 %)."""
    for slug in ms.available():
        data = ms.load(slug).data
        for name, fig in data["figures"].items():
            ps = fig.get("power_state")
            if not name.startswith("matmul_") or ps is None:
                continue
            sustained = ps["sustained"]["throughput"]["value"] * 1e12
            burst = ps["burst"]["throughput"]["value"] * 1e12
            assert sustained == pytest.approx(fig["value"], rel=0.25), f"{slug} {name}"
            assert burst <= fig["fastest"]["value"] * 1.05, f"{slug} {name}: burst above the fastest call"
            if data["device"]["kind"] != "cuda":
                continue
            limits, clocks = ps["limits"], ps["clocks"]
            for window in ("burst", "sustained"):
                assert clocks[window]["sm_clock"]["max"]["value"] <= limits["max_sm_clock"]["value"], (slug, name)
                assert clocks[window]["power"]["median"]["value"] <= 1.05 * limits["power_limit"]["value"], (slug, name)
