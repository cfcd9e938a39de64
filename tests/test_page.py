"""The page helper: the reference device's records, glue without display, Markdown tables (expected text by hand)."""

from __future__ import annotations

import pytest

from mlsys.bench.records import device_slug
from mlsys.book import page
from mlsys.units import Q_


def test_reference_device_is_the_h100_the_records_name():
    assert page.REFERENCE_DEVICE == device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_reference_loads_the_record_of_the_reference_device():
    rec = page.reference("layer_roofline")
    assert rec.experiment == "layer_roofline"
    assert rec.device == "NVIDIA H100 80GB HBM3"


def test_reference_of_an_unknown_experiment_fails_naming_it():
    with pytest.raises(FileNotFoundError, match="no_such_experiment"):
        page.reference("no_such_experiment")


def test_reference_roofs_are_the_h100s():
    roofs = page.reference_roofs()
    assert roofs.slug == "nvidia-h100-80gb-hbm3"
    assert roofs.name == "NVIDIA H100 80GB HBM3"
    # an H100 SXM copies at most its 3.35 TB/s datasheet bandwidth, and far more than a PCIe link's 64 GB/s
    assert Q_(64, "GB/s") < roofs.figure("copy_bandwidth") < Q_(3.35, "TB/s")


def test_glue_stores_the_value_without_displaying_it(monkeypatch):
    import myst_nb.ext.glue as glue_ext

    shown = []
    monkeypatch.setattr(glue_ext, "ipy_display", lambda data, raw, metadata: shown.append((data, metadata)))
    page.glue("ch0_answer", "42 GB/s")
    (data, metadata), = shown
    assert metadata["scrapbook"] == {"name": "ch0_answer", "mime_prefix": "application/papermill.record/"}
    assert data == {"application/papermill.record/text/plain": "'42 GB/s'"}


def test_table_default_alignment_and_formatting():
    t = page.table([("H100", Q_(3.35e12, "byte/s").to("TB/s"), 989.5), ("A|B", 7, "n/a")],
                   ["chip", "bandwidth", "TFLOP/s"])
    assert t.data == ("| chip | bandwidth | TFLOP/s |\n"
                      "|:--|--:|--:|\n"
                      "| H100 | 3.35 TB/s | 990 |\n"
                      "| A\\|B | 7 | n/a |")


def test_table_explicit_alignment():
    t = page.table([[1, 2, "x"]], ["a", "b", "c"], align="rcl")
    assert t.data == "| a | b | c |\n|--:|:-:|:--|\n| 1 | 2 | x |"


def test_table_accepts_any_iterable_of_rows():
    t = page.table((("k", i) for i in range(2)), ["key", "i"])
    assert t.data.splitlines()[2:] == ["| k | 0 |", "| k | 1 |"]


@pytest.mark.parametrize("rows, headers, align, error, match", [
    ([("a",)], ["x", "y"], None, ValueError, "row 1 has 1 cells; expected 2"),
    ([("a", "b")], ["x", "y"], "lx", ValueError, "expected 2 letters"),
    ([("a", "b")], ["x", "y"], "l", ValueError, "expected 2 letters"),
    ([], [], None, ValueError, "no headers"),
    ([("a", None)], ["x", "y"], None, TypeError, "row 1, column 2 is a NoneType"),
    ([("a", True)], ["x", "y"], None, TypeError, "is a bool"),
    ([("a\nb", "c")], ["x", "y"], None, ValueError, "line break"),
])
def test_table_refuses_bad_input_saying_what_was_expected(rows, headers, align, error, match):
    with pytest.raises(error, match=match):
        page.table(rows, headers, align=align)


def test_second_device_is_the_h200_the_records_name():
    assert page.SECOND_DEVICE == device_slug("NVIDIA H200") == "nvidia-h200"
    assert page.second("layer_roofline").device == "NVIDIA H200"
    roofs = page.second_roofs()
    assert roofs.slug == "nvidia-h200"
    # an H200 copies at most its 4.8 TB/s datasheet bandwidth, more than the H100's 3.35 TB/s can
    assert Q_(3.35, "TB/s") * 0.5 < roofs.figure("copy_bandwidth") < Q_(4.8, "TB/s")


def test_recorded_in_names_the_folder_and_file_under_the_checkout():
    assert page.recorded_in() == "data/measurements/nvidia-h100-80gb-hbm3/"
    assert page.recorded_in("power_clocks") == "data/measurements/nvidia-h100-80gb-hbm3/power_clocks.json"
    assert page.recorded_in("layer_roofline", device=page.SECOND_DEVICE) == "data/measurements/nvidia-h200/layer_roofline.json"
    with pytest.raises(ValueError, match="REFERENCE_DEVICE"):
        page.recorded_in(device="nvidia-a100")
