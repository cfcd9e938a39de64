"""mlsys.grader.clean.replay: a call recorded in the learner's process, rebuilt and run in a clean one.

The expected values are worked out from the functions' definitions (2a + b^T + w, a stale cache), not from
the replay's output; the Triton half (PTX compiled by ptxas, kernels loaded and launched) needs a GPU and is
exercised by the GPU runs in tests/gpu_runs (run 10 onwards); the parts that need no GPU are tested here.
"""

from __future__ import annotations

import json

import pytest
import torch

from mlsys.grader.clean.replay import PLAN_VERSION, Replay, ReplayError, _Kernel, _ptxas, plan_ops, record_call

W = torch.tensor([1.0, -2.0, 3.0, 0.5])  # a module-level constant: it travels with the plan


def shifted(a, b):
    out = torch.empty_like(a)
    out.copy_(a * 2 + b.t().contiguous())
    return out + W


def test_a_recorded_call_replays_on_new_inputs():
    a0, b0 = torch.randn(4, 4), torch.randn(4, 4)
    out, plan, blobs = record_call(torch, shifted, (a0, b0), {})
    assert torch.equal(out, a0 * 2 + b0.t() + W)
    assert plan["version"] == PLAN_VERSION and plan["inputs"] == 2
    assert len(plan["externals"]) == 1 and plan["externals"][0]["shape"] == [4]  # W, by value
    assert {"empty_like", "mul", "copy_", "add"} <= set(plan_ops(plan))
    replay = Replay(torch, json.loads(json.dumps(plan)), blobs, device="cpu")  # only JSON crosses
    a = torch.arange(16.0).reshape(4, 4)
    b = torch.full((4, 4), 0.25)
    want = torch.tensor([[2 * (4 * i + j) + 0.25 + w for j, w in enumerate([1.0, -2.0, 3.0, 0.5])] for i in range(4)])
    assert torch.equal(replay(a, b), want)


def test_work_done_outside_torch_is_not_in_the_plan():
    """NumPy's result enters torch as a tensor the call did not compute with aten (from_numpy): the plan holds
    its values, so the replay on new inputs gives the recorded call's result, not the new one."""
    def by_numpy(x):
        return torch.from_numpy(x.numpy() * 2)

    _, plan, blobs = record_call(torch, by_numpy, (torch.tensor([1.0, 2.0]),), {})
    assert "mul" not in plan_ops(plan)
    assert torch.equal(Replay(torch, plan, blobs, device="cpu")(torch.tensor([5.0, 7.0])), torch.tensor([2.0, 4.0]))


def test_a_result_the_call_never_touched_cannot_be_recorded():
    kept = torch.zeros(2)

    with pytest.raises(ReplayError, match="neither came in nor was made"):
        record_call(torch, lambda x: kept, (torch.ones(2),), {})


def test_a_cached_result_replays_stale():
    """A result kept from an earlier call is an external of the plan: replayed on new inputs it gives the
    old values, which the verdict's check refuses."""
    cache = {}

    def cached(x):
        if "out" not in cache:
            cache["out"] = x * 2
        out = torch.empty_like(x)
        out.copy_(cache["out"])
        return out

    x0 = torch.tensor([1.0, 2.0, 3.0])
    cached(x0)
    _, plan, blobs = record_call(torch, cached, (torch.tensor([5.0, 6.0, 7.0]),), {})
    replay = Replay(torch, plan, blobs, device="cpu")
    assert torch.equal(replay(torch.tensor([10.0, 20.0, 30.0])), torch.tensor([2.0, 4.0, 6.0]))


def _plan(steps, values=2, inputs=1, output=1):
    return {"version": PLAN_VERSION, "inputs": inputs, "values": values, "output": output, "externals": [],
            "kernels": [], "steps": steps}


@pytest.mark.parametrize("plan, message", [
    (_plan([{"aten": "from_file", "overload": "default", "args": ["/etc/shadow"], "kwargs": {}, "out": [1]}]), "never runs"),
    (_plan([{"aten": "c10d::allreduce_", "overload": "default", "args": [], "kwargs": {}, "out": [1]}]), "no aten op"),
    (_plan([{"aten": "not_an_op_anywhere", "overload": "default", "args": [], "kwargs": {}, "out": [1]}]), "does not exist"),
    (_plan([{"aten": "mul", "overload": "Tensor", "args": [{"t": 0}, {"t": 7}], "kwargs": {}, "out": [1]}]), "outside 0..1"),
    (_plan([{"aten": "empty", "overload": "memory_format", "args": [[2]], "kwargs": {"dtype": {"dtype": "os"}},
             "out": [1]}]), "unknown dtype"),
    (_plan([{"aten": "mul", "overload": "Tensor", "args": [{"t": 0}, {"__class__": 1}], "kwargs": {}, "out": [1]}]),
     "does not know"),
    (_plan([{"launch": 0, "grid": [1, 1, 1], "args": []}]), "does not hold"),
    (dict(_plan([]), version=99), "version"),
    (_plan([], values=2, output=5), "out of range"),
])
def test_plans_that_reach_past_aten_ops_and_own_kernels_are_refused(plan, message):
    with pytest.raises(ReplayError, match=message):
        Replay(torch, plan, [], device="cpu")


PTX = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry tiny(.param .u64 p)
{
  .reg .b64 %rd<2>;
  .reg .b32 %r<2>;
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, 7;
  st.global.u32 [%rd1], %r1;
  ret;
}
"""


def test_kernels_are_compiled_here_from_their_ptx():
    """The replay never loads the learner's binary: Triton's own ptxas makes the cubin (no GPU needed)."""
    cubin = _ptxas(PTX, 90, fp_fusion=True)
    assert cubin[:4] == b"\x7fELF"
    with pytest.raises(ReplayError, match="ptxas refused"):
        _ptxas(PTX.replace("st.global.u32", "st.nowhere.u32"), 90, fp_fusion=True)


def test_a_kernel_for_another_gpu_or_without_its_entry_is_refused(tmp_path):
    meta = {"name": "tiny", "target": {"backend": "cuda", "arch": 80, "warp_size": 32}}
    with pytest.raises(ReplayError, match="compiled for"):
        _Kernel({"metadata": json.dumps(meta), "ptx": PTX, "signature": {"p": "*i32"}}, 90, str(tmp_path))
    meta["target"]["arch"] = 90
    with pytest.raises(ReplayError, match="no entry of that name"):
        _Kernel({"metadata": json.dumps(dict(meta, name="other")), "ptx": PTX, "signature": {"p": "*i32"}}, 90,
                str(tmp_path))
