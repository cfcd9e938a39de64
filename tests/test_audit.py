"""The static audit of answer cells: each suspicious construct is flagged with its kind; honest code is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlsys.course.audit import audit_notebook, audit_source, format_flags

LABS = Path(__file__).resolve().parent.parent / "labs"


@pytest.mark.parametrize("src, kind, what", [
    ("open('../../source/lab1/lab1.ipynb').read()", "file", "open() outside"),
    ("import pathlib\npathlib.Path('/work/main/labs').iterdir()", "file", "outside the working folder"),
    ("import subprocess\nsubprocess.run(['ls'])", "process", "import subprocess"),
    ("import os\nos.system('ls')", "process", "os.system()"),
    ("!curl http://example.com", "process", "IPython !curl"),
    ("import ctypes", "native", "import ctypes"),
    ("import torch\ntorch.matmul = lambda a, b: a", "patching", "assignment to torch.matmul"),
    ("from torch import Tensor\nTensor.copy_ = None", "patching", "assignment to torch.Tensor.copy_"),
    ("import mlsys.bench.timing as t\nt.time_fn = None", "patching", "assignment to mlsys.bench.timing.time_fn"),
    ("import builtins\nbuiltins.print = None", "patching", "assignment to builtins.print"),
    ("import numpy as np\nsetattr(np, 'dot', None)", "patching", "setattr()"),
    ("import sys\nsys.modules['torch'] = None", "patching", "sys.modules"),
    ("import torch\nlib = torch.library.Library('aten', 'IMPL')", "patching", "torch.library.Library()"),
    ("import importlib\nimportlib.reload(x)", "introspection", "import importlib"),
    ("import linecache", "introspection", "import linecache"),
    ("import gc\ngc.get_objects()", "introspection", "import gc"),
    ("import sys\nsys._getframe(1).f_globals", "introspection", "sys._getframe()"),
    ("get_ipython().set_custom_exc((Exception,), None)", "introspection", "get_ipython()"),
    ("import torch\ntorch._C._len_torch_dispatch_stack()", "introspection", "_len_torch_dispatch_stack"),
    ("import threading\nthreading.Thread(target=f, daemon=True).start()", "process", "import threading"),
    ("import signal", "process", "import signal"),
    ("import socket", "network", "import socket"),
    ("exec(open('x').read())", "dynamic", "exec()"),
    ("def f(:\n", "syntax", "does not parse"),
])
def test_each_suspicious_construct_is_flagged(src, kind, what):
    flags = audit_source(src)
    assert any(f.kind == kind and what in f.what for f in flags), [str(f) for f in flags]


@pytest.mark.parametrize("src", [
    "def matmul(a, b):\n    c = torch.empty(a.shape[0], b.shape[1])\n    return c",
    "import numpy as np\nx = np.zeros(3)\nx[0] = 1.0",
    "import torch\nf = torch.compile(g)",
    "with open('results.txt', 'w') as fh:\n    fh.write('ok')",
    "%timeit f()",
    "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr):\n    pass",
    "obj.attr = 3\nself.data = []",
])
def test_honest_code_is_not_flagged(src):
    assert audit_source(src) == []


def test_cells_left_as_released_and_test_cells_are_not_audited():
    given = {"cells": [{"cell_type": "code", "source": "import subprocess  # installs in Colab"}]}
    nb = {"cells": [
        {"cell_type": "code", "metadata": {}, "source": "import subprocess  # installs in Colab"},
        {"cell_type": "code", "metadata": {"nbgrader": {"grade": True, "solution": False}}, "source": "import gc"},
        {"cell_type": "code", "metadata": {}, "source": ["import ", "ctypes"]},
    ]}
    flags = audit_notebook(nb, given)
    assert [(f.cell, f.kind) for f in flags] == [(2, "native")]
    assert format_flags(flags) == "native: import ctypes (cell 2, line 1)"


@pytest.mark.parametrize("lab", sorted(p.name for p in (LABS / "source").iterdir() if p.is_dir()))
def test_instructor_solutions_raise_no_flag(lab):
    source = json.loads((LABS / "source" / lab / f"{lab}.ipynb").read_text())
    release = LABS / "release" / lab / f"{lab}.ipynb"
    given = json.loads(release.read_text()) if release.is_file() else None
    assert format_flags(audit_notebook(source, given)) == ""
