"""Trusted performance grading (mlsys.grader.decide.trusted) with the fake timer: every refusal, on a CPU.

The fake timer reports 1 ms for every timed callable, so an honest function's share of the
baseline is exactly 1 and earns full credit (full_at = 0.5); each attack below must earn zero with
a reason naming what it did.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from mlsys.grader.decide import trusted  # noqa: E402

CASE = {"function": "double", "points": 2, "args": {"x": [257]}, "dtype": "float32", "reference": "x * 2",
        "baseline": "copy", "forbid": "matmul", "rtol": 1e-6, "atol": 0.0, "repeats": 3, "warmup": 1}


def _verdict(cells: list[str], case: dict | None = None) -> dict:
    """The verdict of a fresh ``python -m mlsys.grader.decide.trusted`` process, as the grader runs it
    (fresh, because an attack changes the process it runs in)."""
    import json
    import os
    import subprocess
    import sys

    job = {"cases": {"perf_double": case or CASE}, "cells": cells, "fake": True, "seed": 7, "nonce": "N0NCE"}
    proc = subprocess.run([sys.executable, "-P", "-m", "mlsys.grader.decide.trusted"], input=json.dumps(job),
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("N0NCE "))
    return json.loads(line[len("N0NCE "):])["verdicts"]["perf_double"]


@pytest.mark.slow  # a trusted process: ~3 s of CPU
def test_honest_function_gets_full_credit():
    v = _verdict(["def double(x):\n    return x + x\n"])
    assert v["reason"] == "" and v["credit"] == 1.0 and v["score"] == 2.0
    assert "share 1" in v["lines"][0] and "fake timer" in v["lines"][0]


HONEST = "def double(x):\n    return x + x\n"


@pytest.mark.slow  # a trusted process per attack: ~3 s of CPU each
@pytest.mark.parametrize("cells, reason", [
    # the learner's worker patched: the verdict process neither imports nor runs any of it
    (["import mlsys.grader.decide.trusted as t\nt.forbidden_ops = lambda *a: []\nt.credit_of = lambda *a: 1.0\n"
      "import torch\ndef double(x):\n    return torch.mv(torch.eye(x.shape[0]) * 2, x)\n"], "aten::mv"),
    (["import sys, torch\nsys.modules['__main__'].make_inputs = lambda t, s, d, seed, dev: "
      "tuple(torch.ones(*x) for x in s)\n" + HONEST], "differ from the reference"),
    (["import torch\nlib = torch.library.Library('aten', 'IMPL')\nlib.impl('mul.Tensor', lambda a, b: a, 'CPU')\n"
      "def double(x): return x * 2\n"], "differ from the reference"),
    # library routines (recorded at the dispatcher in the checked call)
    (["import torch\ndef double(x):\n    return torch.mv(torch.eye(x.shape[0]) * 2, x)\n"], "aten::mv"),
    (["import torch\ndef double(x):\n    return (x.unsqueeze(0) @ (torch.eye(x.shape[0]) * 2)).squeeze(0)\n"], "aten::mm"),
    (["import sys, torch\nsys.modules['__main__']._recorder = lambda torch, seen: (lambda f, a, k: f(*a, **k))\n"
      "def double(x):\n    return torch.mv(torch.eye(x.shape[0]) * 2, x)\n"], "neither an aten computation nor a Triton kernel"),
    (["import numpy as np, torch\ndef double(x):\n    return torch.from_numpy((np.eye(x.shape[0], dtype=np.float32) * 2) @ x.numpy())\n"],
     "neither an aten computation nor a Triton kernel"),
    # semantics: caching, stale buffers, copies, precision, in-place
    (["cache = {}\ndef double(x):\n    k = tuple(x.shape)\n    if k not in cache:\n        cache[k] = x + x\n"
      "    return cache[k]\n"], "differ from the reference"),
    (["def double(x):\n    return x\n"], "differ from the reference"),
    (["import torch\ndef double(x):\n    return (x.half() * 2).float()\n"], "differ from the reference"),
    (["import torch\ndef double(x):\n    return (x * 2).half()\n"], "expected a float32 tensor"),
    (["def double(x):\n    x.mul_(2)\n    return x\n"], "changed its input"),
    (["def double(x):\n    return x * 3\n"], "differ from the reference"),
    (["n = [0]\ndef double(x):\n    n[0] += 1\n    return x + x if n[0] < 3 else x\n"], "differ from the reference"),
    # results that only look like tensors
    (["import torch\nclass Lazy(torch.Tensor):\n    pass\ndef double(x):\n    return (x + x).as_subclass(Lazy)\n"],
     "expected exactly a torch.Tensor"),
    (["class T:\n    __module__ = 'torch'\n    def __init__(self, x): self.x = x\n"
      "    def __getattr__(self, k): return getattr(self.x + self.x, k)\ndef double(x):\n    return T(x)\n"],
     "expected exactly a torch.Tensor"),
    # timing: work finished by a thread after the call returned
    (["import threading, time, torch\ndef double(x):\n    out = torch.zeros_like(x)\n"
      "    threading.Thread(target=lambda: (time.sleep(0.2), out.copy_(x * 2))).start()\n    return out\n"],
     "refused"),
    (["raise RuntimeError('no answer yet')\n"], "no function double()"),
])
@pytest.mark.slow
def test_attacks_earn_no_performance_credit(cells, reason):
    v = _verdict(cells)
    assert v["credit"] == 0.0 and v["score"] == 0.0, v
    assert reason in v["reason"], v["reason"]


@pytest.mark.parametrize("patch", [
    "import mlsys.bench.timing as t\nt.time_fn = lambda *a, **k: None\n",
    "import time\ntime.perf_counter = lambda: 0.0\n",
    "import torch\nfrom torch.utils._python_dispatch import TorchDispatchMode\n"
    "class M(TorchDispatchMode):\n    def __torch_dispatch__(self, f, t, a=(), k=None):\n        return f(*a, **(k or {}))\n"
    "M().__enter__()\n",
])
@pytest.mark.slow
def test_patches_in_the_learners_process_change_nothing(patch):
    """The clock, the checks and the credit live in the verdict process: patching the learner's own
    process leaves an honest function's verdict as it was, and a wrong one still refused."""
    assert _verdict([patch + HONEST])["credit"] == 1.0
    assert "differ from the reference" in _verdict([patch + "def double(x):\n    return x\n"])["reason"]


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
    assert "differ from the reference" in v["reason"], v


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


# ----------------------------------------------------------------------------------------------
# the decisions, from evidence given to them directly (no process started)

TRITON = {"matmul_kernel"}


@pytest.mark.parametrize("kernels, forbid, why", [
    ({"matmul_kernel": [20, 4000.0]}, "matmul", ""),
    ({"matmul_kernel": [20, 4000.0], "Memcpy DtoD (Device -> Device)": [20, 10.0]}, "compute", ""),
    ({"sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64": [20, 3000.0]}, "matmul", "vendor library"),
    ({"matmul_kernel": [20, 100.0], "cutlass_80_tensorop_h16816gemm": [20, 3000.0]}, "matmul", "vendor library"),
    ({"void at::native::vectorized_elementwise_kernel<4, MulFunctor>": [20, 4000.0]}, "compute", "other than your Triton"),
    ({}, "matmul", "no kernel of yours"),
    ({"philox_harness": [40, 50.0]}, "matmul", "no kernel of yours"),
    ({"matmul_kernel": [20, 100.0]}, "matmul", "accounts for"),
    ({"matmul_kernel_0d1d2d": [20, 4000.0]}, "matmul", ""),
    ({"matmul_kernel_v2_x": [20, 4000.0]}, "matmul", "no kernel of yours"),
])
def test_kernel_trace_decision(kernels, forbid, why):
    """A round of 20 calls measured at 200 us each: the learner's Triton kernel may run; vendor kernels,
    other kernels (where everything must be written by hand), nothing at all, or a trace that saw a
    tenth of the measured time (100 us over 20 calls = 5 us of 200 us) may not."""
    got = trusted.kernel_refusal(forbid, kernels, {"philox_harness"}, TRITON, True, 20, 200e-6)
    assert (why in got) if why else got == "", got


def test_a_triton_kernel_named_like_a_library_kernel_is_refused():
    """Naming a kernel after cuBLAS's would otherwise pass cuBLAS's own kernel off as the learner's."""
    name = "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64"
    got = trusted.kernel_refusal("matmul", {name: [20, 4000.0]}, set(), {name}, True, 20, 200e-6)
    assert "named like library kernels" in got


def test_triton_kernel_names_are_read_from_source_without_running_it():
    cells = ["import triton\nimport triton.language as tl\n@triton.jit\ndef add_kernel(x_ptr):\n    pass\n",
             "from triton import jit\n@jit\ndef k2(p):\n    pass\n@triton.autotune(configs=[], key=[])\n@triton.jit\n"
             "def k3(p):\n    pass\ndef host(x):\n    raise SystemExit  # never runs\n",
             "%timeit host(1)\n", "def broken(:\n"]
    assert trusted.triton_kernel_names(cells) == {"add_kernel", "k2", "k3"}


def test_roofline_floor_is_the_slower_of_compute_and_traffic():
    """A 4096^3 fp16 matmul on a roof of 989 TFLOP/s and 4.8 TB/s: 2 * 4096^3 / 989e12 = 1.3897e-4 s of
    compute against 3 * 4096^2 * 2 byte / 4.8e12 = 2.097e-5 s of traffic."""
    from mlsys.roofline import Roof
    from mlsys.units import ureg

    roof = Roof(989e12 * ureg("FLOP/s"), 4.8e12 * ureg("byte/s"))
    assert trusted.roofline_floor(2 * 4096**3, 3 * 4096**2 * 2, roof) == pytest.approx(1.3897e-4, rel=1e-4)
    assert trusted.roofline_floor(1, 1e9, roof) == pytest.approx(1e9 / 4.8e12)


def test_credit_and_spread():
    case = trusted.PerfCase.from_dict("perf_double", dict(CASE, full_at=0.7, zero_at=0.1))
    assert trusted.credit_of(0.4, case) == pytest.approx(0.5)
    assert trusted.credit_of(0.05, case) == 0.0 and trusted.credit_of(2.0, case) == 1.0
    assert trusted.spread([1.0, 1.1, 1.05]) == pytest.approx(0.1)


def test_wire_carries_bytes_not_objects():
    """A worker's tensors come back from raw bytes, exact torch.Tensor, and a malformed message is refused."""
    import os

    import torch

    from mlsys.grader.clean import perfwire

    r, w = os.pipe()
    t = torch.arange(6, dtype=torch.float16).reshape(2, 3)
    desc, raw = perfwire.tensor_bytes(t)
    perfwire.send(w, {"tensors": [desc]}, [raw])
    head, blobs = perfwire.recv(r)
    back = perfwire.tensor_from_bytes(head["tensors"][0], blobs[0])
    assert type(back) is torch.Tensor and back.dtype == torch.float16 and torch.equal(back, t)
    with pytest.raises(perfwire.WireError, match="do not hold"):
        perfwire.tensor_from_bytes({"dtype": "float32", "shape": [2, 3]}, b"\0" * 8)
    with pytest.raises(perfwire.WireError, match="is not one of"):
        perfwire.tensor_from_bytes({"dtype": "object", "shape": [1]}, b"\0" * 8)
    os.write(w, (3).to_bytes(8, "big") + b"[1]")
    with pytest.raises(perfwire.WireError, match="JSON object"):
        perfwire.recv(r)
    os.close(w)
    with pytest.raises(perfwire.WireError, match="closed"):
        perfwire.recv(r)
    os.close(r)


def test_preview_in_the_notebook_runs_the_same_checks(capsys):
    """The learner's preview (fake timer, in the notebook's own process) passes an honest function and
    refuses a cached one with the same sentence the grader would write."""
    from pathlib import Path

    spec = Path(__file__).resolve().parent / "bad_submissions" / "source" / "lab0_tiny" / "perf.toml"
    assert float(trusted.grade_performance("lab0_tiny", "perf_speed", spec=spec, fake=True,
                                           namespace={"double": lambda x: x + x})) == 1.0
    cache: dict = {}

    def cached(x):
        return cache.setdefault(tuple(x.shape), x + x)
    assert float(trusted.grade_performance("lab0_tiny", "perf_speed", spec=spec, fake=True,
                                           namespace={"double": cached})) == 0.0
    assert "differ from the reference" in capsys.readouterr().out


def test_preview_round_time_leaves_out_the_copies_to_the_host(monkeypatch):
    """In the notebook's own process the round's outputs are copied to the host after its "done", as a worker
    process does: on an H200 timing the copies made Lab 2's instructor kernel look 280 times slower than
    torch.matmul (2026-12-02, share 0.0036 against 0.72 in the grader)."""
    import time

    import torch

    from mlsys.grader.clean import perfwire

    slow_copy = perfwire.tensor_bytes

    def tensor_bytes(t):
        time.sleep(0.2)
        return slow_copy(t)
    monkeypatch.setattr(perfwire, "tensor_bytes", tensor_bytes)
    case = trusted.PerfCase.from_dict("perf_double", CASE)
    v = trusted._Verdict(False, time.monotonic() + 60)
    worker = trusted._LocalWorker({"double": lambda x: x + x}, v.device)
    win = v.window(worker, {"name": "double"}, case, [[257]], [3, 4], send_outputs=True, send_inputs=True)
    assert win.seconds < 0.2  # two calls of a 257-element add; the four copies (0.8 s) come after "done"
    assert win.wall_s < 0.2 and len(win.outputs) == 2 and len(win.inputs) == 2
    assert all(torch.equal(o, 2 * i) for o, i in zip(win.outputs, win.inputs, strict=True))


@pytest.mark.slow
def test_a_worker_that_dies_or_garbles_the_wire_earns_nothing():
    """The learner's worker exits in the middle of a checked call, or writes garbage where the grader
    reads its answers: the verdict process says so and gives no credit (it never trusts the wire)."""
    v = _verdict(["import os\ndef double(x):\n    os._exit(3)\n"])
    assert v["credit"] == 0.0 and "stopped answering" in v["reason"], v
    v = _verdict(["import os\ndef double(x):\n    for fd in range(3, 12):\n        try:\n"
                  "            os.write(fd, (99).to_bytes(8, 'big') + b'{' * 99)\n        except OSError:\n"
                  "            pass\n    return x + x\n"])
    assert v["credit"] == 0.0 and v["reason"].startswith("refused"), v


# ------------------------------------------------------------------ the tiny lab's corpus, in the verdict process

TINY_CORPUS = Path(__file__).resolve().parent / "bad_submissions"


def _tiny_cases_graded_here() -> list[str]:
    import json

    every = json.loads((TINY_CORPUS / "expected.json").read_text())
    here = "test_trusted.py::test_tiny_corpus_perf_attacks_in_the_verdict_process"
    return sorted(name for name, want in every.items() if want.get("covered_by") == here)


@pytest.mark.slow  # a trusted process per case: ~3 s of CPU each
@pytest.mark.parametrize("name", _tiny_cases_graded_here())
def test_tiny_corpus_perf_attacks_in_the_verdict_process(name):
    """The corpus' performance attacks that no case above makes (a cache keyed on the input's address, one
    buffer handed back every call, a slowed baseline), from their notebooks' answer cells under the tiny
    lab's perf.toml: the performance score and reason expected.json gives (tests/test_lab_pipeline.py
    grades the corpus' other cases end to end, through the sandbox)."""
    import json
    import subprocess
    import sys
    import tomllib

    from mlsys.grader.decide.trusted import answer_cells

    want = json.loads((TINY_CORPUS / "expected.json").read_text())[name]
    cases = tomllib.loads((TINY_CORPUS / "source" / "lab0_tiny" / "perf.toml").read_text(encoding="utf-8"))
    nb = json.loads((TINY_CORPUS / f"{name}.nb.json").read_text())
    job = {"cases": cases, "cells": answer_cells(nb), "fake": True, "seed": 7, "nonce": "N0NCE", "cell_timeout": 60}
    proc = subprocess.run([sys.executable, "-P", "-m", "mlsys.grader.decide.trusted"], input=json.dumps(job),
                          capture_output=True, text=True, timeout=300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("N0NCE ")), None)
    assert line is not None, proc.stderr[-3000:]
    v = json.loads(line[len("N0NCE "):])["verdicts"]["perf_speed"]
    assert v["score"] == want["performance_score"], (name, v)
    assert want.get("reason", "") in v["reason"] and (v["reason"] == "") == (want["performance_score"] > 0), (name, v)


def test_the_tiny_corpus_sends_its_uncovered_perf_attacks_here():
    assert _tiny_cases_graded_here() == ["patch_reference", "perf_cache_by_address", "perf_stale_buffer"]


# ------------------------------------------------------------------ Lab 4: a collective on two ranks

LAB4_PERF = Path(__file__).resolve().parent / "bad_submissions" / "lab4_perf"


def _lab4_job(cells: list[str]) -> dict:
    """The verdicts of Lab 4's perf.toml on ``cells``: a fresh verdict process, two gloo ranks of the
    learner and two of the baseline, every decision taken for real under the fake timer."""
    import json
    import subprocess
    import sys
    import tomllib

    from mlsys.runtime.paths import labs_root

    cases = tomllib.loads((labs_root() / "source" / "lab4_collectives" / "perf.toml").read_text(encoding="utf-8"))
    job = {"cases": cases, "cells": cells, "fake": True, "nonce": "N0NCE", "cell_timeout": 120}
    proc = subprocess.run([sys.executable, "-P", "-m", "mlsys.grader.decide.trusted"], input=json.dumps(job),
                          capture_output=True, text=True, timeout=900)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("N0NCE ")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line[len("N0NCE "):])


def _lab4_perf_cases() -> dict[str, dict]:
    import json

    return json.loads((LAB4_PERF / "expected.json").read_text())


def test_every_lab4_perf_case_has_its_expected_row():
    assert {p.name.removesuffix(".nb.json") for p in LAB4_PERF.glob("*.nb.json")} == set(_lab4_perf_cases())


# one test per case (each a grading with four torch processes), so that the test workers share them out
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_lab4_perf_cases()))
def test_lab4_ring_attacks_earn_no_performance_credit_on_two_gloo_ranks(name):
    """tests/bad_submissions/lab4_perf: the library's all-reduce reached through the process group or
    below the dispatcher, a cache, a rebound ``grading``, patched clocks, a result finished after return."""
    import json

    from mlsys.grader.decide.trusted import answer_cells

    want = _lab4_perf_cases()[name]
    nb = json.loads((LAB4_PERF / f"{name}.nb.json").read_text())
    v = _lab4_job(answer_cells(nb))["verdicts"]["perf_ring"]
    assert v["score"] == want["performance_score"], f"{name}: {v['score']} {v['reason']}"
    assert want["reason"] in v["reason"], f"{name}: {v['reason']}"
    if want["performance_score"]:
        assert "2 rounds" in v["lines"][0] or "3 rounds" in v["lines"][0], v["lines"]


@pytest.mark.slow  # the whole instructor notebook's answer cells in two ranks (launches of their own included)
def test_lab4_instructor_ring_earns_full_performance_credit_on_the_cpu_path():
    import json

    from mlsys.grader.decide.trusted import answer_cells
    from mlsys.runtime.paths import lab_notebook

    result = _lab4_job(answer_cells(json.loads(lab_notebook("lab4_collectives").read_text(encoding="utf-8"))))
    v = result["verdicts"]["perf_ring"]
    assert v["score"] == 2.0 and not v["reason"], (v, result.get("notes"))
    assert "fake timer" in v["lines"][0]


def test_collectives_decision():
    """Which recorded ops a "collectives" case refuses, and what counts as a point-to-point exchange."""
    from mlsys.grader.decide.trusted import exchanged_point_to_point, forbidden_ops

    ring = ["empty.memory_format", "c10d:send", "c10d:recv_", "add_.Tensor"]
    assert forbidden_ops("collectives", ring) == [] and exchanged_point_to_point(ring)
    assert forbidden_ops("collectives", ring + ["c10d::allreduce_.default"]) == ["c10d::allreduce_"]
    assert forbidden_ops("collectives", ["_c10d_functional::all_reduce"]) == ["_c10d_functional::all_reduce"]
    assert not exchanged_point_to_point(["add_.Tensor", "c10d:barrier"])  # a barrier moves no data
    # a Lab 2 or Lab 5 case refuses a dispatched all-reduce too, namespace or not
    assert forbidden_ops("matmul", ["c10d::allreduce_"]) == ["c10d::allreduce_"]
    # on a GPU, NCCL's send/receive kernel is the ring's own exchange; its all-reduce kernel is the library's
    kernels = {"ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)": [4, 900.0],
               "void at::native::vectorized_elementwise_kernel<add>": [4, 100.0]}
    assert trusted.kernel_refusal("collectives", kernels, set(), set(), False, 2, 400e-6) == ""
    kernels["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"] = [2, 800.0]
    assert "vendor library kernels" in trusted.kernel_refusal("collectives", kernels, set(), set(), False, 2, 400e-6)


def test_link_floor_uses_the_datasheet_link_per_direction():
    """An H200's NVLink: 900 GB/s both ways, 450 GB/s per direction (NVIDIA's datasheet); the GPU's
    name as CUDA gives it is looked up word by word."""
    import types

    from mlsys.grader.decide.trusted import _link_bandwidth

    def gpu(name: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(cuda=types.SimpleNamespace(get_device_name=lambda: name))
    assert _link_bandwidth(gpu("NVIDIA H200"))[1] == pytest.approx(450e9)
    assert _link_bandwidth(gpu("NVIDIA H100 80GB HBM3"))[1] == pytest.approx(450e9)
    assert _link_bandwidth(gpu("Some Unknown GPU")) is None


def test_outputs_cross_through_a_sealed_shared_region():
    """A round's outputs are copied once into a memfd the verdict made (sealed: the worker can neither
    shrink nor grow it), read back as the verdict's own copy, and a descriptor pointing outside is refused."""
    import mmap
    import os

    import torch

    from mlsys.grader.clean import perfwire
    from mlsys.grader.learnerbox import SHARED_BYTES, shared_region

    fd = shared_region()
    assert fd is not None, "memfd_create with seals is available on Linux"
    mm = mmap.mmap(fd, SHARED_BYTES)
    with pytest.raises(OSError):
        os.ftruncate(fd, 4096)  # F_SEAL_SHRINK
    outs = [torch.arange(10, dtype=torch.float16).reshape(2, 5), torch.tensor([1.5, -2.0], dtype=torch.float64)]
    descs = perfwire.tensors_to_shared(outs, mm)
    assert [d["offset"] for d in descs] == [0, 64]  # 20 bytes, then the next 64-byte boundary
    back = [perfwire.tensor_from_shared(d, mm, "cpu") for d in descs]
    assert all(torch.equal(a, b) and type(b) is torch.Tensor for a, b in zip(outs, back, strict=True))
    mm[0:4] = b"\xff\xff\xff\xff"  # the worker writes again: the copy already read does not change
    assert back[0][0, 0] == 0 and back[0][0, 1] == 1
    with pytest.raises(perfwire.WireError):
        perfwire.tensor_from_shared(dict(descs[0], offset=len(mm) - 4), mm, "cpu")
    with pytest.raises(perfwire.WireError):
        perfwire.tensor_from_shared(dict(descs[0], shape=[3, 5]), mm, "cpu")
    mm.close()
    os.close(fd)


def test_a_collective_below_the_dispatcher_is_flagged_for_the_teacher():
    """What a CPU grading cannot refuse outright (a backend-level all-reduce with a token send) the audit names."""
    import json

    from mlsys.grader.decide import audit

    nb = json.loads((LAB4_PERF / "backend_allreduce.nb.json").read_text())
    flags = audit.audit_notebook(nb)
    assert any(f.kind == "introspection" and "_get_backend" in f.what for f in flags), flags


def test_a_two_rank_case_on_one_gpu_is_not_graded_rather_than_zero(monkeypatch):
    """Lab 4 on the course's one-GPU grader: said to be not graded (no score), never scored 0."""
    import tomllib

    import torch

    from mlsys.labkit.grading import NOT_GRADED
    from mlsys.runtime.paths import labs_root

    monkeypatch.delenv("MLSYS_FAKE_TIMER", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cases = tomllib.loads((labs_root() / "source" / "lab4_collectives" / "perf.toml").read_text(encoding="utf-8"))
    v = trusted.run_job({"cases": cases, "cells": [], "fake": False})["verdicts"]["perf_ring"]
    assert v["credit"] is None and v["score"] is None and not v["reason"]
    assert v["lines"][0].startswith(NOT_GRADED) and "needs 2 GPUs" in v["lines"][0]


@pytest.mark.parametrize("traced_us, measured_us, refused", [
    (5.0, 200.0, True),     # a quarter of (200 - 50) is 37.5 us: 5 us of traced kernels leaves work unseen
    (40.0, 150.0, False),   # a quarter of (150 - 50) is 25 us: 40 us covers it
    (33.0, 100.0, False),   # Lab 3's element-wise kernel on an H200 (33 us) in its fastest round
    (33.0, 191.0, True),    # the same kernel in a round slowed by noise: why the verdict decides on the fastest
])
def test_trace_coverage_is_a_quarter_of_the_measured_time_beyond_the_slack(traced_us, measured_us, refused):
    got = trusted.coverage_refusal(traced_us * 1e-6, measured_us * 1e-6)
    assert ("accounts for" in got) if refused else got == "", got


def test_traced_time_per_call_leaves_out_the_harness():
    kernels = {"philox_harness": [40, 800.0], "add_kernel": [20, 400.0]}
    assert trusted.traced_per_call(kernels, {"philox_harness"}, 20) == pytest.approx(20e-6)  # 400 us / 20 calls


def test_trace_coverage_slack_grows_by_the_noise_of_the_graders_overhead():
    """The H200 run's overhead rounds were 6.3-7.5 ms for 20 calls: 60 us per call of noise. A round measured
    at 191 us then leaves a quarter of (191 - 50 - 60) = 20 us to cover, which 33 us of kernels does."""
    assert trusted.coverage_refusal(33e-6, 191e-6, noise_s=60e-6) == ""
    assert "accounts for" in trusted.coverage_refusal(5e-6, 191e-6, noise_s=60e-6)


def test_trace_coverage_slack_grows_by_what_the_baselines_trace_did_not_see():
    """The H200 corpus run of 2026-11-26 graded three submissions at once on one GPU: the baseline's 64 MiB copy
    (33 us of kernel) measured about 510 us per call, the honest learner's 528 us. The machine added ~480 us to
    both; a quarter of (528 - 50 - 480) is below zero, so the learner's 33 us covers it. Work hidden from the
    trace still shows: 600 us of it per call leaves a quarter of (1128 - 50 - 480) = 150 us uncovered."""
    assert "accounts for" in trusted.coverage_refusal(32.5e-6, 528e-6)
    assert trusted.coverage_refusal(32.5e-6, 528e-6, untraced_base_s=480e-6) == ""
    assert "accounts for" in trusted.coverage_refusal(32.5e-6, 1128e-6, untraced_base_s=480e-6)
    assert "accounts for" in trusted.coverage_refusal(5e-6, 200e-6, untraced_base_s=-1.0)  # never below zero


def test_a_coverage_refusal_is_measured_again_before_it_stands():
    """Rounds of 5 calls; the grader's own overhead round 2.5 ms; the clean baseline's round 3.0 ms with 70 us
    traced per call, so (3.0 - 2.5) / 5 - 0.07 = 30 us per call its trace did not see. A learner's round of
    9.0 ms is (9.0 - 2.5) / 5 = 1.3 ms per call: a quarter of (1300 - 50 - 30) = 305 us, which 41 us of traced
    kernels does not cover, so more rounds are measured. A later round of 3.0 ms (100 us per call) leaves a
    quarter of (100 - 50 - 30) = 5 us to cover: the fastest round clears it."""
    from types import SimpleNamespace

    case = trusted.PerfCase.from_dict("perf_double", dict(CASE, repeats=5))
    prep = trusted._Prepared(case=case, shapes=[], fresh_shapes=[], ref_fn=None, base_fn={}, empty_fn={},
                             base=[3.0e-3], over=[2.5e-3], base_traced=[70e-6])
    v = SimpleNamespace(fake=False)
    assert trusted._uncovered(v, prep, [41e-6], [9.0e-3, 9.4e-3])
    assert not trusted._uncovered(v, prep, [41e-6, 41e-6], [9.0e-3, 3.0e-3])
    assert not trusted._uncovered(v, prep, [], [9.0e-3])  # no trace (a CPU): nothing to judge
    assert not trusted._uncovered(SimpleNamespace(fake=True), prep, [41e-6], [9.0e-3])  # a fake clock: neither


def test_trace_coverage_slack_grows_by_how_much_the_baselines_untraced_time_varied():
    """Rounds of 5 calls, the baseline's copy traced at 70 us per call. Baseline rounds 8.64, 7.52, 7.46 ms and
    overhead rounds 2.71, 2.56, 3.45 ms: untraced per call (8.64 - 2.56) / 5 - 0.07 = 1.146 ms, then 0.922 and
    0.910 ms, so 0.910 ms allowed and 0.236 ms of spread; the overhead's noise is (3.45 - 2.56) / 5 = 0.178 ms.
    An honest learner at 1.42 ms per call with 31 us traced leaves a quarter of (1420 - 50 - 178 - 236 - 910)
    = 11.5 us to cover: covered (without the baseline's spread it would be 70.5 us: refused). Work hidden from
    the trace, 2.5 ms per call, leaves a quarter of (2500 - 50 - 178 - 236 - 910) = 281.5 us: refused."""
    from types import SimpleNamespace

    case = trusted.PerfCase.from_dict("perf_double", dict(CASE, repeats=5))
    prep = trusted._Prepared(case=case, shapes=[], fresh_shapes=[], ref_fn=None, base_fn={}, empty_fn={},
                             base=[8.64e-3, 7.52e-3, 7.46e-3], over=[2.71e-3, 2.56e-3, 3.45e-3],
                             base_traced=[70e-6, 70e-6, 70e-6])
    v = SimpleNamespace(fake=False)
    ev: dict = {}
    trusted._coverage_check(v, prep, [31e-6], 1.42e-3, ev)
    assert ev["baseline_untraced_s"] == pytest.approx(0.910e-3)
    with pytest.raises(trusted._Refused, match="accounts for 31 us of the 2.5e\\+03 us"):
        trusted._coverage_check(v, prep, [31e-6], 2.5e-3, {})


def test_a_round_that_skipped_the_graders_own_kernels_is_refused():
    """The clean worker's overhead round of 20 calls ran 1000 us of the grader's kernels (inputs, fingerprints):
    a learner's round of the same calls with 300 us of them (a cheaper fingerprint patched in, outputs computed
    from the seed) is refused; 900 us (kernel times vary a little) is not."""
    harness = {"normal_kernel", "reduce_kernel"}
    kernels = {"normal_kernel": [20, 100.0], "reduce_kernel": [20, 200.0], "add_kernel": [20, 700.0]}
    assert "grader's own kernels" in trusted.harness_refusal(kernels, harness, 1000.0)
    kernels.update({"normal_kernel": [20, 450.0], "reduce_kernel": [20, 450.0]})
    assert trusted.harness_refusal(kernels, harness, 1000.0) == ""
    assert trusted.harness_refusal({}, set(), 0.0) == ""  # no trace of the clean worker (a CPU): nothing to compare


def test_a_triton_kernel_named_like_the_graders_is_refused():
    """The grader's own kernels are left out of the learner's traced time and count as its overhead; a learner
    kernel of such a name would hide its work or stand in for the grader's."""
    got = trusted.kernel_refusal("compute", {"_grader_fill": [20, 4000.0]}, set(), {"_grader_fill"}, True, 20, 200e-6)
    assert "named like the grader's own" in got


@pytest.mark.slow
def test_harness_kernels_fill_and_fingerprint_under_the_interpreter(monkeypatch):
    """The grader's GPU kernels, run by Triton's interpreter on the CPU: the same seed gives the same inputs, another
    seed other values; values have mean 0 and variance 1 (uniform on +-sqrt 3); the fingerprint's (sum, 2-norm)
    equal torch's float64 sum and norm of the same tensor, for float16 and float32, across block boundaries."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import subprocess
    import sys

    code = """
import torch
from mlsys.grader.clean import harnesskernels as hk
a = hk.fresh_inputs(torch, [[300, 70], [9]], torch.float32, 2**61 + 5, "cpu")
b = hk.fresh_inputs(torch, [[300, 70], [9]], torch.float32, 2**61 + 5, "cpu")
c = hk.fresh_inputs(torch, [[300, 70]], torch.float32, 2**61 + 6, "cpu")
assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and not torch.equal(a[0], c[0])
assert not torch.equal(a[0].flatten()[:9], a[1])  # two arguments of one call differ
x = a[0].double()
assert abs(float(x.mean())) < 0.03 and abs(float(x.var()) - 1) < 0.03 and float(x.abs().max()) <= 3 ** 0.5
for o in (torch.randn(5000, dtype=torch.float64).half(), torch.randn(97, 131)):
    (s, n), = hk.reduce_partials(torch, [hk.fingerprint_partials(torch, o)])
    d = o.double()
    assert abs(s - float(d.sum())) <= 1e-9 * float(d.abs().sum()), (s, float(d.sum()))
    assert abs(n - float(d.norm())) <= 1e-12 * float(d.norm()), (n, float(d.norm()))
print("OK")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.stdout.strip().endswith("OK"), r.stderr[-2000:]


# ------------------------------------------------------------------ replay in a clean worker

def _replayed_verdict(cells: list[str]) -> dict:
    """As :func:`_verdict`, with the timed rounds run by replaying the recorded call in a clean worker
    (what a GPU grading does; ``MLSYS_GRADER_REPLAY=always`` does it on a CPU for functions of aten ops)."""
    import os

    old = os.environ.get(trusted.REPLAY_ENV)
    os.environ[trusted.REPLAY_ENV] = "always"
    try:
        return _verdict(cells)
    finally:
        if old is None:
            os.environ.pop(trusted.REPLAY_ENV)
        else:
            os.environ[trusted.REPLAY_ENV] = old


FORGED_PLAN = ("import mlsys.grader.clean.replay as r\nreal = r.record_call\n"
               "def forged(torch, fn, args, kwargs):\n"
               "    _, plan, blobs = real(torch, lambda x: x * 3, args, kwargs)\n"
               "    return fn(*args, **kwargs), plan, blobs\nr.record_call = forged\n")


@pytest.mark.slow  # a trusted process and three workers: ~8 s of CPU each
@pytest.mark.parametrize("cells, credit, reason", [
    ([HONEST], 1.0, ""),
    # the record forged in the learner's process: its plan, not the learner's call, is what the rounds run
    ([FORGED_PLAN + HONEST], 0.0, "the replay of double's recorded call"),
    # a result kept by address: new values in the same tensors give the stale one (or fresh tensors do, where the
    # allocator hands back a freed address: either check refuses it, by its wrong values)
    (["cache = {}\ndef double(x):\n    k = x.data_ptr()\n    if k not in cache:\n        cache[k] = x + x\n"
      "    return cache[k]\n"], 0.0, "differ from the reference"),
])
def test_replayed_rounds_run_what_the_call_recorded(cells, credit, reason):
    v = _replayed_verdict(cells)
    assert v["credit"] == credit and reason in v["reason"], v
    if credit:
        assert v["evidence"]["replay"]["ops"] == ["add"] and v["evidence"]["replay"]["kernels"] == [], v["evidence"]


def test_the_replay_switch_takes_only_its_three_values(monkeypatch):
    monkeypatch.setenv(trusted.REPLAY_ENV, "gpu")
    assert trusted._replay_here(cuda=True, world=1) and not trusted._replay_here(cuda=False, world=1)
    assert not trusted._replay_here(cuda=True, world=2)  # a collective runs on its ranks
    monkeypatch.setenv(trusted.REPLAY_ENV, "always")
    assert trusted._replay_here(cuda=False, world=1)
    monkeypatch.setenv(trusted.REPLAY_ENV, "off")
    assert not trusted._replay_here(cuda=True, world=1)
    monkeypatch.setenv(trusted.REPLAY_ENV, "yes")
    with pytest.raises(ValueError, match="gpu, always or off"):
        trusted._replay_here(cuda=True, world=1)


class _StoppedWorker:
    """A clean worker as the verdict sees it, whose process was runnable for ``share`` of each round."""

    def __init__(self, share: float) -> None:
        self.share, self.pending, self.rounds = share, [], 0

    def send(self, msg: dict) -> None:
        import time

        time.sleep(0.02)  # a round long enough that a share below RAN_SHARE loses more than STOPPED_S
        self.rounds += 1
        n = len(msg["seeds"])
        self.pending.append(({"done": True, "fingerprints": [[0.0, 0.0]] * n, "error": "", "ops": [],
                              "ran_share": self.share}, []))

    def recv(self, deadline: float) -> tuple:
        return self.pending.pop(0)


@pytest.mark.parametrize("share, refused", [(0.05, True), (0.3, True), (1.0, False)])
def test_a_clean_round_its_worker_did_not_run_is_measured_again_then_refused(share, refused):
    """Round 4: a setsid helper stopped the baseline worker 8 ms in every 10. A clean worker's round counts only
    if its process was runnable (running or waiting for a core) for RAN_SHARE of the round's wall time: below,
    the round is measured again, and after three such rounds the case is refused."""
    import math

    case = trusted.PerfCase.from_dict("perf_double", CASE)
    v = trusted._Verdict(fake=True, deadline=math.inf)
    v.fake = False  # a real clock (a GPU's): with the fake timer the share is recorded only
    prep = trusted._Prepared(case, [[257]], [[257]], None, {"copy": True}, {"empty": [257], "dtype": "float32"})
    worker = _StoppedWorker(share)
    if refused:
        with pytest.raises(trusted._Refused, match="did not run"):
            trusted._clean_window(v, worker, prep, 3, False, False)
        assert worker.rounds == 3 and all(s < trusted.RAN_SHARE for s in prep.ran)
    else:
        trusted._clean_window(v, worker, prep, 3, False, False)
        assert worker.rounds == 1 and prep.ran[0] > 0.9


def test_runnable_time_counts_waiting_for_a_core_so_a_busy_machine_passes():
    """schedstat's two first fields (ns running, ns waiting on a run queue), summed over threads: a process spinning
    for 0.2 s is runnable for about 0.2 s however many others share its core."""
    import time

    from mlsys.grader.clean.perfworker import runnable_s

    a = runnable_s()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.2:
        pass
    b = runnable_s()
    assert a is not None and b is not None
    assert 0.18 <= b - a <= 0.3, b - a


@pytest.mark.slow  # a verdict process and two workers: ~5 s of CPU
def test_the_baselines_first_rounds_are_measured_before_any_answer_cell_runs(tmp_path):
    """The trust model: the learner's worker gets its cells only after every case's baseline is prepared; an
    answer cell that notes when it ran (CLOCK_MONOTONIC, one clock for every process) runs after the verdict's
    baseline_prepare phase ended."""
    import time

    stamp = tmp_path / "ran_at"
    cell = f"import time\nopen({str(stamp)!r}, 'w').write(repr(time.monotonic()))\ndef double(x):\n    return x + x\n"
    t0 = time.monotonic()
    out = trusted.run_job({"cases": {"perf_double": CASE}, "cells": [cell], "fake": True})
    phases = out["phases_s"]  # in the order they ended, each from the end of the one before
    order = [k for k in phases if not k.endswith("_own_s")]
    prepared_at = t0 + sum(phases[k] for k in order[:order.index("baseline_prepare") + 1])
    assert out["verdicts"]["perf_double"]["credit"] == 1.0
    assert float(stamp.read_text()) > prepared_at, (stamp.read_text(), prepared_at, phases)


LATER_CALLS_LIBRARY = (
    "import torch\nn = [0]\nseen = set()\ndef double(x):\n    n[0] += 1\n"
    "    if n[0] <= 2 and x.data_ptr() not in seen:\n        seen.add(x.data_ptr())\n        return x + x\n"
    "    return torch.mv(torch.eye(x.shape[0]) * 2, x)\n")


@pytest.mark.slow  # a trusted process: ~3 s of CPU
def test_library_work_after_the_first_checked_call_is_recorded_too():
    """Round 4: with one rank only the first checked call's ops were recorded, so a function honest on its first
    calls and a library one-liner on later calls (fresh shapes, reused tensors, timed rounds) earned full
    credit. Every window the learner's worker runs is recorded and judged."""
    v = _verdict([LATER_CALLS_LIBRARY])
    assert v["credit"] == 0.0 and "aten::mv" in v["reason"], v


@pytest.mark.slow  # a baseline worker: ~5 s of CPU
def test_a_clean_worker_stopped_during_its_round_says_so_and_an_honest_one_does_not():
    """The clean worker measures how much of its round (from reading the request to its "done") it was runnable:
    stopped in the middle of a round of large copies for three times as long as that round takes unstopped (at
    least 1.5 s), it reports well under RAN_SHARE. (A fixed 1.5 s stop was only 37% of a round that took 4.6 s
    under CI's load, 2026-12-02: the round's own time is measured first.)"""
    import math
    import os
    import signal
    import threading
    import time

    case = trusted.PerfCase.from_dict("perf_double", CASE)
    v = trusted._Verdict(fake=True, deadline=math.inf)
    base = trusted._ProcWorker("baseline", fake=True)
    big = [[4_000_000]]  # 16 MB a call: a round of 3 takes long enough to be stopped in the middle of
    try:
        base.send({"op": "setup", "cells": [], "fake": True})
        base.recv(time.monotonic() + 240)
        fn = {"copy": True}
        for _ in range(2):  # warm, as the grader's own rounds are (_prepare): a cold first round sleeps on page faults
            v.window(base, fn, case, [[257]], v.seeds(3))
        honest = v.window(base, fn, case, [[257]], v.seeds(3))
        unstopped = v.window(base, fn, case, big, v.seeds(3))
        hold = max(1.5, 3 * unstopped.wall_s)
        threading.Timer(0.05, lambda: os.kill(base.proc.pid, signal.SIGSTOP)).start()
        threading.Timer(0.05 + hold, lambda: os.kill(base.proc.pid, signal.SIGCONT)).start()
        stopped = v.window(base, fn, case, big, v.seeds(3))
    finally:
        base.close()
    assert honest.ran_share is not None and not trusted.did_not_run(honest.ran_share, honest.wall_s), honest
    assert not trusted.did_not_run(unstopped.ran_share, unstopped.wall_s), (unstopped.ran_share, unstopped.wall_s)
    assert stopped.ran_share is not None and trusted.did_not_run(stopped.ran_share, stopped.wall_s), (
        stopped.ran_share, stopped.wall_s, unstopped.wall_s)
    # the cold round measured on this machine under load: 41% runnable of 6.5 ms is a page fault, not a stop
    assert not trusted.did_not_run(0.408, 0.0065) and trusted.did_not_run(0.2, 0.010)


class _FakeCudaTorch:
    """Just enough of torch for :func:`perfworker.run_calls` on a "cuda" device without one: a Tensor type,
    a synchronize; every step the round takes is appended to ``steps``."""

    def __init__(self, steps: list[str]) -> None:
        self.steps = steps

        class Tensor:
            def tolist(self) -> list[float]:
                return [0.0, 0.0]

        self.Tensor = Tensor
        self.cuda = type("cuda", (), {"synchronize": staticmethod(lambda *a: steps.append("sync"))})


def test_every_gpu_round_sweeps_the_l2_after_writing_the_inputs_and_before_the_call(monkeypatch):
    """Issue 43, item 4: the grader's rounds clear the L2 as the course's timer does, by a read sweep, after a
    call's fresh inputs are written (their dirty lines leave the L2 before the call) and before the call; a CPU
    round and a GPU round not asked to flush never sweep."""
    from mlsys.grader.clean import perfworker

    steps: list[str] = []
    torch = _FakeCudaTorch(steps)
    monkeypatch.setattr(perfworker, "make_inputs", lambda *a: steps.append("inputs") or (torch.Tensor(),))
    monkeypatch.setattr(perfworker, "l2_sweep", lambda device: (lambda: steps.append("sweep")))
    monkeypatch.setattr(perfworker, "fingerprint", lambda t, out: steps.append("print") or out)
    monkeypatch.setattr(perfworker, "light_harness", lambda device: False)

    def fn(x):  # noqa: ANN001, ANN202
        steps.append("call")
        return torch.Tensor()

    perfworker.run_calls(torch, fn, [[4]], None, [1, 2], "cuda", {}, flush_l2=True)
    assert steps == ["inputs", "sweep", "call", "print"] * 2 + ["sync"]
    steps.clear()
    perfworker.run_calls(torch, fn, [[4]], None, [1], "cuda", {}, flush_l2=False)
    assert "sweep" not in steps
    steps.clear()
    perfworker.run_calls(torch, fn, [[4]], None, [1], "cpu", {}, flush_l2=True)
    assert "sweep" not in steps


def test_the_l2_sweep_is_the_course_timers_read_flush_and_refuses_a_cpu():
    from mlsys.grader.clean import perfworker

    with pytest.raises(ValueError, match="CUDA device"):
        perfworker.l2_sweep("cpu")


def test_the_verdict_asks_every_gpu_round_for_the_sweep_and_no_cpu_round():
    """The flag rides on every round message the verdict sends (both sides alike); a CPU verdict never sets it."""
    import time

    from mlsys.grader.decide import perfrounds
    from mlsys.grader.decide.perfspec import PerfCase

    sent: list[dict] = []

    class Worker:
        def send(self, msg: dict) -> None:
            sent.append(msg)

        def recv(self, deadline: float) -> tuple[dict, list]:
            return {"done": True, "fingerprints": [[0.0, 0.0]]}, []

    case = PerfCase.__new__(PerfCase)
    object.__setattr__(case, "dtype", "float32")
    object.__setattr__(case, "kwargs", {})
    object.__setattr__(case, "world", 1)
    v = perfrounds._Verdict(fake=True, deadline=time.monotonic() + 60)
    for cuda in (True, False):
        v.cuda = cuda
        v.window(Worker(), {"name": "f"}, case, [[4]], [1])
    assert [m["flush_l2"] for m in sent] == [True, False]
