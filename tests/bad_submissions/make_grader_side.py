"""Write the corpus cases that attack test cells run in the grader (Labs 1, 2, 3 and 5).

``python tests/bad_submissions/make_grader_side.py`` regenerates them from the labs' **releases** (a
learner's blank copy): each case replaces whole answer cells (metadata kept) with hostile code. Every
attack here would raise a blank notebook's score if a test cell ran where the answer cells run (in the
learner's kernel); graded with the test cells in the grader process each earns 0. The expected rows are
in each lab folder's ``expected.json`` (merged, not overwritten).
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

import mlsys.course.checks as _checks
import mlsys.course.grading as _grading

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

import mlsys.course.checks as _checks
import mlsys.course.grading as _grading


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

import mlsys.course.checks as _checks
import mlsys.course.grading as _grading

_sdpa = vars(F)["scaled_dot_product_attention"]


def attention(q, k, v, causal=False, scale=None):
    return _sdpa(q, k, v, is_causal=causal, scale=scale)


_grading.assert_no_library_calls = lambda *a, **k: None
_checks.check_running_sums_fp32 = lambda *a, **k: None
_checks.running_sums_probe = lambda *a, **k: [(torch.zeros(16, 16), torch.zeros(16))] * 2
grading = type("Anything", (), {"__getattr__": lambda self, name: (lambda *a, **k: None)})()
'''

CASES = {  # (lab, short, case): {grade_id of an answer cell: its new source}, expected row
    ("lab1_roofline", "lab1", "input_transformer"): ({"FIRST": TRANSFORMER}, 11),
    ("lab2_tiled_matmul", "lab2", "hooks_and_helpers"): ({"add_kernel": HOOKS_AND_HELPERS, "tile_report": WRONG_TILE_REPORT}, 14),
    ("lab3_fusion", "lab3", "input_transformer"): ({"FIRST": TRANSFORMER}, 14),
    ("lab3_fusion", "lab3", "fake_tensor"): ({"fused_elementwise": FAKE_TENSOR}, 14),
    ("lab5_attention", "lab5", "vars_sdpa"): ({"attention_launcher": VARS_SDPA}, 19),
}


def main() -> None:
    for (lab, short, case), (replace, out_of) in CASES.items():
        nb = json.loads((REPO / "labs" / "release" / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
        answers = [c for c in nb["cells"] if (c["metadata"].get("nbgrader") or {}).get("solution")
                   and c["cell_type"] == "code"]
        for gid, src in replace.items():
            cell = answers[0] if gid == "FIRST" else next(
                c for c in answers if c["metadata"]["nbgrader"]["grade_id"] == gid)
            cell["source"] = src.splitlines(True)
        folder = HERE / short
        folder.mkdir(exist_ok=True)
        (folder / f"{case}.nb.json").write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        exp_path = folder / "expected.json"
        expected = json.loads(exp_path.read_text()) if exp_path.exists() else {}
        expected[case] = {"status": "ok", "correctness_score": 0, "correctness_max": out_of}
        exp_path.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
