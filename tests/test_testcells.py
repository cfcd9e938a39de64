"""Test cells in the grader process: the plain-data channel, what crosses it, and what a test cell sees.

The worker side (:mod:`mlsys.grader.learnerside.worker`) is called in-process here through :class:`LocalRpc`, so
the channel is exercised without a kernel; tests/test_lab_pipeline.py runs it for real, in the sandbox.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from mlsys import Q_, viz
from mlsys.grader.learnerside import testcells, worker
from mlsys.labkit import grading, proxy
from mlsys.roofline import Roof


class LocalRpc(testcells.Rpc):
    """The grader's channel with the worker called directly on a namespace (no kernel)."""

    def __init__(self, ns: dict, static: dict | None = None) -> None:
        super().__init__(None, None, static=static)
        self.ns = ns

    def _request(self, req: dict) -> dict:
        try:
            return worker._answer(self.ns, json.loads(json.dumps(req)))
        except BaseException as exc:  # noqa: BLE001 - as serve() does
            return {"error": type(exc).__name__, "message": str(exc)}


def _cross(x):
    """``x`` encoded by the worker and decoded by the grader."""
    return proxy.decode(json.loads(json.dumps(proxy.encode(x, worker._handle))), lambda d: ("ref", d))


def test_plain_data_crosses_by_value():
    t = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    got = _cross({"t": t, "bf": torch.tensor([1.5, -2.0], dtype=torch.bfloat16), "empty": torch.zeros(0, 3, dtype=torch.int64),
                  "a": np.arange(6, dtype=np.float64).reshape(2, 3), "s": np.float32(2.5), "q": Q_(3, "FLOP/byte"),
                  "nested": [1, (2, "x"), None, True], "nan": float("nan")})
    assert type(got["t"]) is torch.Tensor and got["t"].tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert got["bf"].dtype == torch.bfloat16 and got["bf"].tolist() == [1.5, -2.0]
    assert got["empty"].shape == (0, 3) and got["empty"].dtype == torch.int64
    assert type(got["a"]) is np.ndarray and got["a"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert got["s"].dtype == np.float32 and float(got["s"]) == 2.5
    assert got["q"].to("FLOP/byte").magnitude == 3
    assert got["nested"] == [1, (2, "x"), None, True] and math.isnan(got["nan"])


def test_course_objects_are_rebuilt_by_the_course_constructors():
    roof = _cross(Roof(Q_(100, "TFLOP/s"), Q_(2, "TB/s"), "mine"))
    assert type(roof) is Roof and roof.label == "mine"
    assert roof.ridge_point.to("FLOP/byte").magnitude == pytest.approx(50.0)  # 100e12 / 2e12
    point = _cross(viz.Point("add", Q_(0.25, "FLOP/byte"), Q_(1, "GFLOP/s")))
    assert type(point) is viz.Point and point.label == "add"


def test_look_alikes_do_not_cross_as_what_they_claim():
    class Sub(torch.Tensor):
        pass

    class Lazy:
        __module__ = "torch.lazy"

    class FakeRoof:
        pass

    FakeRoof.__module__, FakeRoof.__name__ = "mlsys.roofline", "Roof"
    assert isinstance(_cross(torch.ones(2).as_subclass(Sub)), proxy.Rejected)
    assert isinstance(_cross(Lazy()), proxy.Rejected)
    assert _cross(FakeRoof())[0] == "ref"  # not the course's class: stays a handle, never rebuilt
    assert _cross(np.zeros(2).view(np.matrix))[0] == "ref"  # an ndarray subclass is not an ndarray to the grader
    for fake in (torch.ones(2).as_subclass(Sub), Lazy(), proxy.Rejected("x")):
        with pytest.raises(grading.GradingError):
            grading.assert_close(fake, torch.ones(2))


def test_a_test_cell_ignores_what_the_learner_rebound():
    ns = {"double": lambda x: 0.0, "assert_close": lambda *a, **k: None, "len": lambda x: 99, "grading": None}
    course: dict = {}
    exec(testcells.course_imports([{"cell_type": "code", "metadata": {}, "source": "from mlsys.labkit import grading\n"
                                    "from mlsys.labkit.grading import assert_close\nx = 1"}]), course)
    rpc = LocalRpc(ns)
    out = testcells.run_test_cell("assert len([1, 2]) == 2\nassert_close(double(3.0), 6.0, name='double')\n", course, rpc)
    assert [o["output_type"] for o in out] == ["error"] and out[0]["ename"] == "GradingError", out
    out = testcells.run_test_cell("grading.assert_close(double(3.0), 6.0)\n", course, rpc)
    assert out[0]["ename"] == "GradingError", out  # grading is the course's module, not the learner's None
    out = testcells.run_test_cell("print('checked')\n1.5\n", course, rpc)
    assert out == [{"output_type": "stream", "name": "stdout", "text": "checked\n"},
                   {"output_type": "execute_result", "execution_count": None, "metadata": {}, "data": {"text/plain": "1.5"}}]
    out = testcells.run_test_cell("undefined_name\n", course, rpc)
    assert out[0]["ename"] == "NameError", out


def test_a_learner_exception_costs_the_cell_with_its_message():
    def boom(x):
        raise ValueError("not yet")

    out = testcells.run_test_cell("boom(1)\n", {}, LocalRpc({"boom": boom}))
    assert out[0]["ename"] == "LearnerCodeError" and "boom raised ValueError: not yet" in out[0]["evalue"]


@pytest.mark.slow
def test_library_shortcuts_are_seen_in_what_the_call_dispatched():
    import torch.nn.functional as F

    class Impl:  # a method of a learner class: no def for a source check to read
        def __call__(self, a, b):
            return a.mm(b)

    def attention(q, k, v):
        return vars(F)["scaled_dot_product_attention"](q, k, v)

    rpc = LocalRpc({"mm": Impl(), "attention": attention})
    mm = rpc.get("mm")
    a = torch.randn(3, 4)
    assert torch.allclose(mm(a, torch.eye(4)), a)
    with pytest.raises(grading.GradingError, match="aten::mm"):
        grading.assert_no_library_calls(mm, grading.FORBIDDEN_MATMUL)
    att = rpc.get("attention")
    q = torch.randn(1, 1, 4, 8)
    att(q, q, q)
    with pytest.raises(grading.GradingError, match="scaled_dot_product"):
        grading.assert_no_library_calls(att, grading.FORBIDDEN_TORCH_OPS)


def test_a_process_group_method_is_seen_as_a_collective():
    import socket

    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{port}")
    try:
        def ring(t):
            dist.group.WORLD.allreduce(t).wait()  # the library's collective, through the group object
            return t

        fn = LocalRpc({"ring": ring}).get("ring")
        assert fn(torch.ones(3)).tolist() == [1.0, 1.0, 1.0]
        assert "c10d::allreduce_" in fn.ops
        with pytest.raises(grading.GradingError, match="c10d::allreduce_"):
            grading.assert_no_library_calls(fn, {"torch.distributed.*"})
    finally:
        dist.destroy_process_group()


def test_the_static_check_reads_the_notebook_not_the_worker():
    defs, module = testcells.answer_definitions(["import numpy as np\n\n\ndef total(xs):\n    return np.sum(xs)\n",
                                                 "%timeit total([1])\n"])
    scope = grading._local_imports(module)
    import ast

    static = {"total": (ast.Module(body=[defs["total"]], type_ignores=[]), scope)}
    honest_looking = LocalRpc({"total": lambda xs: 6.0}, static=static).get("total")  # the worker lies about it
    with pytest.raises(grading.GradingError, match="numpy.sum"):
        grading.assert_no_library_calls(honest_looking, {"numpy.*"})


def test_a_blob_that_is_a_link_is_refused(tmp_path):
    """The worker names the file a tensor's bytes are in; a link (to the grader's /proc entries) is not read."""
    proxy.RPC_DIR.mkdir(parents=True, exist_ok=True)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"\x00" * 8)
    link = proxy.RPC_DIR / "link-test.bin"
    link.unlink(missing_ok=True)
    link.symlink_to(secret)
    with pytest.raises(OSError):
        proxy.decode({"t": "ndarray", "dtype": "<f8", "shape": [1], "blob": "link-test.bin"}, lambda d: d)
    assert not link.exists()
    assert isinstance(proxy.decode({"t": "ndarray", "dtype": "|O", "shape": [1], "blob": "x.bin"}, lambda d: d),
                      proxy.Rejected)
    # a tensor the worker says is on the "meta" device (a shape, no values) is not a result
    assert isinstance(proxy.decode({"t": "tensor", "dtype": "float32", "shape": [2], "device": "meta",
                                    "blob": proxy._blob(b"\x00" * 8)}, lambda d: d), proxy.Rejected)


# ------------------------------------------------------------------------------------------------
# Labs 2, 3 and 5: the checks' worker-side halves (guarded calls, probes, call counts) through the channel


def _learner(source: str) -> dict:
    ns: dict = {"__name__": "__main__"}
    exec(compile(source, "<answer>", "exec"), ns)  # noqa: S102 - the test's own learner code
    return ns


GOOD_ADD = ("import torch\n\ndef add(x, y):\n    out = torch.empty_like(x)\n    out.copy_(x + y)\n"
            "    return out\n")


def test_a_guarded_check_runs_in_the_worker_and_the_grader_decides(monkeypatch):
    """check_kernel on a learner function: the guard buffers live where the function runs; the report crosses as
    plain data and the grader compares the result with its own expectation (x + y worked out here)."""
    from mlsys.labkit import checks

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # GOOD_ADD has no Triton kernel: refused under the interpreter

    rpc = LocalRpc(_learner(GOOD_ADD))
    add = rpc.get("add")
    x, y = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 30.0])
    out = checks.check_kernel(add, (x, y), torch.tensor([11.0, 22.0, 33.0]), names=("x", "y"), isolate=False)
    assert type(out) is torch.Tensor and out.tolist() == [11.0, 22.0, 33.0]
    # recorded around the learner's call only (not the guard buffers the checks allocate for its empty_like, nor
    # their comparisons), in this process and, on a CPU, in the child process the guarded call runs in
    assert add.ops == {"aten::empty_like", "aten::add", "aten::copy_"}
    in_child = rpc.get("add")
    checks.check_kernel(in_child, (x, y), torch.tensor([11.0, 22.0, 33.0]), names=("x", "y"), isolate=True)
    assert in_child.ops == {"aten::empty_like", "aten::add", "aten::copy_"}
    with pytest.raises(grading.GradingError, match="differ|mismatch|expected"):
        checks.check_kernel(add, (x, y), torch.tensor([0.0, 0.0, 0.0]), names=("x", "y"), isolate=False)


def test_a_forged_guard_report_is_refused_and_a_wrong_result_still_fails():
    """What the worker sends is the learner's evidence: a malformed report is refused, and a report that claims
    all is well does not make a wrong result right (the comparison is the grader's)."""
    from mlsys.labkit import checks

    rpc = LocalRpc(_learner(GOOD_ADD))
    add = rpc.get("add")
    x = torch.ones(3)
    real = worker._helper
    try:
        worker._helper = lambda name: (lambda *a, **k: {"report": "all fine", "result": x})  # noqa: E731
        with pytest.raises(grading.GradingError, match="malformed"):
            checks.check_kernel(add, (x, x), x * 2, names=("x", "y"), isolate=False)
        worker._helper = lambda name: (lambda *a, **k: {"report": {}, "result": x, "error": None})  # noqa: E731
        with pytest.raises(grading.GradingError):
            checks.check_kernel(add, (x, x), x * 2, names=("x", "y"), isolate=False)  # 1 + 1 is 2, not the 1 sent
    finally:
        worker._helper = real


def test_a_guarded_check_in_the_worker_sees_a_store_outside_the_output():
    """The guard buffers are the worker's: a launcher that writes past the end of what it allocated is reported
    with where it wrote (here the learner writes one element past the end through the storage)."""
    from mlsys.labkit import checks

    bad = ("import torch\n\ndef add(x, y):\n    out = torch.empty_like(x)\n"
           "    big = out.as_strided((out.numel() + 1,), (1,), out.storage_offset())\n"
           "    big.copy_(torch.cat([x + y, torch.zeros(1)]))\n    return out\n")
    rpc = LocalRpc(_learner(bad))
    with pytest.raises(grading.GradingError, match="past the end"):
        checks.check_kernel(rpc.get("add"), (torch.ones(4), torch.ones(4)), torch.full((4,), 2.0), names=("x", "y"),
                            output_names=("out",), isolate=False)


def test_zero_padded_inputs_stay_in_zero_padding_across_the_channel():
    """checks.in_zero_padding marks its tensor; the worker rebuilds it inside zeros, so a read one past the end
    reads 0 there as it would in the grader (here: the learner returns the element after the last)."""
    from mlsys.labkit import checks

    peek = "import torch\n\ndef peek(t):\n    return t.as_strided((1,), (1,), t.storage_offset() + t.numel()).clone()\n"
    rpc = LocalRpc(_learner(peek))
    t = checks.in_zero_padding(torch.full((3,), 7.0))
    assert rpc.get("peek")(t).tolist() == [0.0]


def test_a_test_cell_lambda_runs_beside_the_learner_functions_on_the_views_it_is_given():
    """A lambda of a test cell that calls a learner function is evaluated in the worker: the transposed view it
    builds reaches the learner's function as a view (strides (1, rows)), not as a contiguous copy."""
    ns = _learner("import torch\n\ndef strides(a):\n    return list(a.stride())\n")
    rpc = LocalRpc(ns)
    course: dict = {}
    exec(testcells.course_imports([{"cell_type": "code", "metadata": {}, "source": "import torch\n"}]), course)
    out = testcells.run_test_cell("a = torch.zeros(3, 5)\nf = lambda m: strides(m.t())\nf(a)\n", course, rpc)
    assert out[-1]["data"]["text/plain"] == "[1, 5]"
    local = testcells.run_test_cell("k = 2\ng = lambda v: v * k\ng(3)\n", course, rpc)  # uses the cell's own k: stays here
    assert local[-1]["data"]["text/plain"] == "6"


def test_what_a_test_cell_defines_is_kept_for_the_next_but_never_what_it_fetched():
    rpc = LocalRpc(_learner("def reference(x):\n    return 'learner'\n\nvalue = 1\n"))
    course: dict = {}
    testcells.run_test_cell("def reference(x):\n    return 'grader'\nseen = value\n", course, rpc)
    assert "reference" in course and "seen" in course and "value" not in course
    out = testcells.run_test_cell("reference(0)\n", course, rpc)
    assert out[-1]["data"]["text/plain"] == "'grader'"
    only = testcells.run_test_cell("value\n", {}, rpc, grader_only=frozenset({"value"}))
    assert only[0]["ename"] == "NameError"  # a course cell's name is never taken from the learner


def test_an_in_place_change_by_the_learner_fails_and_leaves_the_grader_copy():
    """A function that zeroes its input and returns zeros would otherwise match a reference the test computes after
    the call from the same array; the change fails the call and the grader's array keeps its values."""
    rpc = LocalRpc(_learner("import numpy as np\n\ndef zero_(s, v):\n    v[...] = 0\n    return np.zeros(2)\n"))
    s, v = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    with pytest.raises(proxy.LearnerCodeError, match="zero_ changed its argument 2 in place"):
        rpc.get("zero_")(s, v)
    assert v.tolist() == [3.0, 4.0]


def test_calls_of_counts_a_learner_global_inside_the_worker():
    from mlsys.labkit import checks

    src = ("def step(x, i):\n    return x + i\n\n"
           "def run(n):\n    x = 0\n    for i in range(n):\n        x = step(x, i)\n    return x\n")
    rpc = LocalRpc(_learner(src))
    calls = checks.calls_of(rpc.get("run"), "step", 3)
    assert [c[1] for c in calls] == [0, 1, 2]  # three calls with i = 0, 1, 2
    assert checks.calls_of(_learner(src)["run"], "step", 2) == [(0, 0), (0, 1)]  # the same helper in a kernel


def test_grader_cells_are_keyed_to_the_next_test_and_bind_grader_only_names():
    def cell(src, **meta):
        return {"cell_type": "code", "source": src, "metadata": meta}

    cells = [cell("import torch\ndevice = 'cpu'\n", mlsys={"grader": True}),
             cell("x = 1\n", nbgrader={"solution": True}),
             cell("def helper(a):\n    return a\nTOL = dict(rtol=1)\n", mlsys={"grader": True}),
             cell("assert x\n", nbgrader={"grade": True, "grade_id": "t1"}),
             cell("late = 2\n", mlsys={"grader": True})]
    got = testcells.grader_cells(cells)
    assert [(c["before"], c["source"].split("\n")[0]) for c in got] == [
        ("t1", "import torch"), ("t1", "def helper(a):"), (None, "late = 2")]
    assert testcells.grader_only_names([c["source"] for c in got]) == {"torch", "device", "helper", "TOL", "late"}


def test_a_triton_config_crosses_as_a_config():
    triton = pytest.importorskip("triton")
    got = _cross([triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=8, num_stages=3)])
    assert type(got[0]) is triton.Config and got[0].kwargs == {"BLOCK_M": 64, "BLOCK_N": 32}
    assert (got[0].num_warps, got[0].num_stages) == (8, 3)


# ------------------------------------------------------------------------------------------------
# library routines found by what a call ran, however the def reached them (issue 26)

LIBRARY_BEHIND_THE_DEF = '''\
import math

import mlsys
import torch

_fsum = vars(math)["fsum"]          # bound outside the def: a source check of `total` sees only `_fsum`
_flops = {"f": mlsys.roofline.matmul_flops}
_mm = torch.matmul


class _Engine:
    def run(self, a, b):
        return _mm(a, b)


def _helper(m, n, k):
    return _flops["f"](m, n, k)


def total(xs):
    return _fsum(xs)


def honest_total(xs):
    s = 0.0
    for x in xs:
        s += x
    return s


def counts(m, n, k):
    return _helper(m, n, k)


def mm(a, b):
    return _Engine().run(a, b)


def to_numpy(a, b):
    return torch.from_numpy(__import__("numpy").asarray(a) + __import__("numpy").asarray(b))


def in_python(a, b):
    return torch.tensor([x + y for x, y in zip(torch.Tensor.tolist(a), b.tolist())])
'''


def test_a_cell_that_renames_its_module_is_still_not_the_course_package():
    """``__name__ = "mlsys.x"`` in an answer cell makes its functions' globals say they are the course's; the record
    decides by the file the code came from."""
    ns = _learner(LIBRARY_BEHIND_THE_DEF)
    ns["__name__"] = "mlsys.pretend"
    errors = _run_cell("counts(2, 3, 4)\nassert_no_library_calls(counts, {'mlsys.roofline.*'})", ns)
    assert len(errors) == 1 and "mlsys.roofline.matmul_flops" in errors[0]["evalue"], errors


def test_a_library_routine_handed_to_the_graders_own_helpers_is_still_seen():
    """checks.calls_of runs the function it is given: a course function entered from the grading machinery counts."""
    ns = _learner(LIBRARY_BEHIND_THE_DEF + "\n\ndef via_course(m, n, k):\n"
                  "    from mlsys.labkit import checks\n"
                  "    return checks.calls_of(mlsys.roofline.matmul_flops, 'require_count', m, n, k)\n")
    errors = _run_cell("via_course(2, 3, 4)\nassert_no_library_calls(via_course, {'mlsys.roofline.*'})", ns)
    assert len(errors) == 1 and "mlsys.roofline.matmul_flops" in errors[0]["evalue"], errors


def _run_cell(src: str, ns: dict) -> list[dict]:
    import ast

    static = {name: (ast.Module(body=[], type_ignores=[]), {}) for name in ns if not name.startswith("_")}
    course: dict = {}
    exec("import torch\nfrom mlsys.labkit.grading import FORBIDDEN_MATMUL, assert_no_library_calls\n", course)  # noqa: S102
    return [o for o in testcells.run_test_cell(src, course, LocalRpc(ns, static=static)) if o["output_type"] == "error"]


@pytest.mark.parametrize("cell,found", [
    ("total([0.5, 0.25])\nassert_no_library_calls(total, {'numpy.*', 'math.fsum'})", "math.fsum"),
    ("counts(2, 3, 4)\nassert_no_library_calls(counts, {'mlsys.roofline.*'})", "mlsys.roofline.matmul_flops"),
    ("mm(torch.ones(2, 2), torch.eye(2))\nassert_no_library_calls(mm, FORBIDDEN_MATMUL)", "aten::mm"),
    # the check first, the calls after it: checked again when the cell ends
    ("assert_no_library_calls(mm, FORBIDDEN_MATMUL)\nmm(torch.ones(2, 2), torch.eye(2))", "aten::mm"),
    ("assert_no_library_calls(to_numpy, FORBIDDEN_MATMUL)\nto_numpy(torch.ones(2), torch.ones(2))", "out of torch"),
    ("assert_no_library_calls(in_python, FORBIDDEN_MATMUL)\nin_python(torch.ones(2), torch.ones(2))", "out of torch"),
    # a test lambda that calls the learner's function: what the lambda ran counts for that function
    ("assert_no_library_calls(mm, FORBIDDEN_MATMUL)\nf = lambda a: mm(a.t(), a)\nf(torch.ones(2, 3))", "aten::mm"),
])
def test_a_library_routine_behind_the_def_is_seen_in_what_the_call_ran(cell, found):
    errors = _run_cell(cell, _learner(LIBRARY_BEHIND_THE_DEF))
    assert len(errors) == 1 and errors[0]["ename"] == "GradingError" and found in errors[0]["evalue"], errors


def test_honest_code_calls_no_forbidden_library_routine():
    ns = _learner(LIBRARY_BEHIND_THE_DEF)
    assert _run_cell("assert honest_total([0.5, 0.25]) == 0.75\n"
                     "assert_no_library_calls(honest_total, {'numpy.*', 'math.fsum'})", ns) == []


def test_a_result_made_without_any_triton_kernel_is_refused_under_the_interpreter(monkeypatch):
    """Under TRITON_INTERPRET=1 every honest launcher's kernel loads its inputs; a right answer computed without a
    Triton load (torch, NumPy, plain Python) fails check_kernel whatever the op record says."""
    from mlsys.labkit import checks

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytest.importorskip("triton.runtime.interpreter")
    x, y = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([10.0, 20.0, 30.0])
    with pytest.raises(grading.GradingError, match="no Triton kernel loaded anything"):
        checks.check_kernel(LocalRpc(_learner(GOOD_ADD)).get("add"), (x, y), torch.tensor([11.0, 22.0, 33.0]),
                            names=("x", "y"), isolate=False)


@pytest.mark.slow
def test_a_kernel_exercise_refuses_a_matmul_by_another_name_torch_ops_and_custom_ops():
    """FORBIDDEN_TORCH_OPS (the kernel exercises): a launcher may only allocate, view and copy. A 1x1 convolution is
    a @ b (a library matmul however it is spelled: refused with FORBIDDEN_MATMUL too), element-wise ops and a sum in
    place of the kernel are torch compute, and an op of a custom namespace runs aten ops the record cannot see."""
    import torch.nn.functional as F

    conv = F.conv1d  # bound outside the def

    def by_conv(a, b):
        c = torch.empty(a.shape[0], b.shape[1])
        c.copy_(conv(a.t()[None], b.t()[:, :, None])[0].t())
        return c

    def by_broadcast(a, b):
        return (a[:, :, None] * b[None, :, :]).sum(1)

    lib = torch.library.Library("mlsys_test_hidden", "DEF")  # what an answer cell could register (audit: patching)
    lib.define("mm(Tensor a, Tensor b) -> Tensor")
    lib.impl("mm", lambda a, b: a @ b, "CompositeExplicitAutograd")

    def by_custom_op(a, b):
        return torch.ops.mlsys_test_hidden.mm(a, b)

    rpc = LocalRpc({"by_conv": by_conv, "by_broadcast": by_broadcast, "by_custom_op": by_custom_op})
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    for name, forbidden, found in (("by_conv", grading.FORBIDDEN_MATMUL, "aten::convolution"),
                                   ("by_conv", grading.FORBIDDEN_TORCH_OPS, "aten::convolution"),
                                   ("by_broadcast", grading.FORBIDDEN_TORCH_OPS, "aten::mul"),
                                   ("by_custom_op", grading.FORBIDDEN_TORCH_OPS, "mlsys_test_hidden::mm")):
        fn = rpc.get(name)
        assert torch.allclose(fn(a, b), a @ b, atol=1e-5)
        with pytest.raises(grading.GradingError, match=found):
            grading.assert_no_library_calls(fn, forbidden)
        grading.PENDING.clear()
