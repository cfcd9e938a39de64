"""Write the corpus cases that attack test cells run in the grader (Labs 1 to 5).

``python tests/bad_submissions/make_grader_side.py`` regenerates them from the labs' **releases** (a
learner's blank copy): each case replaces whole answer cells (metadata kept) with hostile code. Every
attack here would raise a blank notebook's score if a test cell ran where the answer cells run (in the
learner's kernel); graded with the test cells in the grader process each earns 0. ``ANSWERED`` cases start
from the instructor's answers and attack one exercise: they lose that exercise's points (``message`` is a
piece of the test output that says why), or, where the attack forges evidence inside the learner's kernel and
cannot be prevented, keep them with a flag (``flags``). The expected rows are in each lab folder's
``expected.json`` (merged, not overwritten).
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

TRANSFORMER = '''\
# an input transformer reached through the IPython module, not the bare name: every later cell, the
# grader's requests included, becomes `pass`
import IPython as _ip_module

_ip_module.get_ipython().input_transformers_post.append(lambda lines: ["pass\\n"])
'''

HOOKS_AND_HELPERS = '''\
# AST transformer, hooks, excepthook and a custom exception handler, reached through sys.modules; the
# course's helpers rebound as globals and patched in their modules; wrong answers behind them
import ast
import sys

import mlsys.labkit.checks as _checks
import mlsys.labkit.grading as _grading

_ip = sys.modules["IPython"].get_ipython()


class _DropAsserts(ast.NodeTransformer):
    def visit_Assert(self, node):
        return ast.Pass()


_ip.ast_transformers.append(_DropAsserts())
_ip.events.register("pre_run_cell", lambda *a: None)
sys.excepthook = lambda *a: None
_ip.set_custom_exc((BaseException,), lambda *a, **k: None)
_checks.check_kernel = lambda fn, inputs, expected, **k: expected
_checks.check_accumulation = lambda *a, **k: None
_checks.worker_run_guarded = lambda fn, inputs, **k: {"result": inputs[0], "report": {"label": "all fine"}, "error": None,
                                                      "tracked": False}  # a clean report, and x for x + y
_grading.assert_no_library_calls = lambda *a, **k: None
_grading.assert_quantity_close = lambda *a, **k: None
_grading.assert_close = lambda *a, **k: None
grading = checks = type("Anything", (), {"__getattr__": lambda self, name: (lambda *a, **k: None)})()
check_matmul = lambda *a, **k: None  # the course's own helper (a course cell), rebound  # noqa: E731


def add(x, y):
    return x  # wrong
'''

WRONG_TILE_REPORT = '''\
def tile_report(m, n, k, block_m, block_n, dtype, accel):
    return {"traffic": 0, "intensity": 0, "bound": "memory", "attainable": 0}  # wrong but for the bound
'''

FAKE_TENSOR = '''\
# a result that claims to be a torch tensor (its class says __module__ = "torch") and equals anything;
# the course's checks patched in their modules, the worker-side half included; rebound globals
import torch

import mlsys.labkit.checks as _checks
import mlsys.labkit.grading as _grading


class Lazy:
    __module__ = "torch"

    def __init__(self, x, scale, shift):
        self._x, self._s, self._b = x, scale, shift

    def _real(self):
        return torch.relu(self._x) * self._s + self._b

    def __getattr__(self, name):
        return getattr(self._real(), name)

    def __eq__(self, other):
        return True

    def __array__(self, dtype=None, copy=None):
        return self._real().numpy()


def fused_relu_affine(x, scale=0.5, shift=1.0):
    return Lazy(x, scale, shift)


_checks.check_kernel = lambda fn, inputs, expected, **k: expected
_checks.worker_run_guarded = lambda fn, inputs, **k: {"result": fn(*inputs), "report": {"label": "all fine"},
                                                      "error": None, "tracked": False}
_grading.assert_no_library_calls = lambda *a, **k: None
_grading.assert_close = lambda *a, **k: None
grading = checks = type("Anything", (), {"__getattr__": lambda self, name: (lambda *a, **k: None)})()
'''

VARS_SDPA = '''\
# PyTorch's attention reached through vars(F)[...]; the library check and the probe's judge patched
import torch
import torch.nn.functional as F

import mlsys.labkit.checks as _checks
import mlsys.labkit.grading as _grading

_sdpa = vars(F)["scaled_dot_product_attention"]


def attention(q, k, v, causal=False, scale=None):
    return _sdpa(q, k, v, is_causal=causal, scale=scale)


_grading.assert_no_library_calls = lambda *a, **k: None
_checks.check_running_sums_fp32 = lambda *a, **k: None
_checks.running_sums_probe = lambda *a, **k: [(torch.zeros(16, 16), torch.zeros(16))] * 2
grading = type("Anything", (), {"__getattr__": lambda self, name: (lambda *a, **k: None)})()
'''

LAB4_REBIND = '''\
# the course's helpers rebound as globals and patched in their modules (the grading module, check_ring,
# check_dp, the ring's diagnosis and its collective filter); every answer below is wrong
import mlsys.labkit.checks as _checks
import mlsys.labkit.grading as _grading

_grading.assert_quantity_close = lambda *a, **k: None
_grading.assert_close = lambda *a, **k: None
_grading.assert_no_library_calls = lambda *a, **k: None
_checks.check_ring = lambda *a, **k: None
_checks.check_dp = lambda *a, **k: None
_checks.diagnose_ring = lambda *a, **k: ""
_checks.library_collectives = lambda ops: []
grading = type("Anything", (), {"__getattr__": lambda self, name: (lambda *a, **k: None)})()
check_ring = check_dp = lambda *a, **k: None  # noqa: E731


class _Same(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def latency_bound_below(world_size, latency, bandwidth):
    return 0


def faster_algorithm(nbytes, world_size, latency, bandwidth):
    return _Same("ring")
'''

LAB4_IDENTITY_RING = '''\
def chunk_bounds(n, p):
    return [0] * (p + 1)


def ring_allreduce(tensor):
    return tensor  # the identity: every rank keeps its own input
'''

LAB4_ZEROS = {
    "bandwidths": "def bandwidths(nbytes, seconds, world_size):\\n    return 0, 0\\n",
    "overlap": '''\
def overlap_bounds(compute, comm_time):
    return 0, 0


def data_parallel_step(model, x, y, bucket_mb):
    return [p.detach() * 0 for p in model.parameters()]
''',
}

LAB4_WORLD_GROUP = '''\
def chunk_bounds(n, p):
    return [i * n // p for i in range(p + 1)]


def ring_allreduce(tensor):
    # the library's all-reduce through the process group object, not through the dist.all_reduce name
    dist.group.WORLD.allreduce(tensor.view(-1)).wait()
    return tensor
'''

LAB4_PATCHED_CHECKS = '''\
# an identity "ring" behind patched checks: the course's check_ring, its p2p test and its comparison
import mlsys.labkit.checks as _checks
import mlsys.labkit.grading as _grading

_checks.check_ring = lambda *a, **k: print("ring_allreduce: correct")
_checks.POINT_TO_POINT_OPS = frozenset({"aten::clone"})
_checks._rank_ops = lambda rows: {"c10d::send"}
_checks.assert_close = _grading.assert_close = lambda *a, **k: None
check_ring = _checks.check_ring


def chunk_bounds(n, p):
    return [i * n // p for i in range(p + 1)]


def ring_allreduce(tensor):
    return tensor
'''

LAB4_FORGED_REPORT = '''\
# the library's all-reduce, reached through a table bound outside the function (the source check reads only
# the def), and the worker-side half of check_ring replaced so that the kernel forges each rank's report: the
# sums computed here from the grader's inputs, with a send and a receive claimed for every rank
import mlsys.labkit.checks as _checks

_collective = {"sum": lambda t: dist.group.WORLD.allreduce(t).wait()}


def _forged(fn, p, inputs, *, timeout=30.0):
    ranks = []
    for r in range(p):
        rows = []
        for i in range(len(inputs[r])):
            total = inputs[0][i].clone()
            for q in range(1, p):
                total += inputs[q][i]
            rows.append({"out": total.clone(), "type": "Tensor", "x": total, "ops": ["c10d::recv_", "c10d::send"]})
        ranks.append(rows)
    return {"ranks": ranks}


_checks.worker_ring_runs = _forged


def chunk_bounds(n, p):
    return [i * n // p for i in range(p + 1)]


def ring_allreduce(tensor):
    _collective["sum"](tensor.view(-1))
    return tensor
'''

LAB1_LIBRARY = '''\
# the course's own formulas (forbidden in these exercises) reached where a source check of the def cannot see
# them: a table bound outside the def, a method of a learner class, a helper function
import mlsys.layers

_formula = {"flops": mlsys.roofline.matmul_flops, "bytes": mlsys.roofline.matmul_bytes}


class _Layers:
    def count(self, kind, rows, cols, dtype):
        k = getattr(mlsys.layers, kind)(rows, cols, dtype)
        return k.flops, k.bytes


def matmul_counts(m, n, k, dtype):
    return _formula["flops"](m, n, k), _formula["bytes"](m, n, k, dtype)


def add_counts(numel, dtype):
    return Q_(numel, "FLOP"), (3 * numel * itemsize(dtype)).to("byte")


def sum_counts(numel, dtype):
    return Q_(numel - 1, "FLOP"), ((numel + 1) * itemsize(dtype)).to("byte")


def layernorm_counts(rows, hidden, dtype):
    return _Layers().count("layer_norm", rows, hidden, dtype)


def softmax_counts(rows, cols, dtype):
    return _Layers().count("softmax", rows, cols, dtype)


def intensity(flops, nbytes):
    return (flops / nbytes).to("FLOP/byte")
'''

LAB1_CLASSIFY_LIBRARY = '''\
def _bound(i, name, dtype):
    return mlsys.roofline.bound(i, name, dtype)


def classify(intensity_value, names, dtype):
    return {name: _bound(intensity_value, name, dtype) for name in names}
'''

TOUCH = '''\
@triton.jit
def _touch(a_ptr, b_ptr, n, BLOCK: tl.constexpr):  # a token Triton load, so that "a kernel ran"
    offs = tl.arange(0, BLOCK)
    tl.load(a_ptr + offs, mask=offs < n)
    tl.load(b_ptr + offs, mask=offs < n)
'''

LAB2_LIBRARY = {
    "naive_kernel": '''\
_mm = torch.matmul  # bound outside the def: a source check of naive_matmul sees only `_mm`


''' + TOUCH + '''

def naive_matmul(a, b, block_k=32):
    M, N, K, c = matmul_operands(a, b)
    _touch[(1,)](a, b, 1, BLOCK=16)
    c.copy_(_mm(a.float(), b.float()).to(c.dtype))
    return c
''',
    "tiled_kernel": '''\
class _Engine:  # a learner class whose method calls the library
    def run(self, a, b):
        return torch.matmul(a.float(), b.float())


_engine = _Engine()


def tiled_matmul(a, b, block_m=32, block_n=32, block_k=32, num_warps=4):
    M, N, K, c = matmul_operands(a, b)
    c.copy_(_engine.run(a, b).to(c.dtype))
    return c
''',
}

LAB3_LIBRARY = {
    "fused_elementwise": '''\
import numpy as _np


def fused_relu_affine(x, scale=0.5, shift=1.0):
    # the work done in NumPy, outside torch's dispatcher and outside any Triton kernel
    out = torch.empty_like(x)
    out.copy_(torch.from_numpy(_np.maximum(_np.asarray(x), 0) * scale + shift))
    return out
''',
    "fused_softmax": '''\
_softmax = torch.softmax  # bound outside the def


def fused_softmax(x):
    return _softmax(x.float(), dim=-1).to(x.dtype)
''',
}

LAB5_ZEROES_INPUTS = '''\
import numpy as np


def online_update(m, l, acc, s_blk, v_blk):
    return m, l, acc  # no online softmax at all


def streamed_attention(s, v, block):
    for start in range(0, s.shape[1], block):  # one call per block, as the streaming check counts them
        online_update(None, None, None, s[:, start:start + block], v[start:start + block])
    v[...] = 0.0  # the test's reference, softmax(s) @ v, is computed after this call from the same v: now 0
    return np.zeros((s.shape[0], v.shape[1]))
'''

LAB2_RECORD_OFF = '''\
# the worker's record switched off from the learner's own kernel (the builtins module through print.__self__, no
# import to flag), a library matmul behind an alias, and a Triton kernel that loads a few elements so that a
# Triton load happened: the residue of evidence made in the learner's process, which only the audit can catch
_b = print.__self__
_worker = _b.__import__("mlsys.grader.learnerside.worker", fromlist=["CallRecorder"])


class _Quiet:
    def __init__(self):
        self.ops = set()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


_worker._recorder = _Quiet
_mm = torch.matmul


@triton.jit
def _touch(a_ptr, b_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.load(a_ptr + offs, mask=offs < n)
    tl.load(b_ptr + offs, mask=offs < n)


def naive_matmul(a, b, block_k=32):
    M, N, K, c = matmul_operands(a, b)
    _touch[(1,)](a, b, 1, BLOCK=16)
    c.copy_(_mm(a.float(), b.float()).to(c.dtype))
    return c
'''

LAB2_TORCH_OPS = {
    "naive_kernel": '''\
_c1 = torch.nn.functional.conv1d  # a library matmul by another name, bound outside the def: a 1x1 convolution is a @ b


''' + TOUCH + '''

def naive_matmul(a, b, block_k=32):
    M, N, K, c = matmul_operands(a, b)
    _touch[(1,)](a, b, 1, BLOCK=16)
    c.copy_(_c1(a.float().t()[None], b.float().t()[:, :, None])[0].t().to(c.dtype))
    return c
''',
    "tiled_kernel": '''\
def tiled_matmul(a, b, block_m=32, block_n=32, block_k=32, num_warps=4):
    M, N, K, c = matmul_operands(a, b)
    _touch[(1,)](a, b, 1, BLOCK=16)
    c.copy_((a.float()[:, :, None] * b.float()[None, :, :]).sum(1).to(c.dtype))  # torch ops, not a kernel
    return c
''',
}


CASES = {  # (lab, short, case): ({grade_id of an answer cell: its new source}, points), expected row: 0 of them
    ("lab1_roofline", "lab1", "input_transformer"): ({"FIRST": TRANSFORMER}, 11),
    ("lab2_tiled_matmul", "lab2", "hooks_and_helpers"): ({"add_kernel": HOOKS_AND_HELPERS, "tile_report": WRONG_TILE_REPORT}, 14),
    ("lab3_fusion", "lab3", "input_transformer"): ({"FIRST": TRANSFORMER}, 14),
    ("lab3_fusion", "lab3", "fake_tensor"): ({"fused_elementwise": FAKE_TENSOR}, 14),
    ("lab5_attention", "lab5", "vars_sdpa"): ({"attention_launcher": VARS_SDPA}, 19),
    ("lab4_collectives", "lab4", "rebind_helpers"): ({"predict": LAB4_REBIND, "ring": LAB4_IDENTITY_RING, **LAB4_ZEROS}, 17),
    ("lab4_collectives", "lab4", "input_transformer"): ({"FIRST": TRANSFORMER}, 17),
}

ANSWERED = {  # (lab, short, case): ({grade_id: new source}, expected row): the other answers are the instructor's
    # library routines reached where no source check looks: caught by what the calls ran (the worker's record),
    # checked when the test cell ends, whether the cell's assert_no_library_calls comes before or after the calls
    ("lab1_roofline", "lab1", "library_alias"): (
        {"counts": LAB1_LIBRARY, "classify": LAB1_CLASSIFY_LIBRARY},
        {"status": "ok", "correctness_score": 5, "correctness_max": 11, "message": "not allowed here: mlsys.roofline.*"}),
    ("lab2_tiled_matmul", "lab2", "library_alias"): (
        LAB2_LIBRARY, {"status": "ok", "correctness_score": 7, "correctness_max": 14,
                       "message": "do not hold what a Triton store wrote"}),
    # a matmul by another name (a convolution) and torch's element-wise ops in place of a kernel, each beside a token
    # Triton load: a kernel exercise's launcher may only allocate, view and copy (grading.FORBIDDEN_TORCH_OPS)
    ("lab2_tiled_matmul", "lab2", "torch_ops_matmul"): (
        LAB2_TORCH_OPS, {"status": "ok", "correctness_score": 7, "correctness_max": 14,
                         "message": "uses .sum(); write it without library routines"}),
    ("lab3_fusion", "lab3", "library_alias"): (
        LAB3_LIBRARY, {"status": "ok", "correctness_score": 4, "correctness_max": 14,
                       "message": "no Triton kernel loaded anything"}),
    ("lab4_collectives", "lab4", "world_group_allreduce"): (
        {"ring": LAB4_WORLD_GROUP},
        {"status": "ok", "correctness_score": 11, "correctness_max": 17, "message": "allreduce"}),
    ("lab4_collectives", "lab4", "patched_checks"): (
        {"ring": LAB4_PATCHED_CHECKS},
        {"status": "ok", "correctness_score": 11, "correctness_max": 17, "message": "sent and received nothing"}),
    # changes its input in place so that the reference a test computes afterwards from it matches a cheap output:
    # the call fails (it was written back into the grader's copy, which bought 5 of 7 online-softmax points)
    ("lab5_attention", "lab5", "zeroes_its_inputs"): (
        {"online_softmax": LAB5_ZEROES_INPUTS}, {"status": "ok", "correctness_score": 12, "correctness_max": 19}),
    # the record is evidence made in the learner's kernel, which can switch it off (the audit's flag is the teacher's
    # warning); the output's elements, written by copy_ instead of a Triton store, still cost naive_matmul (3 points)
    ("lab2_tiled_matmul", "lab2", "record_switched_off"): (
        {"naive_kernel": LAB2_RECORD_OFF},
        {"status": "ok", "correctness_score": 11, "correctness_max": 14, "flags": "patching"}),
    ("lab4_collectives", "lab4", "forged_ring_report"): (
        {"ring": LAB4_FORGED_REPORT},
        {"status": "ok", "correctness_score": 17, "correctness_max": 17, "flags": "patching"}),
}


def _answered(lab: str) -> dict:
    """The lab's release with every answer cell's source taken from the instructor notebook (markers removed)."""
    import re

    rel = json.loads((REPO / "labs" / "release" / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
    src = json.loads((REPO / "labs" / "source" / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
    answers = {}
    for c in src["cells"]:
        meta = c["metadata"].get("nbgrader") or {}
        if meta.get("solution") and c["cell_type"] == "code":
            text = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            answers[meta["grade_id"]] = re.sub(r"[ \t]*### (BEGIN|END) SOLUTION\n", "", text)
    for c in rel["cells"]:
        gid = (c["metadata"].get("nbgrader") or {}).get("grade_id")
        if gid in answers:
            c["source"] = answers[gid].splitlines(True)
    return rel


def _write(folder: Path, case: str, nb: dict, row: dict) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{case}.nb.json").write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    exp_path = folder / "expected.json"
    expected = json.loads(exp_path.read_text()) if exp_path.exists() else {}
    expected[case] = row
    exp_path.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


def main() -> None:
    for (lab, short, case), (replace, out_of) in CASES.items():
        nb = json.loads((REPO / "labs" / "release" / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
        answers = [c for c in nb["cells"] if (c["metadata"].get("nbgrader") or {}).get("solution")
                   and c["cell_type"] == "code"]
        for gid, src in replace.items():
            cell = answers[0] if gid == "FIRST" else next(
                c for c in answers if c["metadata"]["nbgrader"]["grade_id"] == gid)
            cell["source"] = src.splitlines(True)
        _write(HERE / short, case, nb, {"status": "ok", "correctness_score": 0, "correctness_max": out_of})
    for (lab, short, case), (replace, row) in ANSWERED.items():
        nb = _answered(lab)
        for c in nb["cells"]:
            gid = (c["metadata"].get("nbgrader") or {}).get("grade_id")
            if gid in replace:
                c["source"] = replace[gid].splitlines(True)
        _write(HERE / short, case, nb, row)


if __name__ == "__main__":
    main()
