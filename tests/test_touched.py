"""A learner's kernel that writes outside its output gets a picture of where, beside the message.

The kernel is Lab 2's tiled matmul with its store mask missing, run through ``checks.check_kernel`` (what
the labs' ``check_matmul`` calls) under Triton's interpreter on a CPU. Expected counts by hand below.
"""

from __future__ import annotations

import time

import pytest

import mlsys

mlsys.labkit.device.setup()  # TRITON_INTERPRET=1 without CUDA, before triton is imported

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from mlsys.diagrams import touched  # noqa: E402
from mlsys.labkit import checks  # noqa: E402
from mlsys.labkit.grading import GradingError  # noqa: E402


@triton.jit
def _matmul_no_store_mask(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                          stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, MASK_STORE: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    if MASK_STORE:
        tl.store(ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
    else:
        tl.store(ptrs, acc)  # the learner's mistake: no store mask


def _launcher(mask_store: bool):
    def matmul(a, b):
        m, k = a.shape
        n = b.shape[1]
        c = torch.empty((m, n), dtype=a.dtype, device=a.device)
        grid = (triton.cdiv(m, 16), triton.cdiv(n, 16))
        _matmul_no_store_mask[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                    c.stride(0), c.stride(1), BLOCK_M=16, BLOCK_N=16, BLOCK_K=16,
                                    MASK_STORE=mask_store)
        return c
    return matmul


def test_missing_store_mask_draws_the_elements_written_outside_c(monkeypatch):
    shown = []
    monkeypatch.setattr(touched, "_display", shown.append)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(20, 20, generator=g), torch.randn(20, 20, generator=g)
    with pytest.raises(GradingError, match="past the end of C.*check the store mask"):
        checks.check_kernel(_launcher(False), (a, b), a @ b, names=("A", "B"), output_names=("C",),
                            rtol=1e-4, atol=1e-4, label="matmul")
    assert len(shown) == 1
    # 2 x 2 programs of 16 x 16 cover rows 0..31 and columns 0..31 of a row-major 20 x 20 C: they store at
    # offsets r * 20 + c for r, c < 32, every offset from 0 to 31 * 20 + 31 = 651; C ends at 399, so
    # 400..651 are outside: 252 elements, in rows 20..32 of the 20-wide map
    grid = touched.touched_map((20, 20), outside=list(range(400, 652)))
    assert np.sum(grid == touched.OUTSIDE) == 252 and grid.shape == (33, 20)
    texts = [t.get_text() for t in shown[0].legends[0].get_texts()]
    assert "written outside (past the end): 252" in texts and "written: 400" in texts


def test_a_correct_kernel_draws_nothing(monkeypatch):
    shown = []
    monkeypatch.setattr(touched, "_display", shown.append)
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(20, 12, generator=g), torch.randn(12, 20, generator=g)
    checks.check_kernel(_launcher(True), (a, b), a @ b, names=("A", "B"), output_names=("C",), rtol=1e-4,
                        atol=1e-4, label="matmul")
    assert shown == []


def test_unwritten_elements_are_drawn_and_quickly():
    class Report:  # what a guard report carries: a 1-D output of 10 with 3 never written, 2 stores past it
        shapes = {"out": (10,)}
        bad_stores = {"out": [10, 11]}
        unwritten_at = {"out": [7, 8, 9]}

    start = time.process_time()
    figs = touched.report_figures(Report())
    figs[0].canvas.draw()
    assert time.process_time() - start < 1.0  # on a CPU, in well under a second
    texts = [t.get_text() for t in figs[0].legends[0].get_texts()]
    assert texts == ["written: 7", "never written: 3", "written outside (past the end): 2"]


def test_a_hostile_report_is_not_drawn():
    class Report:
        shapes = {"out": (1 << 40,), "odd": (3, -1), "fine": (4, 4)}
        bad_stores = {"out": [1], "odd": [1], "fine": [10**12, 16]}
        unwritten_at = {}

    figs = touched.report_figures(Report())
    assert len(figs) == 1  # only "fine", and without the store 10**12 elements away
    texts = [t.get_text() for t in figs[0].legends[0].get_texts()]
    assert "written outside (past the end): 1" in texts
    assert touched.show_report(object()) == []


def test_lab5_attention_output_is_folded_into_rows():
    class Report:  # a [batch, heads, seq, head_dim] = [1, 2, 37, 16] output: 2 * 37 = 74 rows of 16
        shapes = {"the output": (1, 2, 37, 16)}
        bad_stores = {"the output": [1184, 1185, 1199]}  # 1184 = 74 * 16: the first element past the end
        unwritten_at = {"the output": [0]}

    fig = touched.report_figures(Report())[0]
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts == ["written: 1183", "never written: 1", "written outside (past the end): 3"]
    assert fig.axes[0].images[0].get_array().shape == (75, 16)  # one row of guard below the 74 rows
