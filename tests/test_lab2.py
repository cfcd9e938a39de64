"""Lab 2 (tiled matmul): the notebook's structure, its reference kernels and its GPU script, on a CPU.

The kernels are the instructor notebook's own cells tagged ``lab2-kernel``, loaded by
the experiment ``mlsys.bench.experiments.lab2_matmul`` exactly as it does on the GPU, and run under the Triton interpreter.
Expected values are worked out by hand in the comments, or come from ``torch.matmul`` in fp64 (an
independent implementation).
"""

from __future__ import annotations

import contextlib
import io
import json
import linecache
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

import mlsys

mlsys.course.device.setup()  # TRITON_INTERPRET=1 without CUDA, before triton is imported

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from mlsys.course import grading  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "labs" / "source" / "lab2_tiled_matmul" / "lab2_tiled_matmul.ipynb"
BENCH = REPO / "mlsys" / "bench" / "experiments" / "lab2_matmul.py"
DEVICE = mlsys.course.device.default_device()


from mlsys.bench.experiments import lab2_matmul as bench  # noqa: E402

_KERNEL_DIR = tempfile.TemporaryDirectory(prefix="lab2-kernels-")
lab = bench.load_kernels(DEVICE, Path(_KERNEL_DIR.name))
KERNELS = {"naive": lab.naive_matmul, "tiled": lab.tiled_matmul, "grouped": lab.matmul, "tma": lab.matmul_tma}


def _cells() -> list[dict]:
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _cell(grade_id: str) -> dict:
    return next(c for c in _cells() if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def _expected(a, b):
    """fp64 matmul of the inputs, rounded to their dtype: the answer a correct kernel approximates."""
    return torch.matmul(a.double(), b.double()).to(a.dtype)


TOL = {torch.float16: dict(rtol=1e-2, atol=2e-2), torch.float32: dict(rtol=1e-4, atol=1e-4)}


# ------------------------------------------------------------------------------ notebook structure


def test_nbgrader_metadata_is_schema_3_with_unique_grade_ids():
    ids = []
    points = {}
    for cell in _cells():
        meta = cell.get("metadata", {}).get("nbgrader")
        assert meta is not None, f"cell without nbgrader metadata: {_source(cell)[:60]!r}"
        assert meta["schema_version"] == 3
        ids.append(meta["grade_id"])
        src = _source(cell)
        if meta["solution"]:
            assert src.count("### BEGIN SOLUTION") == src.count("### END SOLUTION") >= 1, meta["grade_id"]
            assert not meta["grade"] and not meta["locked"]
        else:
            assert "### BEGIN SOLUTION" not in src and meta["locked"], meta["grade_id"]
        if meta["grade"]:
            assert meta["grade_id"].startswith(("test_", "perf_")), meta["grade_id"]
            assert meta["points"] > 0 and meta["locked"]
            assert "raises-exception" in cell["metadata"].get("tags", [])
            points[meta["grade_id"]] = meta["points"]
        if "### BEGIN HIDDEN TESTS" in src:
            assert meta["grade"] and "### END HIDDEN TESTS" in src, meta["grade_id"]
    assert len(ids) == len(set(ids)), "grade ids must be unique"
    # 2 + 3 + 4 + 3 correctness points, 4 performance points
    assert points == {"test_tile_report": 2, "test_naive": 3, "test_tiled": 4, "test_matmul": 3, "perf_matmul": 4}


def test_setup_cell_picks_the_device_before_importing_triton():
    src = _source(_cell("setup"))
    assert "google.colab" in src and "pip" in src
    assert src.index("mlsys.course.device.setup()") < src.index("import triton")


def test_kernel_cells_are_the_solution_cells_the_script_loads():
    tagged = [gid for gid, _ in bench.kernel_sources(NOTEBOOK)]
    assert tagged == ["operands", "naive_kernel", "tiled_kernel", "grouped_kernel", "tma_kernel"]
    for gid in tagged[1:4]:  # the exercises; tma_kernel is the ungraded "going further" reference
        assert _cell(gid)["metadata"]["nbgrader"]["solution"]
    assert not _cell("tma_kernel")["metadata"]["nbgrader"]["solution"]


def test_perf_cell_uses_the_performance_tier_and_checks_after_timing():
    src = _source(_cell("perf_matmul"))
    assert "grading.performance_tier(" in src and "full_at=0.5" in src
    assert src.strip().splitlines()[-1].startswith("grading.award(4, ")
    # fresh inputs are checked after the timing, inside the measurement
    assert src.index("check_matmul(") > src.index("time_fn(lambda: torch.matmul")


def test_bench_loads_the_notebook_kernels_not_a_copy():
    src = BENCH.read_text(encoding="utf-8")
    assert "@triton.jit" not in src and "tl.load" not in src and "tl.dot" not in src
    assert bench.NOTEBOOK.resolve() == NOTEBOOK.resolve()
    assert Path(lab.__file__).name == "lab2_kernels.py"


# ------------------------------------------------------------------------------ the reference kernels


@pytest.mark.parametrize("name", list(KERNELS))
def test_hand_values(name):
    fn = KERNELS[name]
    # [[1, 2], [3, 4]] @ [[5, 6], [7, 8]] = [[1*5 + 2*7, 1*6 + 2*8], [3*5 + 4*7, 3*6 + 4*8]] = [[19, 22], [43, 50]]
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=DEVICE)
    b = torch.tensor([[5.0, 6.0], [7.0, 8.0]], device=DEVICE)
    grading.assert_close(fn(a, b), torch.tensor([[19.0, 22.0], [43.0, 50.0]], device=DEVICE), rtol=0, atol=0)
    # a 1 x 40 row of ones times a 40 x 1 column of twos: 40 * 2 = 80 (k spans two blocks of 32)
    one = torch.ones(1, 40, device=DEVICE, dtype=torch.float16)
    two = torch.full((40, 1), 2.0, device=DEVICE, dtype=torch.float16)
    out = fn(one, two)
    assert out.dtype == torch.float16 and tuple(out.shape) == (1, 1)
    assert float(out[0, 0]) == 80.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("shape", [(65, 127, 33), (1, 1, 1), (130, 20, 50), (20, 130, 96), (64, 64, 64)])
@pytest.mark.parametrize("name", ["tiled", "grouped", "tma"])
def test_tiled_kernels_on_odd_shapes(name, shape, dtype):
    m, n, k = shape
    g = torch.Generator().manual_seed(m * 1000 + n * 10 + k)
    a = torch.randn(m, k, generator=g).to(dtype).to(DEVICE)
    b = torch.randn(k, n, generator=g).to(dtype).to(DEVICE)
    c = KERNELS[name](a, b)
    assert c.dtype == dtype and tuple(c.shape) == (m, n)
    tol = TOL[dtype] if DEVICE == "cpu" else dict(rtol=1e-2, atol=2e-2)  # a GPU may use TF32 for fp32
    grading.assert_close(c, _expected(a, b), **tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("shape", [(9, 13, 33), (5, 3, 70), (1, 1, 1)])
def test_naive_kernel_on_odd_shapes(shape, dtype):
    # the naive grid has one program per output element: small shapes keep the interpreter quick
    m, n, k = shape
    g = torch.Generator().manual_seed(7 * m + n + k)
    a = torch.randn(m, k, generator=g).to(dtype).to(DEVICE)
    b = torch.randn(k, n, generator=g).to(dtype).to(DEVICE)
    grading.assert_close(lab.naive_matmul(a, b), _expected(a, b), **TOL[dtype])


@pytest.mark.parametrize("blocks", [(16, 16, 16), (16, 64, 32), (64, 16, 16)])
def test_tiled_kernel_with_other_block_sizes(blocks):
    a = torch.randn(40, 100, device=DEVICE)
    b = torch.randn(100, 24, device=DEVICE)
    grading.assert_close(lab.tiled_matmul(a, b, *blocks), _expected(a, b), **TOL[torch.float32])


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernels_follow_strides(name):
    # transposed views have strides (1, rows): a kernel that assumed row-major layout would be wrong
    a = torch.randn(12, 7, device=DEVICE)
    bt = torch.randn(5, 12, device=DEVICE)
    grading.assert_close(KERNELS[name](a.t(), bt.t()), _expected(a.t(), bt.t()), **TOL[torch.float32])


def test_tma_path_is_taken_only_where_rows_are_16_byte_aligned(monkeypatch):
    # fp16 rows of 40 elements are 80 bytes = 5 * 16: TMA applies; 33 elements are 66 bytes: it does not
    a16, b16 = torch.randn(72, 40).half(), torch.randn(40, 136).half()
    assert lab.tma_applies(a16, b16)
    assert not lab.tma_applies(torch.randn(65, 33).half(), torch.randn(33, 128).half())
    assert not lab.tma_applies(b16.t(), a16.t())  # transposed views are not contiguous
    # the aligned case really runs the TMA kernel, the others fall back to matmul
    calls = []
    monkeypatch.setattr(lab, "matmul", lambda a, b: calls.append("fallback") or torch.zeros(a.shape[0], b.shape[1]))
    grading.assert_close(lab.matmul_tma(a16, b16), _expected(a16, b16), **TOL[torch.float16])
    assert calls == []
    lab.matmul_tma(torch.randn(5, 33), torch.randn(33, 7))
    assert calls == ["fallback"]


def test_operands_are_checked_with_clear_errors():
    x = torch.randn(4, 3)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        lab.tiled_matmul(x, torch.randn(4, 3))
    with pytest.raises(ValueError, match="2-D"):
        lab.matmul(torch.randn(2, 4, 3), torch.randn(3, 2))
    with pytest.raises(TypeError, match="float16 or both float32"):
        lab.naive_matmul(x, torch.randn(3, 2, dtype=torch.float16))
    with pytest.raises(TypeError, match="torch tensors"):
        lab.matmul([[1.0]], [[1.0]])


def test_gpu_configs_fit_an_h100_and_small_problems_skip_tuning():
    configs = lab.matmul_configs("cuda")
    assert 4 <= len(configs) <= 8  # the autotuner times each one at every new size
    for cfg in configs:
        kw = cfg.kwargs
        tile = mlsys.tiling.TileConfig(kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], "fp16", cfg.num_stages)
        assert mlsys.tiling.fits_shared_memory(tile, "H100"), cfg
        assert kw["GROUP_M"] == 8 and min(kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"]) >= 16
    # 128 x 256 x 64 tiles with 3 stages: (128*64 + 64*256) * 2 bytes * 3 = 147,456 bytes, within 228 KiB
    assert any(c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] == 128 * 256 and c.kwargs["BLOCK_K"] == 64 for c in configs)
    # below a 512 x 512 output only the smallest tile is kept (64 x 128 = 8,192 elements)
    kept = lab.prune_configs(configs, {"M": 65, "N": 127})
    assert len(kept) == 1 and kept[0].kwargs["BLOCK_M"] * kept[0].kwargs["BLOCK_N"] == 64 * 128
    assert lab.prune_configs(configs, {"M": 512, "N": 512}) == configs
    # under the interpreter: one small config
    (cpu,) = lab.matmul_configs("cpu")
    assert cpu.kwargs["BLOCK_M"] == cpu.kwargs["BLOCK_N"] == cpu.kwargs["BLOCK_K"] == 32


# ------------------------------------------------------------------------------ the grader's cheat detection


def test_reference_wrappers_pass_the_library_call_check():
    for fn in KERNELS.values():
        grading.assert_no_library_calls(fn)


def _define(src: str, scope: dict | None = None):
    """A function defined from ``src`` with its source readable by inspect (as a notebook cell's is)."""
    filename = f"<lab2-cheat-{abs(hash(src))}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    scope = {"torch": torch, "lab": lab, **(scope or {})}
    exec(compile(src, filename, "exec"), scope)
    return scope["matmul"]


@pytest.mark.parametrize("src", [
    "def matmul(a, b):\n    return torch.matmul(a, b)\n",
    "def matmul(a, b):\n    return a @ b\n",
    "def matmul(a, b):\n    M, N, K, c = lab.matmul_operands(a, b)\n    c.copy_(torch.mm(a, b))\n    return c\n",
    "from torch import matmul as mul\ndef matmul(a, b):\n    return mul(a.float(), b.float()).half()\n",
    "def matmul(a, b):\n    return torch.nn.functional.linear(a, b.t())\n",
    "def matmul(a, b):\n    return a.matmul(b)\n",
])
def test_a_wrapper_that_calls_a_library_matmul_is_rejected(src):
    cheat = _define(src)
    with pytest.raises(grading.GradingError, match="implement the computation yourself"):
        grading.assert_no_library_calls(cheat)


_UNMASKED = '''
import torch
import triton
import triton.language as tl


@triton.jit
def unmasked_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):  # no masks: the last k-step and the edge tiles read past the matrices
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak)
        b = tl.load(b_ptr + (k0 + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float32)
    unmasked_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return c


if __name__ == "__main__":
    import sys

    a, b = torch.load(sys.argv[1])
    torch.save(matmul(a, b), sys.argv[2])
'''


@pytest.mark.skipif(DEVICE != "cpu", reason="an out-of-bounds load on a GPU may corrupt the test process's context")
def test_a_kernel_without_masks_is_caught(tmp_path):
    # Without masks, the last k-step of a 65 x 127 x 33 product reads 31 columns past each row of A and rows
    # past the end of B: garbage (or a crash) instead of zeros. It runs in its own process, so that a crash
    # costs this check only; either way the grader must not pass it.
    script = tmp_path / "unmasked.py"
    script.write_text(_UNMASKED, encoding="utf-8")
    a, b = torch.randn(65, 33), torch.randn(33, 127)
    torch.save((a, b), tmp_path / "inputs.pt")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "inputs.pt"), str(tmp_path / "out.pt")],
                          env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:  # it crashed: caught
        assert not (tmp_path / "out.pt").exists()
        return
    out = torch.load(tmp_path / "out.pt")
    with pytest.raises(grading.GradingError):
        grading.assert_finite(out)
        grading.assert_close(out, _expected(a, b).float(), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------ the notebook's Part 1 model


def test_tile_report_solution_against_hand_values():
    scope = {"tiling": mlsys.tiling, "roofline": mlsys.roofline}
    exec(_source(_cell("tile_report")), scope)
    # 4096^3 fp16, 128 x 128 tiles: 32 x 32 tiles. A read 32 times: 32 * 4096^2; B likewise; C once.
    # (64 + 1) * 4096^2 * 2 bytes = 65 * 16,777,216 * 2 = 2,181,038,080 bytes
    r = scope["tile_report"](4096, 4096, 4096, 128, 128, "fp16", "H100")
    assert r["traffic"].to("byte").magnitude == 2_181_038_080
    # 2 * 4096^3 = 137,438,953,472 FLOP / 2,181,038,080 byte = 63.015 FLOP/byte < 295 (H100 fp16 ridge)
    assert r["intensity"].to("FLOP/byte").magnitude == pytest.approx(137_438_953_472 / 2_181_038_080, rel=1e-12)
    assert r["bound"] == "memory"
    assert r["attainable"].to("TFLOP/s").magnitude == pytest.approx(3.35 * 137_438_953_472 / 2_181_038_080, rel=1e-9)


# ------------------------------------------------------------------------------ the GPU script and the figures cell


@pytest.mark.slow
def test_experiment_quick_run_on_the_cpu():
    from mlsys.bench.experiment import run

    record = run("lab2_matmul", quick=True, device="cpu")
    data = record["results"]
    assert record["quick"] and record["device"]["kind"] == "cpu" and record["software"]["triton"]
    assert data["all_correct"] and data["failures"] == []
    for name, sizes in bench.TINY_SIZES.items():
        assert sorted(int(s) for s in data["throughput"][name]) == sorted(sizes)
    head = data["headline"]
    assert head["size"] == max(bench.TINY_SIZES["grouped+autotuned"])
    # the ratio is cuBLAS time / kernel time = kernel throughput / cuBLAS throughput at the same size
    assert head["ratio"] == pytest.approx(head["throughput"]["value"] / head["cublas_throughput"]["value"], rel=1e-9)


def test_figures_cell_copes_without_the_file(tmp_path, monkeypatch):
    # a copy of the lab outside the repository, with the course package installed elsewhere (as in Colab)
    monkeypatch.chdir(tmp_path)
    elsewhere = SimpleNamespace(__file__=str(tmp_path / "site-packages" / "mlsys" / "__init__.py"))
    scope = {"json": json, "Path": Path, "mlsys": elsewhere}
    src = _source(_cell("reference_figures"))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(src, scope)
    assert re.search(r"not recorded yet", buf.getvalue())
