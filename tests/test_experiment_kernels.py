"""The experiments own their kernels: one parametrised Triton matmul, Lab 2's kernel read from the lab,
chapter 8's kernels the same source as the ones whose PTX and SASS the chapter quotes (CPU, Triton's interpreter)."""

from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path

import pytest

import mlsys

mlsys.labkit.device.setup()  # TRITON_INTERPRET=1 without CUDA, before triton is imported

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from mlsys.bench.experiments import _matmul, kernel_artefacts, ncu_lab2  # noqa: E402
from mlsys.runtime.notebook import code_cells  # noqa: E402
from mlsys.runtime.paths import checkout, lab_notebook  # noqa: E402

DEVICE = mlsys.labkit.device.default_device()


def _expected(a, b):
    return (a.double() @ b.double()).to(a.dtype)


def test_tiles_by_hand():
    assert _matmul.tiles(4096, 4096, 128, 128) == 32 * 32
    assert _matmul.tiles(129, 1, 128, 128) == 2  # one full row of tiles and one sliver, one column
    assert _matmul.tiles(1, 1, 16, 16) == 1


@pytest.mark.parametrize("group_m", [1, 3])
@pytest.mark.parametrize("shape", [pytest.param((33, 47, 29), marks=pytest.mark.slow), (16, 16, 16),
                                   pytest.param((5, 70, 3), marks=pytest.mark.slow)])
def test_the_one_matmul_is_exact_at_every_edge(shape, group_m):
    m, n, k = shape
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=g, device=DEVICE), torch.randn(k, n, generator=g, device=DEVICE)
    c = _matmul.matmul(a, b, 16, 16, 16, num_warps=4, num_stages=1, group_m=group_m)
    torch.testing.assert_close(c, _expected(a, b), rtol=1e-4, atol=1e-4)
    # transposed views: the kernel follows the strides
    c = _matmul.matmul(b.t(), a.t(), 16, 16, 16, num_warps=4, num_stages=1, group_m=group_m)
    torch.testing.assert_close(c, _expected(b.t(), a.t()), rtol=1e-4, atol=1e-4)


def test_the_one_matmul_refuses_bad_shapes():
    with pytest.raises(ValueError, match="matrices"):
        _matmul.matmul(torch.zeros(2, 3), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="group_m"):
        _matmul.matmul(torch.zeros(2, 3), torch.zeros(3, 2), group_m=0)


def test_tile_configs_and_wave_quantization_share_it():
    from mlsys.bench.experiments import tile_configs, wave_quantization

    assert tile_configs.matmul is _matmul.matmul and wave_quantization.matmul is _matmul.matmul
    src = Path(tile_configs.__file__).read_text() + Path(wave_quantization.__file__).read_text()
    assert "@triton.jit" not in src  # no private copy of a matmul kernel


@pytest.mark.slow  # runs Lab 2's kernel cells and two launches under the interpreter
def test_ncu_profiles_lab2s_own_kernel():
    kernel = ncu_lab2._kernel(DEVICE)
    assert kernel.fn.__name__ == "matmul_kernel"
    body = textwrap.dedent(inspect.getsource(kernel.fn))
    cell = next(c.source for c in code_cells(lab_notebook("lab2_tiled_matmul")) if "def matmul_kernel(" in c.source)
    assert body.strip().splitlines()[-1] in cell and "def matmul_kernel(" in body  # read from the notebook
    assert "def matmul_kernel" not in Path(ncu_lab2.__file__).read_text()  # and not copied here
    g = torch.Generator().manual_seed(0)
    for m, n, k in ((40, 24, 32), (33, 17, 29)):  # K a multiple of the block, and not
        a = torch.randn(m, k, generator=g, device=DEVICE)
        b = torch.randn(k, n, generator=g, device=DEVICE)
        cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2, "num_stages": 1, "num_warps": 4}
        torch.testing.assert_close(ncu_lab2.matmul(a, b, cfg), _expected(a, b), rtol=1e-4, atol=1e-4)


def _normalised(src: str) -> str:
    lines = [re.sub(r"\s+#.*$", "", ln).rstrip() for ln in textwrap.dedent(src).splitlines()]
    return "\n".join(ln for ln in lines if ln)


def _chapter_kernel(name: str) -> str:
    page = (checkout() / "chapters" / "08_writing_kernels.md").read_text(encoding="utf-8")
    match = re.search(rf"^@triton\.jit\ndef {name}\(.*?(?=^\S)", page, re.S | re.M)
    assert match, f"chapter 8 shows no @triton.jit kernel {name}"
    return match.group(0)


@pytest.mark.parametrize(("chapter_name", "experiment_name"), [("add_kernel", "vector_add"),
                                                                ("softmax_kernel", "softmax_rows")])
def test_chapter_8_kernels_are_the_ones_the_experiment_compiles(chapter_name, experiment_name):
    kernel = kernel_artefacts._triton_kernels()[experiment_name]
    assert _normalised(inspect.getsource(kernel.fn)) == _normalised(_chapter_kernel(chapter_name))
