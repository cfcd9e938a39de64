"""Lab 3 (kernel fusion): the notebook's structure, its reference kernels and its checks, on a CPU.

The kernels are taken from the instructor notebook itself (the cells with the kernels' grade_ids,
executed with :mod:`mlsys.runtime.notebook`, as the GPU experiment loads them) and run under the Triton
interpreter. Expected values are worked out by hand in the comments, or come from PyTorch's own ops
(an independent implementation).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from pathlib import Path

import pytest

import mlsys

mlsys.labkit.device.setup()  # TRITON_INTERPRET=1 without CUDA, before the kernels are defined

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from mlsys.labkit import checks, grading  # noqa: E402
from mlsys.runtime import notebook as nbexec  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "labs" / "source" / "lab3_fusion" / "lab3_fusion.ipynb"
DEVICE = mlsys.labkit.device.default_device()
KERNEL_CELLS = ("fused_elementwise_kernel", "fused_elementwise", "fused_softmax_kernel", "fused_softmax")
# the notebook's cells run once per session (conftest's lab3_kernels), not at import
ns: dict = {}
fused_relu_affine = fused_softmax = None


@pytest.fixture(autouse=True, scope="module")
def _kernels(lab3_kernels):
    global ns, fused_relu_affine, fused_softmax
    ns = vars(lab3_kernels)
    fused_relu_affine, fused_softmax = ns["fused_relu_affine"], ns["fused_softmax"]


def _cells() -> list[dict]:
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


# ------------------------------------------------------------------------------ notebook structure


def test_nbgrader_metadata_is_schema_3_with_unique_grade_ids():
    ids = []
    manual = []
    for cell in _cells():
        meta = cell.get("metadata", {}).get("nbgrader")
        if meta is None:
            continue
        assert meta["schema_version"] == 3
        ids.append(meta["grade_id"])
        src = _source(cell)
        if meta["solution"]:
            assert "### BEGIN SOLUTION" in src and "### END SOLUTION" in src, meta["grade_id"]
            if meta["grade"]:  # a written answer, graded by hand (Exercise 7)
                assert cell["cell_type"] == "markdown" and meta["points"] > 0, meta["grade_id"]
                manual.append(meta["grade_id"])
                continue
        if meta["grade"]:
            assert meta["grade_id"].startswith(("test_", "perf_")), meta["grade_id"]
            assert meta["points"] > 0 and meta["locked"]
            assert "raises-exception" in cell["metadata"].get("tags", [])
        if "### BEGIN HIDDEN TESTS" in src:
            assert meta["grade"], f"hidden tests outside a test cell: {meta['grade_id']}"
    assert len(ids) == len(set(ids)), "grade ids must be unique"
    assert manual == ["explain_softmax_limits"]
    for needed in (*KERNEL_CELLS, "test_predict", "test_count_kernels", "test_fused_elementwise",
                   "test_softmax", "test_softmax_stable", "perf_fused_elementwise", "perf_softmax"):
        assert needed in ids


def test_perf_cells_are_measured_by_the_trusted_process():
    """Each perf cell only names its spec; the copy baseline, timer and fresh-input checks live in
    mlsys.grader.decide.trusted, captured before any answer cell runs (issue 11)."""
    import tomllib

    specs = tomllib.loads((NOTEBOOK.parent / "perf.toml").read_text())
    perf = {cell["metadata"]["nbgrader"]["grade_id"]: cell for cell in _cells()
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "").startswith("perf_")}
    assert set(perf) == set(specs) == {"perf_fused_elementwise", "perf_softmax"}
    for gid, cell in perf.items():
        assert f'grade_performance("lab3_fusion", "{gid}")' in _source(cell)
        spec = specs[gid]
        assert spec["baseline"] == "copy" and spec["forbid"] == "compute" and spec["full_at"] == 0.7
        assert spec["points"] == cell["metadata"]["nbgrader"]["points"]


# ------------------------------------------------------------------------------ the fused element-wise kernel


def test_elementwise_hand_values():
    # relu(x) * 0.5 + 1.0: -2 -> 0*0.5+1 = 1; -0.5 -> 1; 0 -> 1; 0.5 -> 1.25; 3 -> 2.5
    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 3.0], device=DEVICE)
    expected = torch.tensor([1.0, 1.0, 1.0, 1.25, 2.5], device=DEVICE)
    grading.assert_close(fused_relu_affine(x), expected, rtol=0, atol=0)
    # scale -2, shift 0.25: 3 -> -6 + 0.25 = -5.75; -1 -> 0.25
    y = fused_relu_affine(torch.tensor([3.0, -1.0], device=DEVICE), -2.0, 0.25)
    grading.assert_close(y, torch.tensor([-5.75, 0.25], device=DEVICE), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(1,), (1023,), (1025,), (3 * 1024 + 7,), (17, 61)])
def test_elementwise_odd_sizes(dtype, shape):
    # sizes around and off multiples of BLOCK = 1024: the masked last block
    x = torch.randn(shape, device=DEVICE, dtype=dtype)
    out = fused_relu_affine(x)
    expected = (torch.relu(x.float()) * 0.5 + 1.0).to(dtype)
    tol = 1e-6 if dtype == torch.float32 else 1e-3
    grading.assert_close(out, expected, rtol=tol, atol=tol)
    assert out.data_ptr() != x.data_ptr()


def test_elementwise_rejects_bad_input():
    with pytest.raises(TypeError, match="floating-point"):
        fused_relu_affine(torch.arange(4))
    with pytest.raises(ValueError, match="contiguous"):
        fused_relu_affine(torch.randn(8, 8, device=DEVICE).t())
    assert fused_relu_affine(torch.empty(0, device=DEVICE)).numel() == 0


# ------------------------------------------------------------------------------ the fused softmax


def test_softmax_hand_values():
    # softmax([0, ln 3]) = [1, 3] / 4 = [0.25, 0.75]
    y = fused_softmax(torch.tensor([[0.0, math.log(3.0)]], device=DEVICE))
    grading.assert_close(y, torch.tensor([[0.25, 0.75]], device=DEVICE), rtol=1e-6, atol=1e-7)
    # large logits: softmax([1e4, 1e4 + 1]) = [1, e] / (1 + e) = [0.2689414, 0.7310586]
    # (1e4 + 1 is exact in fp32); exp(1e4) alone would overflow to inf
    big = fused_softmax(torch.tensor([[1e4, 1e4 + 1.0]], device=DEVICE))
    e = math.e
    grading.assert_close(big, torch.tensor([[1 / (1 + e), e / (1 + e)]], device=DEVICE), rtol=1e-6, atol=1e-7)
    # a row of n equal logits gives 1/n each; n = 1 gives exactly 1
    grading.assert_close(fused_softmax(torch.full((2, 5), -3e4, device=DEVICE)),
                         torch.full((2, 5), 0.2, device=DEVICE), rtol=1e-6, atol=0)
    grading.assert_close(fused_softmax(torch.tensor([[7.0]], device=DEVICE)),
                         torch.tensor([[1.0]], device=DEVICE), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(3,), (5, 1), (7, 33), (3, 1025), (2, 3, 100)])
def test_softmax_odd_shapes(dtype, shape):
    # 1025 columns need a block of 2048 with 1023 masked lanes
    x = torch.randn(shape, device=DEVICE, dtype=dtype)
    expected = torch.softmax(x.float(), dim=-1).to(dtype)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-3)
    grading.assert_close(fused_softmax(x), expected, **tol)


@pytest.mark.parametrize("dtype,limit", [(torch.float32, 1e4), (torch.float16, 6e4)])
def test_softmax_is_stable_on_large_inputs(dtype, limit):
    x = ((torch.rand(6, 300, device=DEVICE) * 2 - 1) * limit).to(dtype)
    y = fused_softmax(x)
    grading.assert_finite(y)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-3)
    grading.assert_close(y, torch.softmax(x.float(), dim=-1).to(dtype), **tol)
    # the rows still sum to one
    grading.assert_close(y.float().sum(-1), torch.ones(6, device=DEVICE), rtol=0, atol=1e-2 if dtype == torch.float16 else 1e-5)


def test_softmax_rejects_rows_that_do_not_fit():
    with pytest.raises(ValueError, match="at most"):
        fused_softmax(torch.randn(1, ns["MAX_SOFTMAX_COLS"] + 1))
    with pytest.raises(TypeError):
        fused_softmax(torch.tensor(1.0))


# ------------------------------------------------------------------------------ the grader's cheat detection


def test_reference_solution_passes_no_library_calls():
    grading.assert_no_library_calls(fused_relu_affine, forbidden=grading.FORBIDDEN_TORCH_OPS)
    grading.assert_no_library_calls(fused_softmax, forbidden=grading.FORBIDDEN_TORCH_OPS)


def _define(src: str):
    scope = {"torch": torch}
    filename = f"<lab3-cheat-{abs(hash(src))}>"
    import linecache

    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), scope)
    return scope["f"]


@pytest.mark.parametrize("src", [
    "def f(x, scale=0.5, shift=1.0):\n    return torch.relu(x) * scale + shift\n",
    "def f(x, scale=0.5, shift=1.0):\n    return x.relu().mul(scale).add(shift)\n",
    "def f(x, scale=0.5, shift=1.0):\n    return torch.clamp(x, min=0) * scale + shift\n",
    "def f(x):\n    return torch.softmax(x, dim=-1)\n",
    "def f(x):\n    return torch.nn.functional.softmax(x, -1)\n",
    "def f(x):\n    e = (x - x.amax(-1, keepdim=True)).exp()\n    return e / e.sum(-1, keepdim=True)\n",
])
def test_torch_ops_instead_of_a_kernel_are_rejected(src):
    cheat = _define(src)
    with pytest.raises(grading.GradingError, match="implement the computation yourself"):
        grading.assert_no_library_calls(cheat, forbidden=grading.FORBIDDEN_TORCH_OPS)


# ------------------------------------------------------------------------------ the notebook, run as nbgrader would


def _stub_solutions(cells: list[dict]) -> list[dict]:
    """What nbgrader's ClearSolutions leaves: each solution region becomes a NotImplementedError."""
    out = []
    pattern = re.compile(r"^([ \t]*)### BEGIN SOLUTION.*?### END SOLUTION[^\n]*", re.S | re.M)
    for cell in cells:
        cell = dict(cell)
        src = _source(cell)
        cell["source"] = pattern.sub(lambda m: f"{m.group(1)}raise NotImplementedError()", src)
        out.append(cell)
    return out


def _graded(records: list[dict]) -> dict[str, dict]:
    return {r["grade_id"]: r for r in records if r["grade_id"].startswith(("test_", "perf_"))}


@pytest.mark.slow
def test_instructor_version_passes_every_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no data/measurements here: the reference cell must cope
    graded = _graded(nbexec.run_cells(NOTEBOOK))
    assert graded and all(r["status"] == "ok" for r in graded.values()), graded
    for name, r in graded.items():
        if name.startswith("perf_") and not grading.has_cuda():
            assert grading.NOT_GRADED in r["output"] and r["value"] == 0.0


@pytest.mark.slow
def test_student_version_fails_every_correctness_check(tmp_path):
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    nb["cells"] = _stub_solutions(nb["cells"])
    stub = tmp_path / "lab3_fusion.ipynb"
    stub.write_text(json.dumps(nb), encoding="utf-8")
    graded = _graded(nbexec.run_cells(stub))
    assert {"test_predict", "test_count_kernels", "test_fused_elementwise", "test_softmax",
            "test_softmax_stable"} <= set(graded)
    for name, r in graded.items():
        if name.startswith("test_"):
            assert r["status"] != "ok", f"{name} passes without a solution"


def _cell_src(gid: str) -> str:
    return _source(next(c for c in _cells() if c["metadata"].get("nbgrader", {}).get("grade_id") == gid))


def test_figures_cell_quotes_the_recorded_run_or_copes_without_it(tmp_path, monkeypatch):
    slug = "nvidia-h100-80gb-hbm3"
    (tmp_path / slug).mkdir()
    for name in ("lab3_fusion.json", "roofs.json"):
        (tmp_path / slug / name).write_text((REPO / "data" / "measurements" / slug / name).read_text())
    record = json.loads((tmp_path / slug / "lab3_fusion.json").read_text())
    roofs = json.loads((tmp_path / slug / "roofs.json").read_text())
    monkeypatch.setenv("MLSYS_MEASUREMENTS_DIR", str(tmp_path))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):  # the chain's arities come from an earlier cell: relu, * 0.5, + 1.0 read one each
        exec(_cell_src("reference_figures"), {"relu_chain_arities": [1, 1, 1]})
    printed = buf.getvalue()
    assert record["device"]["name"] in printed and "softmax" in printed and "relu(x)*0.5+1.0" in printed
    # the eager/Triton speedup it prints is time(eager) / time(Triton) of the recorded 4096 x 4096 fp32 row
    row = next(r for r in record["results"]["elementwise"] if r["dtype"] == "fp32" and r["shape"] == [4096, 4096])
    assert f"{row['eager']['time']['value'] / row['triton']['time']['value']:.2f}x" in printed
    # one launch cost across the book: the roofs' launch_eager, not the lab's own launch_overhead
    launch = roofs["figures"]["launch_eager"]
    assert launch["unit"] == "s"
    assert f"one eager launch: {launch['value'] * 1e6:.1f} us" in printed
    # the model by hand: 3 eager kernels moving 8 byte/element each (read fp32 x, write fp32 result),
    # pipelined as L + k + 2 max(L, k), against one fused kernel L + 8 n / B
    n, bw, L = row["numel"], row["copy_bandwidth"]["value"], launch["value"]
    k = 8 * n / bw
    by_hand = (L + k + 2 * max(L, k)) / (L + 8 * n / bw)
    assert f"(model: {by_hand:.2f}x)" in printed
    # a learner's copy before section 1 is answered (the release under nbval): the figures, without the model
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(_cell_src("reference_figures"), {})
    assert f"{row['eager']['time']['value'] / row['triton']['time']['value']:.2f}x" in buf.getvalue()
    assert "model:" not in buf.getvalue()
    (tmp_path / slug / "lab3_fusion.json").unlink()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(_cell_src("reference_figures"), {"relu_chain_arities": [1, 1, 1]})
    assert "No nvidia-h100-80gb-hbm3 reference figures" in buf.getvalue()


def test_softmax_that_reads_its_row_twice_is_caught():
    src = _cell_src("fused_softmax_kernel")
    twice = src.replace("    numerator = tl.exp(z)\n",
                        "    x2 = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=-float('inf')).to(tl.float32)\n"
                        "    numerator = tl.exp(x2 - tl.max(x, axis=0))\n")
    assert twice != src
    scope = dict(ns)
    nbexec.exec_cell(twice, "<lab3 softmax read twice>", scope)
    nbexec.exec_cell(_cell_src("fused_softmax"), "<lab3 fused_softmax>", scope)
    x = torch.randn(4, 100)
    # the values are right: only the load count gives it away (2 x 400 element loads of x)
    with pytest.raises(grading.GradingError, match=r"loaded 800 elements of x, 2 times its 400"):
        checks.check_kernel(scope["fused_softmax"], (x,), torch.softmax(x, -1), names=("x",), output_names=("out",),
                            rtol=1e-5, atol=1e-6, max_reads={"x": 1})


# ------------------------------------------------------------------------------ graded end to end (mlsys.grader.teach)


@pytest.mark.slow
@pytest.mark.parametrize("lab", ["lab3_fusion"])  # graded_lab's worker group (tests/conftest.py)
def test_grading_a_kernel_cell_that_calls_torch_ops(lab, graded_lab):
    """Graded by nbgrader through mlsys.grader.teach: a submission whose launchers call PyTorch's ops instead
    of the Triton kernels loses those two tests (4 + 4 points) and the stable-softmax test, whose calls the
    library check now covers when the cell ends (2 points: its softmax is ``torch.softmax``), and keeps
    2 (predict) + 2 (count kernels) = 4 of 14. It is the student ``torch_ops`` of the
    lab's one graded course (tests/conftest.py's EDITED: the instructor notebook with ``fused_elementwise``
    and ``fused_softmax`` answered by ``torch.relu(x) * scale + shift`` and ``torch.softmax(x, dim=-1)``);
    the instructor version and the untouched release beside it are checked by the pipeline's own tests."""
    _, rows = graded_lab(lab)
    row = rows["torch_ops"]
    assert row.status == "ok" and row.correctness_max == 14, row
    assert row.correctness_score == 4, row
    if not grading.has_cuda():
        assert row.performance == "not graded (no GPU)", row


@pytest.mark.slow
def test_lab3_experiment_quick_run_on_the_cpu():
    """The experiment that records the lab's H100 figures runs the notebook's kernels (tiny sizes, interpreter)."""
    from mlsys.bench.experiment import run

    data = run("lab3_fusion", quick=True, device="cpu")["results"]
    assert data["copy_bandwidth"]["unit"] == "byte/s"
    row = data["elementwise"][0]
    # relu(x)*0.5+1.0 on 1000 fp32 elements: unfused 6 * 4000 B, fused 2 * 4000 B
    assert row["traffic_model"]["unfused"]["value"] == 24000 and row["traffic_model"]["fused"]["value"] == 8000
    for r in data["elementwise"] + data["softmax"]:
        assert r["triton"]["time"]["value"] > 0 and r["triton"]["time"]["unit"] == "s"


@pytest.mark.parametrize(("slug", "name"), [("nvidia-h100-80gb-hbm3", "NVIDIA H100 80GB HBM3"),
                                          ("nvidia-h200", "NVIDIA H200")])
def test_recorded_run_reaches_the_copy_bandwidth_at_the_graded_shapes(slug, name):
    """The H100 and H200 records (2026-11-28, the softmax launched with 32 bytes of a row per thread): the fused
    element-wise kernel and the softmax at the graded shapes (perf.toml) within 5% of the copy measured beside
    them, in every round of the softmax's spread, idle or not. The lowest shares the record keeps are the
    minimum over every shape: 0.95 where the traffic exceeds the L2, 0.90 below it (with 16 warps on every long row, the fp16
    softmax at 8192 x 4096 had been at 0.80 on the H200 and 0.94 on the H100)."""
    rec = json.loads((REPO / "data" / "measurements" / slug / "lab3_fusion.json").read_text())
    assert rec["device"]["name"] == name and not rec["quick"]
    data = rec["results"]
    ew = next(r for r in data["elementwise"] if r["shape"] == [4096, 4096] and r["dtype"] == "fp32")
    sm = next(r for r in data["softmax"] if r["shape"] == [16384, 2048] and r["dtype"] == "fp32")
    for row in (ew, sm):
        nbytes = 2 * math.prod(row["shape"]) * 4  # read once, write once, fp32
        share = nbytes / row["triton"]["time"]["value"] / row["copy_bandwidth"]["value"]
        assert share == pytest.approx(row["triton"]["share_of_copy"], rel=1e-9) and share >= 0.95
    spread = next(s for s in data["softmax_spread"] if s["shape"] == [16384, 2048])
    # both ways of timing: right after the GPU idled, and after a spin-up
    assert len(spread["rounds"]) >= 4 and {r["mode"].startswith("after a ") for r in spread["rounds"]} == {True, False}
    assert min(r["triton_share_of_copy"] for r in spread["rounds"]) >= 0.95
    # the lowest shares: of every row, not of the graded ones; each share is bytes / time / copy bandwidth
    low = data["lowest_share_of_copy"]
    for key in ("elementwise", "softmax"):  # both read their input once and write their output once
        shares = []
        for r in data[key]:
            nbytes = 2 * math.prod(r["shape"]) * {"fp32": 4, "fp16": 2}[r["dtype"]]
            shares.append(nbytes / r["triton"]["time"]["value"] / r["copy_bandwidth"]["value"])
        assert low[key] == pytest.approx(min(shares), rel=1e-9)
        # 0.95 of the copy wherever the kernel's traffic is larger than the L2; a shape whose traffic fits in the
        # L2 is held to 0.90 (the H200's softmax at 4096 x 781, 25.6 MB beside a 60 MB L2, measured 0.947 with the
        # read flush on 2026-12-02, and 0.90 in the sweep of 2026-11-28; a kernel of a few microseconds, not profiled: why is not known)
        l2 = rec["device"]["l2_cache"]["value"]
        for r, share in zip(data[key], shares, strict=True):
            nbytes = 2 * math.prod(r["shape"]) * {"fp32": 4, "fp16": 2}[r["dtype"]]
            assert share >= (0.95 if nbytes > l2 else 0.90), (key, r["shape"], r["dtype"], share)


def test_recorded_h200_copy_is_faster_than_the_h100s():
    """The copy on the H200 faster than the H100's by more than a third (4.8 vs 3.35 TB/s on the datasheets),
    each measured on 1 GiB buffers in its own lab3_fusion record."""
    h200 = json.loads((REPO / "data" / "measurements" / "nvidia-h200" / "lab3_fusion.json").read_text())["results"]
    h100 = json.loads((REPO / "data" / "measurements" / "nvidia-h100-80gb-hbm3" / "lab3_fusion.json").read_text())
    ratio = h200["copy_bandwidth_large"]["value"] / h100["results"]["copy_bandwidth_large"]["value"]
    assert ratio > 4 / 3
