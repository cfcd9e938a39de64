"""Trusted performance grading (mlsys.course.trusted) with the fake timer: every refusal, on a CPU.

The fake timer reports 1 ms for every timed callable, so an honest function's share of the
baseline is exactly 1 and earns full credit (full_at = 0.5); each attack below must earn zero with
a reason naming what it did.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from mlsys.course import trusted  # noqa: E402

CASE = {"function": "double", "points": 2, "args": {"x": [257]}, "dtype": "float32", "reference": "x * 2",
        "baseline": "copy", "forbid": "matmul", "rtol": 1e-6, "atol": 0.0, "repeats": 3, "warmup": 1}


def _verdict(cells: list[str], case: dict | None = None) -> dict:
    """The verdict of a fresh ``python -m mlsys.course.trusted`` process, as the grader runs it
    (fresh, because an attack changes the process it runs in)."""
    import json
    import os
    import subprocess
    import sys

    job = {"cases": {"perf_double": case or CASE}, "cells": cells, "fake": True, "seed": 7, "nonce": "N0NCE"}
    proc = subprocess.run([sys.executable, "-P", "-m", "mlsys.course.trusted"], input=json.dumps(job),
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("N0NCE "))
    return json.loads(line[len("N0NCE "):])["verdicts"]["perf_double"]


@pytest.mark.slow  # a trusted process: ~3 s of CPU
def test_honest_function_gets_full_credit():
    v = _verdict(["def double(x):\n    return x + x\n"])
    assert v["reason"] == "" and v["credit"] == 1.0 and v["score"] == 2.0
    assert "share 1" in v["lines"][0] and "fake timer" in v["lines"][0]


@pytest.mark.slow  # a trusted process per attack: ~3 s of CPU each
@pytest.mark.parametrize("cells, reason", [
    (["import mlsys.bench.timing as t\nt.time_fn = lambda *a, **k: None\ndef double(x): return x + x\n"],
     "mlsys.bench.timing.time_fn was replaced"),
    (["import time\ntime.perf_counter = lambda: 0.0\ndef double(x): return x + x\n"], "time.perf_counter was replaced"),
    (["import torch\n_c = torch.Tensor.copy_\ntorch.Tensor.copy_ = lambda s, o: _c(s, o)\ndef double(x): return x + x\n"],
     "torch.Tensor.copy_"),
    (["import torch\ntorch.matmul = lambda a, b: a\ndef double(x): return x + x\n"], "torch.matmul was replaced"),
    (["from mlsys.course import grading\ngrading.assert_close = lambda *a, **k: None\ndef double(x): return x\n"],
     "mlsys.course.grading.assert_close was replaced"),
    (["import torch\nlib = torch.library.Library('aten', 'IMPL')\nlib.impl('mul.Tensor', lambda a, b: a, 'CPU')\n"
      "def double(x): return x * 2\n"], "torch.library"),
    (["import torch\ndef double(x):\n    return torch.mv(torch.eye(x.shape[0]) * 2, x)\n"], "aten::mv"),
    (["import torch\ndef double(x):\n    return (x.unsqueeze(0) @ (torch.eye(x.shape[0]) * 2)).squeeze(0)\n"], "aten::mm"),
    (["def double(x):\n    return x * 3\n"], "fails its correctness check"),
    (["def double(x):\n    x.mul_(2)\n    return x\n"], "changed its input"),
    (["n = [0]\ndef double(x):\n    n[0] += 1\n    return x + x if n[0] < 3 else x\n"], "results after timing differ"),
    (["raise RuntimeError('no answer yet')\n"], "no function double()"),
    (["import torch\nfrom torch.utils._python_dispatch import TorchDispatchMode\n"
      "class M(TorchDispatchMode):\n    def __torch_dispatch__(self, f, t, a=(), k=None):\n        return f(*a, **(k or {}))\n"
      "M().__enter__()\ndef double(x): return x + x\n"], "dispatch mode"),
])
def test_attacks_earn_no_performance_credit(cells, reason):
    v = _verdict(cells)
    assert v["credit"] == 0.0 and v["score"] == 0.0, v
    assert reason in v["reason"], v["reason"]


@pytest.mark.slow  # a trusted process: ~3 s of CPU
def test_attention_by_the_library_is_refused_on_every_backend():
    """SDPA on a CPU runs aten::_scaled_dot_product_flash_attention_for_cpu, a name no list held (Lab 5's
    calls_sdpa cheat earned full performance credit under the fake timer before the prefix rule)."""
    case = {"function": "attention", "points": 2, "args": {"q": [1, 2, 8, 16], "k": [1, 2, 8, 16], "v": [1, 2, 8, 16]},
            "dtype": "float32", "reference": "torch.nn.functional.scaled_dot_product_attention(q, k, v)",
            "forbid": "matmul", "rtol": 1e-5, "atol": 1e-5, "repeats": 2, "warmup": 1}
    v = _verdict(["import torch\ndef attention(q, k, v):\n"
                  "    return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n"], case)
    assert v["credit"] == 0.0 and "aten::_scaled_dot_product_flash_attention_for_cpu" in v["reason"], v


@pytest.mark.slow  # torch.compile: ~4 s of CPU
def test_compiled_torch_code_shows_its_library_ops():
    """torch.compile is disabled while the ops are recorded, so compiled torch code cannot hide a matmul."""
    v = _verdict(["import torch\n@torch.compile\ndef double(x):\n    return torch.mv(torch.eye(x.shape[0]) * 2, x)\n"])
    assert v["credit"] == 0.0 and "aten::mv" in v["reason"], v


@pytest.mark.slow  # ~5.5 s of CPU
def test_forbid_compute_allows_only_allocation_and_views():
    case = dict(CASE, forbid="compute")
    assert "aten::add" in _verdict(["def double(x):\n    return x + x\n"], case)["reason"]
    v = _verdict(["import torch\ndef double(x):\n    out = torch.empty_like(x)\n    out.copy_(x)\n    return out * 2\n"],
                 case)
    assert "aten::mul" in v["reason"]


@pytest.mark.slow  # ~5.4 s of CPU
def test_kwargs_reach_every_call_of_the_function():
    """kwargs = { factor = 2 }: the learner's double(x, factor=1) only passes if every call gets factor=2
    (the correctness check, the timed calls and the fresh inputs after timing)."""
    case = dict(CASE, kwargs={"factor": 2}, fresh_args={"x": [1000]})
    v = _verdict(["def double(x, factor=1):\n    return x * factor\n"], case)
    assert v["reason"] == "" and v["credit"] == 1.0, v
    v = _verdict(["def double(x, factor=1):\n    return x * factor\n"], CASE)
    assert "fails its correctness check" in v["reason"], v


@pytest.mark.slow  # trusted processes: ~2.8 s of CPU
def test_credit_is_linear_between_zero_at_and_full_at():
    v = _verdict(["def double(x):\n    return x + x\n"], dict(CASE, full_at=4.0, zero_at=0.0))
    assert v["credit"] == pytest.approx(0.25) and v["score"] == pytest.approx(0.5)


@pytest.mark.parametrize("change, message", [
    ({"baseline": "cuBLAS"}, "baseline must be"),
    ({"forbid": "nothing"}, "forbid must be"),
    ({"full_at": 0.0}, "full_at > zero_at"),
    ({"colour": "red"}, "unknown keys"),
    ({"args": []}, "args must be a table"),
    ({"fresh_args": {"y": [3]}}, "fresh_args must name the same arguments"),
    ({"kwargs": {"causal": [1, 2]}}, "kwargs must be a table of plain values"),
])
def test_malformed_spec_is_rejected_with_its_reason(change, message):
    with pytest.raises(ValueError, match=message):
        trusted.PerfCase.from_dict("perf_double", dict(CASE, **change))


def test_spec_file_loads(tmp_path):
    (tmp_path / "perf.toml").write_text('[perf_x]\nfunction = "f"\npoints = 1\nargs = { a = [4, 4], b = [4, 4] }\n'
                                        'dtype = "float16"\nreference = "torch.matmul(a, b)"\n')
    spec = trusted.load_spec(tmp_path / "perf.toml")
    assert list(spec) == ["perf_x"] and list(spec["perf_x"].args) == ["a", "b"]
    assert spec["perf_x"].quick_args == spec["perf_x"].args and spec["perf_x"].baseline == "reference"


def test_preview_without_gpu_prints_not_graded(capsys, monkeypatch):
    monkeypatch.delenv("MLSYS_FAKE_TIMER", raising=False)
    monkeypatch.setattr("mlsys.runtime.device.has_cuda", lambda: False)
    assert trusted.grade_performance("lab0_tiny", "perf_double", fake=False) == 0.0
    assert "performance: not graded (no GPU)" in capsys.readouterr().out
