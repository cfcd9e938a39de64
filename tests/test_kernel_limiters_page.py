"""Chapter 9 ("Writing kernels") reads the ``kernel_limiters`` record of the H200 once it exists, and shows
its timings as missing, never as a hardware fact, until then; the tiling and fusion chapters name the limiter
of their smallest-tile and fused kernels from the same record, and say it is missing until then.

Both states are tested on a copy of ``data/measurements`` (``$MLSYS_MEASUREMENTS_DIR``): one without the
record, and one with a record made here by hand (its figures chosen so the rendered table can be worked
out by hand), so the tests hold before and after the GPU run adds the real one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_book import execute_chapter

from mlsys.bench.experiments import kernel_limiters

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "chapters" / "08_writing_kernels.md"


def _glued(nb, name: str) -> str:
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("metadata", {}).get("scrapbook", {}).get("name") == name:
                data = out["data"]
                return str(data.get("application/papermill.record/text/markdown")
                           or data.get("application/papermill.record/text/plain"))
    raise AssertionError(f"{name} is not glued")


def _timed(t: float, nbytes: int, units: dict) -> dict:
    limiter = max(units, key=units.get)
    kernel = {"name": "k", "limiter": limiter, "units": units, "occupancy": 50.0,
              "duration": {"value": t, "unit": "s", "method": "ncu"}, "top_stalls": []}
    return {"bytes": nbytes, "time": {"value": t, "unit": "s", "method": "median"},
            "limiters": {"kernels": [kernel], "limiter": limiter, "busy_threshold": 60.0, "rule": "r"}}


def _record() -> dict:
    """A kernel_limiters record in the course's format: the H200's header, one vector add at 4.0 TB/s."""
    head = json.loads((ROOT / "data" / "measurements" / "nvidia-h200" / "layer_limiters.json").read_text())
    kernel = {"name": "vector_add", "limiter": "dram", "units": {"dram": 91.0, "l2": 40.0, "l1": 20.0, "issue": 10.0,
                                                                  "tensor": 0.0, "fp32": 2.0},
              "occupancy": 88.0, "duration": {"value": 2.0e-4, "unit": "s", "method": "ncu"}, "top_stalls": []}
    results = {"add_cuda": {"elements": 1 << 26, "bytes": 12 * (1 << 26), "dtype": "fp32",
                            "time": {"value": 12 * (1 << 26) / 4.0e12, "unit": "s", "method": "median"},
                            "limiters": {"kernels": [kernel], "limiter": "dram", "busy_threshold": 60.0, "rule": "r"}},
               "add_triton": {"failed": "RuntimeError: no nvcc"},
               "matmul_32": _timed(2 * 4096 ** 3 / 300e12, 3 * 2 * 4096 ** 2, {"dram": 5.0, "l2": 57.5, "l1": 70.0,
                                                                              "issue": 40.0, "tensor": 30.0, "fp32": 1.0}),
               "chain_compiled": _timed(1.16e-4, 2 * 2 * 8192 ** 2, {"dram": 45.7, "l2": 30.0, "l1": 20.0, "issue": 78.9,
                                                                     "tensor": 0.0, "fp32": 50.0})}
    return {**{k: head[k] for k in ("schema", "device", "software", "date", "quick", "runtime", "notes")},
            "experiment": "kernel_limiters", "shown_in": list(kernel_limiters.SHOWN_IN), "l2_flush": "read",
            "results": results}


@pytest.mark.slow  # executes the chapter twice (about 40 s each on the CI machine)
@pytest.mark.parametrize("recorded", [False, True])
def test_chapter_shows_the_kernel_timings_as_missing_until_the_record_exists(recorded, tmp_path, monkeypatch):
    data = tmp_path / "measurements"
    shutil.copytree(ROOT / "data" / "measurements", data)
    path = data / "nvidia-h200" / "kernel_limiters.json"
    if recorded:
        path.write_text(json.dumps(_record()), encoding="utf-8")
    elif path.exists():
        path.unlink()
    monkeypatch.setenv("MLSYS_MEASUREMENTS_DIR", str(data))
    nb = execute_chapter(CHAPTER)
    table = _glued(nb, "ch8_kl_table")
    if not recorded:
        assert kernel_limiters.MISSING in table and "|" not in table
        assert kernel_limiters.MISSING in _glued(nb, "ch8_kl_notes")
        return
    assert kernel_limiters.MISSING not in table
    copy = json.loads((data / "nvidia-h200" / "roofs.json").read_text())["figures"]["copy_bandwidth"]["value"]
    # 4.0 TB/s by construction, against the H200's measured copy roof
    row = next(line for line in table.splitlines() if line.startswith("| vector add, CUDA"))
    assert "| 4 |" in row and f"{4.0e12 / copy:.0%}" in row and "| DRAM | 91% | DRAM, 91% |" in row and "88%" in row
    assert "failed: RuntimeError: no nvcc" in table  # a case that failed is said to have failed
    assert "row softmax, CUDA | failed: not recorded" in table
    assert "kernel_limiters.json" in _glued(nb, "ch8_kl_notes")


@pytest.mark.slow  # executes two chapters (about 40 s each on the CI machine)
@pytest.mark.parametrize("chapter, name, phrase", [
    ("09_tiling.md", "ch9_small_limiter", "32 x 32 kernel on an H200 finds it l1-bound: L1/shared memory at 70% of its "
                                          "peak, DRAM at 5%, occupancy 50%."),
    ("10_fusion_and_compilers.md", "ch10_fused_limiter", "finds it issue-bound: instruction issue at 79% of its peak, "
                                                         "DRAM at 46%, occupancy 50%.")])
def test_tiling_and_fusion_name_the_recorded_limiter_once_it_exists(chapter, name, phrase, tmp_path, monkeypatch):
    data = tmp_path / "measurements"
    shutil.copytree(ROOT / "data" / "measurements", data)
    (data / "nvidia-h200" / "kernel_limiters.json").write_text(json.dumps(_record()), encoding="utf-8")
    monkeypatch.setenv("MLSYS_MEASUREMENTS_DIR", str(data))
    assert phrase in _glued(execute_chapter(ROOT / "chapters" / chapter), name)
