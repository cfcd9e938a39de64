"""Lab 2 (tiled matmul): the notebook's structure, its reference kernels and its checks, on a CPU.

The kernels are the instructor notebook's own cells (the setup cell, the warm-up and the cells tagged
``lab2-kernel``), executed with :mod:`mlsys.runtime.notebook` exactly as the GPU experiment loads them,
and run under the Triton interpreter. Expected values are worked out by hand in the comments, or come
from ``torch.matmul`` in fp64 (an independent implementation).
"""

from __future__ import annotations

import contextlib
import io
import json
import linecache
import re
import types
from pathlib import Path

import pytest

import mlsys

mlsys.labkit.device.setup()  # TRITON_INTERPRET=1 without CUDA, before triton is imported

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from mlsys.labkit import checks, grading  # noqa: E402
from mlsys.runtime import notebook as nbexec  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "labs" / "source" / "lab2_tiled_matmul" / "lab2_tiled_matmul.ipynb"
DEVICE = mlsys.labkit.device.default_device()
KERNEL_CELLS = [c.grade_id for c in nbexec.code_cells(NOTEBOOK) if "lab2-kernel" in c.tags]
# the notebook's cells run once per session (conftest's lab2_kernels), not at import; `lab` is their globals
lab = types.ModuleType("lab2_kernels (not loaded yet)")
KERNELS: dict = dict.fromkeys(("naive", "tiled", "grouped", "tma"))


@pytest.fixture(autouse=True, scope="module")
def _kernels(lab2_kernels):
    global lab
    lab = lab2_kernels
    KERNELS.update(naive=lab.naive_matmul, tiled=lab.tiled_matmul, grouped=lab.matmul, tma=lab.matmul_tma)


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
    manual = {}
    for cell in _cells():
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta is None and cell.get("id", "").startswith("predict-") and cell["cell_type"] == "markdown":
            continue  # issue 45: the learner's own prediction, written before a measurement (editable, ungraded)
        assert meta is not None, f"cell without nbgrader metadata: {_source(cell)[:60]!r}"
        assert meta["schema_version"] == 3
        ids.append(meta["grade_id"])
        src = _source(cell)
        if meta["solution"]:
            assert src.count("### BEGIN SOLUTION") == src.count("### END SOLUTION") >= 1, meta["grade_id"]
            assert not meta["locked"]
            if meta["grade"]:  # a written answer, graded by hand
                assert cell["cell_type"] == "markdown" and meta["points"] > 0, meta["grade_id"]
                manual[meta["grade_id"]] = meta["points"]
                continue
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
    # 2 + 2 + 3 + 4 + 3 correctness points, 4 performance points, 2 points of written answer
    assert points == {"test_add": 2, "test_tile_report": 2, "test_naive": 3, "test_tiled": 4, "test_matmul": 3,
                      "perf_matmul": 4}
    assert manual == {"explain_roofline_gap": 2}


def test_the_first_kernel_a_learner_writes_is_one_dimensional():
    order = [c.grade_id for c in nbexec.code_cells(NOTEBOOK)]
    assert order.index("add_kernel") < order.index("naive_kernel") < order.index("tiled_kernel")
    # hand values: [1, 2, 3] + [10, 20, 30] = [11, 22, 33]; 4097 elements need 5 programs of 1024
    x = torch.tensor([1.0, 2.0, 3.0], device=DEVICE)
    grading.assert_close(lab.add(x, x * 10), torch.tensor([11.0, 22.0, 33.0], device=DEVICE), rtol=0, atol=0)
    y = torch.arange(4097, dtype=torch.float32, device=DEVICE)
    checks.check_kernel(lab.add, (y, y), 2 * y, names=("x", "y"), output_names=("out",), rtol=0, atol=0,
                        max_reads={"x": 1, "y": 1})


def test_setup_cell_picks_the_device_before_importing_triton():
    src = _source(_cell("setup"))
    assert "google.colab" in src and "pip" in src
    assert src.index("mlsys.labkit.device.setup()") < src.index("import triton")


def test_kernel_cells_are_tagged_for_the_gpu_experiment():
    assert KERNEL_CELLS == ["operands", "naive_kernel", "tiled_kernel", "grouped_kernel"]
    for gid in KERNEL_CELLS[1:4]:  # the exercises
        assert _cell(gid)["metadata"]["nbgrader"]["solution"]
    # the persistent TMA kernel is in the optional notebook beside the lab, not in the lab's core path
    from mlsys.bench.experiments.lab2_matmul import GOING_FURTHER

    tagged = [c.source for c in nbexec.code_cells(GOING_FURTHER) if "lab2-kernel" in c.tags]
    assert len(tagged) == 1 and "def matmul_tma(" in tagged[0]
    assert not any("matmul_tma" in c.source for c in nbexec.code_cells(NOTEBOOK))


def test_perf_cell_is_measured_by_the_trusted_process():
    """The perf cell only names its spec: the timer, cuBLAS reference and fresh-input checks live in
    mlsys.grader.decide.trusted, captured before any answer cell runs (issue 11)."""
    import tomllib

    src = _source(_cell("perf_matmul"))
    assert 'grade_performance("lab2_tiled_matmul", "perf_matmul")' in src and "time_fn" not in src
    spec = tomllib.loads((NOTEBOOK.parent / "perf.toml").read_text())["perf_matmul"]
    assert spec["function"] == "matmul" and spec["forbid"] == "matmul"  # no cuBLAS inside the learner's kernel
    assert spec["full_at"] == 0.5 and spec["points"] == _cell("perf_matmul")["metadata"]["nbgrader"]["points"]
    assert spec["baseline_expr"] == "torch.matmul(a, b)"  # the same-run reference is cuBLAS


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
    # the aligned case really runs the TMA kernel, the others go to `fallback` (the grouped matmul here)
    calls = []
    monkeypatch.setattr(lab, "fallback", lambda a, b: calls.append("fallback") or torch.zeros(a.shape[0], b.shape[1]))
    grading.assert_close(lab.matmul_tma(a16, b16), _expected(a16, b16), **TOL[torch.float16])
    assert calls == []
    lab.matmul_tma(torch.randn(5, 33), torch.randn(33, 7))
    assert calls == ["fallback"]


def test_tma_wrapper_aligns_b_rows_and_halves_a_thin_last_row_of_tiles():
    """By hand: 136 fp16 columns are 272 bytes, not a whole number of 128-byte lines; the copy's rows are
    3 lines = 192 elements apart and hold the same values. 64 columns (128 bytes) are left as they are.
    With the interpreter's 32-row tiles, 72 = 2 * 32 + 8 rows leave 8 <= 16: half tiles; 90 leaves 26: not."""
    b = torch.randn(40, 136).half()
    aligned = lab.line_aligned(b)
    assert aligned.stride() == (192, 1) and aligned.shape == b.shape and torch.equal(aligned, b)
    b64 = torch.randn(40, 64).half()
    assert lab.line_aligned(b64) is b64
    assert lab.half_last_row({"M": 72, "BLOCK_M": 32})
    assert not lab.half_last_row({"M": 90, "BLOCK_M": 32}) and not lab.half_last_row({"M": 96, "BLOCK_M": 32})
    a = torch.randn(72, 40).half()  # both measures at once: 2 whole rows of tiles and a half one, B copied
    grading.assert_close(lab.matmul_tma(a, b), _expected(a, b), **TOL[torch.float16])


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


def _unmasked_matmul():
    """The unmasked kernel above, defined as a notebook cell would be (source readable by Triton)."""
    src = _UNMASKED.split('if __name__ == "__main__":')[0]
    filename = "<lab2-unmasked>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    scope: dict = {"__name__": "lab2_unmasked"}
    exec(compile(src, filename, "exec"), scope)
    return scope["matmul"]


@pytest.mark.skipif(DEVICE != "cpu", reason="an out-of-bounds load on a GPU may corrupt the test process's context")
def test_a_kernel_without_masks_is_caught_and_located():
    # Without masks, the last k-step of a 65 x 127 x 33 product reads 31 columns past each row of A and rows
    # past the end of B. The check runs it in its own process on guarded copies: the loads outside A are
    # reported as such, and the process running the tests survives whatever the kernel does.
    a, b = torch.randn(65, 33), torch.randn(33, 127)
    with pytest.raises(grading.GradingError, match=r"your kernel read .* of A .*check the load mask"):
        checks.check_kernel(_unmasked_matmul(), (a, b), _expected(a, b), names=("A", "B"), output_names=("C",),
                            row_gap=3, rtol=1e-4, atol=1e-4)


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


# ------------------------------------------------------------------------------ the recorded figures


def _run_reference_cell() -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(_source(_cell("reference_figures")), {})
    return buf.getvalue()


def test_figures_cell_quotes_the_recorded_run(tmp_path, monkeypatch):
    slug = "nvidia-h100-80gb-hbm3"
    source = REPO / "data" / "measurements" / slug / "lab2_matmul.json"
    record = json.loads(source.read_text())
    # a recording elsewhere (as in an installed package): the one loader finds it through the data path
    (tmp_path / slug).mkdir()
    (tmp_path / slug / "lab2_matmul.json").write_text(json.dumps(record))
    monkeypatch.setenv("MLSYS_MEASUREMENTS_DIR", str(tmp_path))
    printed = _run_reference_cell()
    head = record["results"]["headline"]
    assert record["device"]["name"] in printed and record["date"][:10] in printed
    assert f"{100 * head['ratio']:.0f}% of torch.matmul" in printed and "tiled 64x64" in printed
    # the record stores {value, unit}; the cell prints TFLOP/s (1 TFLOP/s = 1e12 FLOP/s)
    tflops = head["throughput"]["value"] * {"TFLOP/s": 1.0, "FLOP/s": 1e-12}[head["throughput"]["unit"]]
    assert f"reached {tflops:.0f} TFLOP/s at {head['size']}^3" in printed
    assert 'mlsys.bench.run("lab2_matmul")' in printed


def test_figures_cell_copes_without_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MLSYS_MEASUREMENTS_DIR", str(tmp_path))  # an empty recording directory
    assert re.search(r"not in this copy of the course", _run_reference_cell())


@pytest.mark.slow
def test_lab2_experiment_quick_run_on_the_cpu():
    """The experiment that records the lab's H100 figures runs the same kernels (tiny sizes, interpreter)."""
    from mlsys.bench.experiment import run
    from mlsys.bench.experiments import lab2_matmul

    record = run("lab2_matmul", quick=True, device="cpu")
    data = record["results"]
    assert record["quick"] and record["device"]["kind"] == "cpu" and record["software"]["triton"]
    assert data["all_correct"] and data["failures"] == []
    shapes = [f"{m}x{n}x{k}" for m, n, k in lab2_matmul.TINY_SHAPES]
    for name, sizes in lab2_matmul.TINY_SIZES.items():
        cubes = [s for s in data["throughput"][name] if s.isdigit()]
        assert sorted(int(s) for s in cubes) == sorted(sizes)
        # every kernel but the naive one also runs the non-cubic shapes
        assert sorted(set(data["throughput"][name]) - set(cubes)) == ([] if name == "naive" else shapes)
    head = data["headline"]
    assert head["size"] == max(lab2_matmul.TINY_SIZES["grouped+autotuned"])
    # the ratio is cuBLAS time / kernel time = kernel throughput / cuBLAS throughput at the same size
    assert head["ratio"] == pytest.approx(head["throughput"]["value"] / head["cublas_throughput"]["value"], rel=1e-9)
    # the lowest share is the minimum over the sizes and shapes it names, of the ratios recorded beside it
    for name, low in data["lowest_share_of_cublas"].items():
        assert low["missing"] == [] and low["at"] in low["over"] and shapes[0] in low["over"]
        assert low["share"] == min(data["ratio_to_cublas"][name][s] for s in low["over"])


# the two recorded GPUs: (slug, the name the record must carry, the datasheet entry of mlsys.hardware)
RECORDED_GPUS = [("nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3", "H100"), ("nvidia-h200", "NVIDIA H200", "H200")]


@pytest.mark.parametrize(("slug", "name", "chip"), RECORDED_GPUS)
def test_recorded_run_holds_the_reference_near_cublas(slug, name, chip):
    """The H100 record (2026-11-27) and the H200 record (2026-11-26), the same kernels: every share is
    cuBLAS's time over the kernel's, both taken in one interleaved run; the persistent+TMA reference is
    within 5% of cuBLAS on the power-of-two cubes and the short-k shape. The size that is not a multiple of
    128 is recorded and named as the lowest; the issue's 0.95 is NOT reached there on either GPU (0.900 on
    the H100, 0.851 on the H200: rows 10,000 bytes apart and 800 tiles of 128 x 256 on 132 SMs; the kernel
    copies B to aligned rows and runs the 8-row last row of tiles as half tiles, which took the H200 from
    0.73 to 0.85)."""
    rec = json.loads((REPO / "data" / "measurements" / slug / "lab2_matmul.json").read_text())
    assert rec["device"]["name"] == name and not rec["quick"]
    data = rec["results"]
    assert data["all_correct"] and data["failures"] == []
    assert "interleaved" in data["method"]["method"]
    times = data["time"]
    peak = mlsys.hardware.get(chip).peak("fp16").to("TFLOP/s").magnitude
    for name, by in data["ratio_to_cublas"].items():
        for label, ratio in by.items():
            assert ratio == pytest.approx(times["torch.matmul"][label]["value"] / times[name][label]["value"], rel=1e-9)
            m, n, k = (int(x) for x in label.split("x")) if "x" in label else (int(label),) * 3
            assert 2 * m * n * k / times[name][label]["value"] / 1e12 < peak  # nothing beats the datasheet
    tma = data["ratio_to_cublas"]["persistent+TMA"]
    for label in ("2048", "4096", "8192", "8192x8192x512"):
        assert tma[label] >= 0.95, label
    low = data["lowest_share_of_cublas"]["persistent+TMA"]
    assert low["share"] == min(tma[s] for s in low["over"]) and set(low["over"]) >= {"2048", "4096", "8192"}
    # the wave count behind the miss, by hand: ceil(5000/128) * ceil(5000/256) = 40 * 20 tiles over 132 SMs
    assert low["at"] == "5000x5000x5000" and mlsys.tiling.tile_grid(5000, 5000, 128, 256).total == 800
    assert low["share"] < 0.95  # short of the target: a kernel that reaches it updates this


def test_load_counts_reads_ptx_by_hand():
    """Two 16-byte asynchronous copies, three one-element fp16 loads (plain, non-coherent, unsigned) and one
    16-byte vector load, which is neither."""
    from mlsys.bench.experiments.lab2_matmul import load_counts

    ptx = """
    cp.async.cg.shared.global [ %r1 + 0 ], [ %rd2 + 0 ], 0x10, %r3;
    @%p2 cp.async.cg.shared.global [ %r4 + 0 ], [ %rd5 + 0 ], 0x10, %r6;
    ld.global.b16 { %rs1 }, [ %rd7 + 0 ];
    @%p3 ld.global.nc.b16 { %rs2 }, [ %rd8 + 0 ];
    ld.global.u16 %rs3, [%rd9];
    ld.global.v4.b32 { %r7, %r8, %r9, %r10 }, [ %rd10 + 0 ];
    """
    assert load_counts(ptx) == {"async_copies": 2, "two_byte_loads": 3}


@pytest.mark.parametrize(("slug", "name", "chip"), RECORDED_GPUS)
def test_recorded_run_says_why_the_awkward_size_is_slow(slug, name, chip):
    """Each record (H100, H200) explains both misses at 5000^3. The grouped kernel compiled for 5000 (no argument
    divisible by 16) has no 16-byte asynchronous copy and loads elements two bytes at a time, against copies
    and no such loads at 4096. And cuBLAS ran a kernel named for a 256 x 152 tile there: by hand,
    ceil(5000/256) * ceil(5000/152) = 20 * 33 = 660 tiles = 5 * 132, whole waves on either GPU's 132 SMs,
    where the reference's 128 x 256 tiles make 40 * 20 = 800 (6.06 waves)."""
    rec = json.loads((REPO / "data" / "measurements" / slug / "lab2_matmul.json").read_text())
    assert rec["device"]["name"] == name and mlsys.hardware.get(chip).sm_count == 132
    loads = rec["results"]["grouped_loads"]
    assert loads["5000x5000x5000"]["async_copies"] == 0 and loads["5000x5000x5000"]["two_byte_loads"] > 0
    assert loads["4096"]["async_copies"] > 0 and loads["4096"]["two_byte_loads"] == 0
    assert loads["5000x5000x5000"]["shared_memory"]["value"] < loads["4096"]["shared_memory"]["value"]
    name = rec["results"]["library_kernels"]["5000x5000x5000"][0]
    tile = re.search(r"_(\d+)x(\d+)_", name)
    assert (int(tile[1]), int(tile[2])) == (256, 152)
    assert mlsys.tiling.tile_grid(5000, 5000, 256, 152).total == 660 == 5 * rec["device"]["sm_count"]
    ratios = rec["results"]["ratio_to_cublas"]
    assert ratios["grouped+autotuned"]["5000x5000x5000"] < 0.2 < 0.9 < ratios["grouped+autotuned"]["4096"]
