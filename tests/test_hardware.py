"""mlsys.hardware: figures against datasheets, ridge points worked out by hand, lookups, errors.

The DATASHEET table below is typed in from the vendor documents (not from the data file), so a
typo in either place fails a test. Sparse ("*") figures are halved by hand here.
"""

from __future__ import annotations

import pytest

from mlsys import Q_, hardware
from mlsys.hardware import SpecError, load

# name: (bandwidth in GB/s, {dtype: dense TFLOP/s}) -- from each chip's datasheet
DATASHEET = {
    "V100-SXM2": (900, {"fp64": 7.8, "fp32": 15.7, "fp16": 125}),
    "A100-SXM4-40GB": (1555, {"fp64": 19.5, "fp32": 19.5, "tf32": 312 / 2, "bf16": 624 / 2, "fp16": 624 / 2, "int8": 1248 / 2}),
    "A100-SXM4-80GB": (2039, {"fp64": 19.5, "fp32": 19.5, "tf32": 312 / 2, "bf16": 624 / 2, "fp16": 624 / 2, "int8": 1248 / 2}),
    "H100-SXM": (3350, {"fp64": 67, "fp32": 67, "tf32": 989 / 2, "bf16": 1979 / 2, "fp16": 1979 / 2, "fp8": 3958 / 2, "int8": 3958 / 2}),
    "H100-PCIe": (2000, {"fp64": 51, "fp32": 51, "tf32": 756 / 2, "bf16": 1513 / 2, "fp16": 1513 / 2, "fp8": 3026 / 2, "int8": 3026 / 2}),
    "H200-SXM": (4800, {"fp64": 67, "fp32": 67, "tf32": 989 / 2, "bf16": 1979 / 2, "fp16": 1979 / 2, "fp8": 3958 / 2, "int8": 3958 / 2}),
    # HGX B200: 8-GPU totals with sparsity, / 8 GPUs, / 2 for dense
    # bandwidth: HGX B200 62 TB/s over 8 GPUs, 7.7 TB/s each; fp32 80 TFLOPS (Blackwell technical brief)
    "B200": (7700, {"fp64": 296 / 8, "fp32": 80, "tf32": 18000 / 8 / 2, "bf16": 36000 / 8 / 2, "fp16": 36000 / 8 / 2,
                    "fp8": 72000 / 8 / 2, "int8": 72000 / 8 / 2, "fp4": 144000 / 8 / 2}),
    "L4": (300, {"fp32": 30.3, "tf32": 120 / 2, "bf16": 242 / 2, "fp16": 242 / 2, "fp8": 485 / 2, "int8": 485 / 2}),
    "T4": (320, {"fp32": 8.1, "fp16": 65, "int8": 130}),
    "MI300X": (5300, {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9, "int8": 2614.9}),
    "TPUv4": (1200, {"bf16": 275, "int8": 275}),
    "TPUv5e": (819, {"bf16": 197, "int8": 394}),
    # HGX B300 (8-GPU totals, / 8): FP4 105 PF dense, FP8 72 PF sparse, BF16 36 PF sparse, TF32 18 PF sparse,
    # FP32 600 TF, FP64 10 TF
    "B300": (8000, {"fp64": 10 / 8, "fp32": 600 / 8, "tf32": 18000 / 8 / 2, "bf16": 36000 / 8 / 2, "fp16": 36000 / 8 / 2,
                    "fp8": 72000 / 8 / 2, "fp4": 105000 / 8}),
    # GB200 superchip = 2 GPUs, figures with sparsity: TF32 5 PF, FP16 10 PF, FP8 20 PF, INT8 20 POPS, FP4 40 PF; FP64 90 TF
    "GB200": (16000 / 2, {"fp64": 90 / 2, "fp32": 90, "tf32": 5000 / 2 / 2, "bf16": 10000 / 2 / 2, "fp16": 10000 / 2 / 2,
                          "fp8": 20000 / 2 / 2, "int8": 20000 / 2 / 2, "fp4": 40000 / 2 / 2}),
    "MI325X": (6000, {"fp64": 163.4, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9, "int8": 2614.9}),
    "Gaudi3": (3670, {"bf16": 1835, "fp8": 1835}),
    "Trainium2": (2900, {"fp32": 181, "tf32": 667, "bf16": 667, "fp16": 667, "fp8": 1299}),
    # Google prints fp8 for v5p and v6e at their bf16 rate (the v5p page; the TPU7x page's comparison table)
    "TPUv5p": (2765, {"bf16": 459, "fp8": 459, "int8": 918}),
    "TPUv6e": (1638, {"bf16": 918, "fp8": 918, "int8": 1836}),
    "L40S": (864, {"fp32": 91.6, "tf32": 366 / 2, "bf16": 733 / 2, "fp16": 733 / 2, "fp8": 1466 / 2, "int8": 1466 / 2}),
    "Jetson-AGX-Orin-64GB": (204.8, {"fp32": 5.3, "int8": 170 / 2}),
    "Apple-M1-Max": (400, {"fp32": 10.4}),
    # GB300 NVL72 (72-GPU rack totals, / 72): FP4 1,080 PF dense, FP8 720 PF*, BF16 360 PF*, TF32 180 PF*; 576 TB/s
    "GB300": (576000 / 72, {"tf32": 180000 / 72 / 2, "bf16": 360000 / 72 / 2, "fp16": 360000 / 72 / 2,
                            "fp8": 720000 / 72 / 2, "fp4": 1080000 / 72}),
    # AMD MI355X: FP16/BF16 2.5 PF, FP8 5 PF, MXFP4 10 PF (dense), 8 TB/s
    "MI355X": (8000, {"bf16": 2500, "fp16": 2500, "fp8": 5000, "fp4": 10000}),
    # Google TPU7x (Ironwood): 2,307 TFLOPs bf16, 4,614 fp8, 7,380 GB/s
    "TPU7x": (7380, {"bf16": 2307, "fp8": 4614}),
}

# Ridge points worked out by hand: peak (TFLOP/s) * 1e12 / (bandwidth (GB/s) * 1e9), to 4 significant figures.
RIDGE_BY_HAND = {
    ("H100-SXM", "bf16"): 295.4,   # 989.5e12 / 3.35e12
    ("H100-SXM", "fp8"): 590.7,    # 1979e12 / 3.35e12
    ("H100-SXM", "fp32"): 20.00,   # 67e12 / 3.35e12
    ("A100-SXM4-80GB", "bf16"): 153.0,  # 312e12 / 2.039e12
    ("A100-SXM4-40GB", "tf32"): 100.3,  # 156e12 / 1.555e12
    ("V100-SXM2", "fp16"): 138.9,  # 125e12 / 0.9e12
    ("T4", "fp16"): 203.1,         # 65e12 / 0.32e12
    ("L4", "fp8"): 808.3,          # 242.5e12 / 0.3e12
    ("H200-SXM", "bf16"): 206.1,   # 989.5e12 / 4.8e12
    ("B200", "fp4"): 1168.8,       # 9000e12 / 7.7e12
    ("Gaudi3", "bf16"): 500.0,     # 1835e12 / 3.67e12
    ("TPUv6e", "bf16"): 560.4,     # 918e12 / 1.638e12
    ("Jetson-AGX-Orin-64GB", "fp32"): 25.88,  # 5.3e12 / 0.2048e12
    ("Apple-M1-Max", "fp32"): 26.0,  # 10.4e12 / 0.4e12
    ("MI300X", "bf16"): 246.7,     # 1307.4e12 / 5.3e12
    ("TPUv4", "bf16"): 229.2,      # 275e12 / 1.2e12
    ("TPUv5e", "int8"): 481.1,     # 394e12 / 0.819e12
}


def test_design_lists_every_required_accelerator():
    required = {"V100-SXM2", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM", "H100-PCIe", "H200-SXM",
                "B200", "L4", "T4", "MI300X", "TPUv4", "TPUv5e",
                # issue 15's list for the "choosing hardware" chapter: Blackwell's successors, AMD, Intel, AWS,
                # Google, an inference card and two edge/mobile parts
                "B300", "GB200", "MI325X", "Gaudi3", "Trainium2", "TPUv5p", "TPUv6e", "L40S",
                "Jetson-AGX-Orin-64GB", "Apple-M1-Max",
                # issue 44 (review row C90-2): the 2025 generation of each vendor
                "GB300", "MI355X", "TPU7x"}
    assert required <= set(hardware.names())
    assert len(hardware.names()) >= 20
    assert set(DATASHEET) == set(hardware.names()), "every chip in the data file is checked against its datasheet here"


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_figures_match_datasheet(name):
    acc = hardware.get(name)
    bw_gbs, peaks = DATASHEET[name]
    assert acc.memory_bandwidth.to("GB/s").m == pytest.approx(bw_gbs, rel=1e-3)
    assert set(acc.dtypes) == set(peaks), f"{name}: dtypes with a peak"
    for dtype, tflops in peaks.items():
        assert acc.peak(dtype).to("TFLOP/s").m == pytest.approx(tflops, rel=2e-3), f"{name} {dtype}"
    for dtype, tflops in peaks.items():
        ridge = tflops * 1e12 / (bw_gbs * 1e9)
        assert acc.ridge_point(dtype).to("FLOP/byte").m == pytest.approx(ridge, rel=2e-3)


@pytest.mark.parametrize(("name", "dtype"), sorted(RIDGE_BY_HAND))
def test_ridge_points_by_hand(name, dtype):
    ridge = hardware.get(name).ridge_point(dtype)
    assert ridge.units == Q_(1, "FLOP/byte").units
    assert ridge.m == pytest.approx(RIDGE_BY_HAND[(name, dtype)], rel=1e-3)


def test_peaks_are_dense_and_sparse_is_exactly_double_on_nvidia_ampere_and_later():
    for acc in hardware.all_accelerators():
        for dtype, sparse in acc.sparse_peak_flops.items():
            assert sparse > acc.peak(dtype)
            if acc.vendor == "NVIDIA":
                assert sparse.to("TFLOP/s").m == pytest.approx(2 * acc.peak(dtype).to("TFLOP/s").m, rel=1e-3)


def test_h100_fp16_is_the_dense_figure():
    assert hardware.get("H100").peak("fp16").to("TFLOP/s").m == pytest.approx(1979 / 2, rel=1e-3)
    assert hardware.get("H100").peak("float16") == hardware.get("H100").peak("fp16")


def test_every_figure_has_a_source_with_title_url_and_date():
    for acc in hardware.all_accelerators():
        figures = ["memory_bandwidth", "memory_capacity", *(f"peak_flops.{d}" for d in acc.dtypes)]
        for f in ("sm_count", "l2_cache", "shared_memory_per_sm", "register_file_per_sm", "tdp", "interconnect_bandwidth"):
            if getattr(acc, f) is not None:
                figures.append(f)
        for fig in figures:
            src = acc.source_of(fig)
            assert src.title and src.url.startswith("https://") and len(src.date) >= 4


def test_aliases_and_case():
    assert hardware.get("H100").name == "H100-SXM"
    assert hardware.get("h100 sxm5").name == "H100-SXM"
    assert hardware.get("A100").name == "A100-SXM4-80GB"
    assert hardware.get("tpu_v5e").name == "TPUv5e"


def test_unknown_accelerator_lists_known_names():
    with pytest.raises(KeyError) as err:
        hardware.get("H900")
    msg = str(err.value)
    assert "H900" in msg and "H100-SXM" in msg and "TPUv5e" in msg


def test_unsupported_dtype_is_a_clear_error():
    with pytest.raises(ValueError, match="T4 has no dense bf16 peak.*supported: fp32, fp16, int8"):
        hardware.get("T4").peak("bf16")
    with pytest.raises(ValueError, match="unknown dtype"):
        hardware.get("H100").peak("fp12")


def test_accelerator_is_frozen():
    acc = hardware.get("H100")
    with pytest.raises(AttributeError):
        acc.memory_bandwidth = Q_(1, "TB/s")  # type: ignore[misc]
    with pytest.raises(TypeError):
        acc.peak_flops["bf16"] = Q_(1, "FLOP/s")  # type: ignore[index]


def test_interconnect_is_per_direction():
    # H100 NVLink 4: 18 links x 50 GB/s = 900 GB/s total over both directions -> 450 per direction
    assert hardware.get("H100").interconnect_bandwidth.to("GB/s").m == pytest.approx(900 / 2)


BASE = """
[[accelerator]]
name = "X1"
vendor = "V"
architecture = "A"
year = 2024
memory_bandwidth = {{ value = 1, unit = "{bw_unit}", source = "s" }}
memory_capacity = {{ value = 1, unit = "{mem_unit}", source = "s" }}
[accelerator.peak_flops]
bf16 = {{ value = {peak}, unit = "TFLOP/s", source = "{src}" }}
[accelerator.sources.s]
title = "t"
url = "https://example.org"
date = "2024-01"
"""


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"bw_unit": "TFLOP/s", "peak": 1, "src": "s"}, "does not convert to byte/s"),
        ({"bw_unit": "TB/s", "peak": -1, "src": "s"}, "positive number"),
        ({"bw_unit": "TB/s", "peak": "inf", "src": "s"}, "finite positive number"),
        ({"bw_unit": "TB/s", "peak": "nan", "src": "s"}, "finite positive number"),
        ({"bw_unit": "TB/s", "peak": 1, "src": "nope"}, "source 'nope'"),
        ({"bw_unit": "TB/s", "peak": 1, "src": "s", "mem_unit": "GB"}, "unit 'GB' is decimal"),
        ({"bw_unit": "TB/s", "peak": 1, "src": "s", "mem_unit": "MB"}, "binary"),
    ],
)
def test_data_file_is_validated(tmp_path, fields, message):
    path = tmp_path / "bad.toml"
    path.write_text(BASE.format(**{"mem_unit": "GiB", **fields}))
    with pytest.raises(SpecError, match=message):
        load(path)


def test_valid_custom_data_file_loads(tmp_path):
    path = tmp_path / "ok.toml"
    path.write_text(BASE.format(bw_unit="TB/s", peak=100, src="s", mem_unit="GiB"))
    acc = load(path)["X1"]
    assert acc.ridge_point("bf16").m == pytest.approx(100)  # 100e12 FLOP/s / 1e12 byte/s


def test_duplicate_name_is_refused(tmp_path):
    path = tmp_path / "dup.toml"
    one = BASE.format(bw_unit="TB/s", peak=1, src="s", mem_unit="GiB")
    path.write_text(one + one)
    with pytest.raises(SpecError, match="'X1' appears twice"):
        load(path)


INTERCONNECT = BASE + """
"""


@pytest.mark.parametrize(
    ("line", "expected_gbs", "message"),
    [
        ('{{ value = 900, unit = "GB/s", direction = "bidirectional", source = "s" }}', 450, None),
        ('{{ value = 450, unit = "GB/s", direction = "per_direction", source = "s" }}', 450, None),
        ('{{ value = 900, unit = "GB/s", source = "s" }}', None, "direction must be one of"),
        ('{{ value = 900, unit = "GB/s", direction = "both", source = "s" }}', None, "direction must be one of"),
    ],
)
def test_interconnect_direction_is_explicit(tmp_path, line, expected_gbs, message):
    text = BASE.format(bw_unit="TB/s", peak=1, src="s", mem_unit="GiB")
    text = text.replace("[accelerator.peak_flops]", "interconnect_bandwidth = " + line.replace("{{", "{").replace("}}", "}")
                        + "\n[accelerator.peak_flops]")
    path = tmp_path / "ic.toml"
    path.write_text(text)
    if message:
        with pytest.raises(SpecError, match=message):
            load(path)
    else:
        assert load(path)["X1"].interconnect_bandwidth.to("GB/s").m == pytest.approx(expected_gbs)


def test_direction_only_on_interconnect(tmp_path):
    text = BASE.format(bw_unit="TB/s", peak=1, src="s", mem_unit="GiB").replace(
        'unit = "TB/s", source = "s"', 'unit = "TB/s", direction = "bidirectional", source = "s"')
    path = tmp_path / "d.toml"
    path.write_text(text)
    with pytest.raises(SpecError, match="only interconnect_bandwidth"):
        load(path)


def test_missing_data_file_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        load(tmp_path / "nope.toml")


def test_memory_and_cache_sizes_are_binary_everywhere():
    # One convention across all chips: every size is a whole number of KiB (the H100's 50 MiB L2
    # would be 50,000,000 B, not a multiple of 1024, if it were stored as decimal MB).
    for acc in hardware.all_accelerators():
        for figure in hardware.BINARY_FIGURES:
            q = getattr(acc, figure)
            if q is not None:
                assert format(q.units, "~") in ("B", "KiB", "MiB", "GiB", "TiB"), (acc.name, figure, q)
                assert q.to("byte").m % 1024 == 0, (acc.name, figure)


# Vendor figures, typed in from the documents: sizes as printed (decimal wording) and as stored (binary).
def test_h100_sizes_are_binary_with_the_datasheet_wording_kept():
    h100 = hardware.get("H100")
    assert h100.l2_cache.to("byte").m == 50 * 2**20  # 52,428,800 B, the device's own L2 size
    assert h100.memory_capacity.to("byte").m == 80 * 2**30
    assert "80 GB" in h100.notes["memory_capacity"]
    assert "50 MB" in h100.notes["l2_cache"]
    assert hardware.get("A100").l2_cache.to("byte").m == 40 * 2**20


def _device_reading(slug):
    """The device block recorded by mlsys.bench for ``slug`` (flat or per-device folder layout)."""
    import json

    from mlsys.bench import records

    for path in (records.data_dir() / slug / "roofs.json", records.data_dir() / f"{slug}.json"):
        if path.exists():
            return json.loads(path.read_text(encoding="utf-8"))["device"]
    pytest.fail(f"no recorded device reading for {slug} in {records.data_dir()}: a missing recording is a failure")


@pytest.mark.parametrize(("slug", "name"), [("nvidia-h100-80gb-hbm3", "H100-SXM"), ("nvidia-h200", "H200-SXM")])
def test_recorded_device_readings_agree_with_the_data_file(slug, name):
    """torch.cuda.get_device_properties, recorded with provenance, against the binary figures.

    ``total_memory`` is the memory the driver lets CUDA use: the HBM stacks hold 80 GiB (H100) /
    141 GiB usable of 144 GiB (H200), and ECC bookkeeping and the driver's reserve take about 1%,
    so the reading must lie between 98.5% and 100% of the stored figure. Had the file kept the
    decimal "80 GB" (74.5 GiB), the reading would exceed it by 6%: it is checked below as well.
    """
    dev = _device_reading(slug)
    acc = hardware.get(name)
    memory = dev["memory"]["value"]
    stored = acc.memory_capacity.to("byte").m
    assert 0.985 * stored <= memory <= stored, (memory / 2**30, stored / 2**30)
    decimal = float(acc.notes["memory_capacity"].split("datasheet: ")[1].split(" GB")[0]) * 1e9
    assert memory > decimal * 1.04  # the decimal reading of the datasheet is wrong by more than 4%
    if acc.l2_cache is not None:
        assert dev["l2_cache"]["value"] == acc.l2_cache.to("byte").m  # exact: 50 MiB on the H100


def test_2025_chips_against_a_second_source():
    """Review row C90-2: the three 2025 chips, each set against a figure the data file does not hold.

    * TPU7x: Google announced a 9,216-chip Ironwood pod at 42.5 exaflops (fp8), April 2025; the per-chip
      fp8 figure times the pod must give it, and fp8 is twice bf16.
    * MI355X: AMD (ISSCC 2026) gives 8,192 FP8 FLOP per clock per CU (twice CDNA 3's 4,096), Hot Chips 2025
      a 2.4 GHz peak clock, and 8 XCDs of 32 CUs: 256 x 8,192 x 2.4e9 = 5.03e15, the printed "5 PFLOPS".
      The same rule gives MI300X's 304 x 4,096 x 2.1e9 = 2.615e15, its datasheet's 2,614.9 TFLOPS.
    * GB300: NVIDIA prints the NVL72 rack's 576 TB/s of HBM and 130 TB/s of NVLink; 72 GPUs at the
      per-GPU figures must add up to them.
    """
    tpu7 = hardware.get("Ironwood")
    assert (9216 * tpu7.peak("fp8")).to("EFLOP/s").m == pytest.approx(42.5, rel=2e-3)
    assert tpu7.peak("fp8") == 2 * tpu7.peak("bf16")
    assert tpu7.interconnect_bandwidth.to("GB/s").m == pytest.approx(600)  # 1,200 GB/s both ways
    assert tpu7.interconnect.links is None and tpu7.interconnect.topology is None  # not printed: no guess

    mi355 = hardware.get("MI355X")
    assert mi355.sm_count == 256
    assert (256 * 8192 * 2.4e9) / mi355.peak("fp8").to("FLOP/s").m == pytest.approx(1, rel=0.01)
    assert (304 * 4096 * 2.1e9) / hardware.get("MI300X").peak("fp8").to("FLOP/s").m == pytest.approx(1, rel=1e-3)
    assert mi355.interconnect_bandwidth is None, "no source for MI355X's link bandwidth: missing, not guessed"

    gb300 = hardware.get("GB300")
    assert (72 * gb300.memory_bandwidth).to("TB/s").m == pytest.approx(576)
    assert (72 * 2 * gb300.interconnect_bandwidth).to("TB/s").m == pytest.approx(130, rel=0.01)
    assert "NVL72" in gb300.interconnect.topology
