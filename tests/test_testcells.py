"""Test cells in the grader process: the plain-data channel, what crosses it, and what a test cell sees.

The worker side (:mod:`mlsys.course.worker`) is called in-process here through :class:`LocalRpc`, so
the channel is exercised without a kernel; tests/test_lab_pipeline.py runs it for real, in the sandbox.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from mlsys import Q_, viz
from mlsys.course import grading, proxy, testcells, worker
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
    exec(testcells.course_imports([{"cell_type": "code", "metadata": {}, "source": "from mlsys.course import grading\n"
                                    "from mlsys.course.grading import assert_close\nx = 1"}]), course)
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
