"""The static audit of answer cells: each suspicious construct is flagged with its kind; honest code is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlsys.grader.decide.audit import audit_notebook, audit_source, format_flags

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
    ("import threading\nthreading.Thread(target=f, daemon=True).start()", "concurrency", "import threading"),
    ("import threading\nthreading.Thread(target=f, daemon=True).start()", "concurrency", "threading.Thread()"),
    ("from concurrent.futures import ThreadPoolExecutor\nThreadPoolExecutor(2)", "concurrency", "import concurrent"),
    ("import torch\ns = torch.cuda.Stream()", "concurrency", "torch.cuda.Stream() (a CUDA stream)"),
    ("import torch\nwith torch.cuda.stream(s):\n    pass", "concurrency", "torch.cuda.stream()"),
    # allowlist: any import outside the lab's own tools
    ("import os", "process", "import os"),
    ("import pickle", "file", "import pickle"),
    ("import scipy.linalg", "import", "import scipy.linalg"),
    ("from . import helper", "import", "relative import"),
    ("from torch.utils._python_dispatch import TorchDispatchMode", "introspection", "import torch.utils._python_dispatch"),
    ("from mlsys.grader.decide import trusted", "introspection", "mlsys.grader.decide.trusted"),
    # get_ipython in any spelling
    ("import IPython\nIPython.get_ipython().input_transformers_post.append(f)", "introspection", "get_ipython"),
    ("from IPython import get_ipython as g\ng().events.register('pre_run_cell', f)", "introspection", "get_ipython"),
    ("import IPython.core.getipython as m\nm.get_ipython()", "introspection", "get_ipython"),
    ("import sys\nsys.modules['IPython'].get_ipython()", "introspection", "get_ipython"),
    ("f = getattr(__import__('IPython'), 'get_' + 'ipython')", "introspection", "get_ipython"),
    ("ip = __builtins__.get_ipython()", "introspection", "get_ipython"),
    # dynamic attribute access on library modules
    ("import torch.nn.functional as F\nsdpa = vars(F)['scaled_dot_product_attention']", "dynamic", "vars(F"),
    ("import torch\nmm = getattr(torch, 'm' + 'm')", "dynamic", "getattr(torch"),
    ("import torch\nmm = torch.__dict__['mm']", "dynamic", "uses torch.__dict__"),
    ("import torch\nf = torch.Tensor.__getattribute__", "dynamic", "__getattribute__"),
    # classes imitating library types
    ("import torch\nclass Lazy(torch.Tensor):\n    pass", "imitation", "subclasses torch.Tensor"),
    ("import numpy as np\nclass A(np.ndarray):\n    pass", "imitation", "subclasses numpy.ndarray"),
    ("class Lazy:\n    __module__ = 'torch.lazy'", "imitation", "defines __module__"),
    ("class Lazy:\n    def __torch_function__(cls, f, t, a=(), k=None):\n        pass", "imitation", "__torch_function__"),
    ("class N(float):\n    pass", "imitation", "subclasses float"),
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
    "import torch\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x",
    "from dataclasses import dataclass\n@dataclass\nclass Cfg:\n    block: int = 64",
    "import math\nimport random\nfrom functools import partial\nimport torch.distributed as dist",
    "import triton.language as tl\nx = getattr(cfg, 'num_warps', 4)",
    "import matplotlib.pyplot as plt\nplt.plot([1, 2])",
    "import torch\nfrom torch.utils.data import TensorDataset\nv = torch.__version__",
    "from mlsys.bench import micro, time_fn\nfrom mlsys.runtime.launch import launch",
    # a kernel calling another kernel of the notebook, Triton's helpers and builtins
    ("import triton\nimport triton.language as tl\n@triton.jit\ndef h(x):\n    return x\n"
     "@triton.autotune(configs=cfgs(), key=['n'])\n@triton.jit\ndef k(a_ptr, n):\n"
     "    for i in range(min(n, 4)):\n        tl.store(a_ptr + i, h(tl.load(a_ptr + i)))\n"),
])
def test_honest_code_is_not_flagged(src):
    assert audit_source(src) == []


def test_cells_left_as_released_and_test_cells_are_not_audited():
    test = {"nbgrader": {"grade": True, "solution": False, "grade_id": "test_x"}}
    given = {"cells": [{"cell_type": "code", "source": "import subprocess  # installs in Colab"},
                       {"cell_type": "code", "metadata": test, "source": "assert f(1) == 2"}]}
    nb = {"cells": [
        {"cell_type": "code", "metadata": {}, "source": "import subprocess  # installs in Colab"},
        {"cell_type": "code", "metadata": test, "source": "import gc"},  # restored by the grader: not audited
        {"cell_type": "code", "metadata": {}, "source": ["import ", "ctypes"]},
    ]}
    flags = audit_notebook(nb, given)
    assert [(f.cell, f.kind) for f in flags] == [(2, "native")]
    assert format_flags(flags) == "native: import ctypes (cell 2, line 1)"


def test_a_cell_that_only_says_it_is_a_test_is_audited():
    """Test metadata with a grade id the release lacks, or a second cell of a test's id, runs as an ordinary cell
    (teach._normalise_cells), so it is audited; so is a cell whose nbgrader metadata is not a dict."""
    test = {"nbgrader": {"grade": True, "solution": False, "grade_id": "test_x"}}
    invented = {"nbgrader": {"grade": True, "solution": False, "grade_id": "test_invented"}}
    given = {"cells": [{"cell_type": "code", "metadata": test, "source": "assert f(1) == 2"}]}
    nb = {"cells": [
        {"cell_type": "code", "metadata": test, "source": "assert f(1) == 2"},
        {"cell_type": "code", "metadata": test, "source": "import ctypes"},  # the second test_x
        {"cell_type": "code", "metadata": invented, "source": "import socket"},
        {"cell_type": "code", "metadata": {"nbgrader": "junk"}, "source": "import signal"},
    ]}
    assert [(f.cell, f.kind) for f in audit_notebook(nb, given)] == [(1, "native"), (2, "network"), (3, "process")]


@pytest.mark.parametrize("lab", sorted(p.name for p in (LABS / "source").iterdir() if p.is_dir()))
def test_instructor_solutions_raise_no_flag(lab):
    source = json.loads((LABS / "source" / lab / f"{lab}.ipynb").read_text())
    release = LABS / "release" / lab / f"{lab}.ipynb"
    given = json.loads(release.read_text()) if release.is_file() else None
    assert format_flags(audit_notebook(source, given)) == ""


def test_rebinding_a_name_the_course_imported_is_flagged():
    given = {"cells": [{"cell_type": "code", "metadata": {}, "source": "from mlsys.labkit import grading\nimport torch"}]}
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": src} for src in (
        "import types\ngrading = types.SimpleNamespace(assert_close=lambda *a, **k: None)",
        "def grading():\n    pass",
        "import torch\nfrom mlsys.labkit import grading",  # the same things again: not a flag
    )]}
    flags = [f for f in audit_notebook(nb, given) if "rebinds" in f.what]
    assert [(f.cell, f.kind) for f in flags] == [(0, "patching"), (1, "patching")], [str(f) for f in flags]
    assert "rebinds the course's name 'grading' (mlsys.labkit.grading)" in flags[0].what


@pytest.mark.parametrize("src,kind", [
    # the builtins module without importing it: its __import__ and the get_ipython IPython puts there
    ("_b = print.__self__\n", "introspection"),
    ("w = len.__self__.__import__('x')\n", "dynamic"),
    # a module reached as an attribute of a library module, or named in a string
    ("import torch\nw = torch.sys.modules['x']\n", "introspection"),
    ("import numpy as np\nnp.os.system('id')\n", "process"),
    ("m = modules['mlsys.grader.learnerside.worker']\n", "introspection"),
    ("m = modules.get('sys')\n", "introspection"),
    # a course function or a tensor method replaced on an object reached some other way
    ("w = find()\nw.dispatch_recorder = lambda: None\n", "patching"),
    ("T = type(x)\nT.copy_ = lambda self, src: self\n", "patching"),
    ("T = type(x)\nsetattr(T, 'any', lambda self: False)\n", "patching"),
    ("setattr(find(), name, None)\n", "patching"),
    ("__name__ = 'mlsys.roofline'\n", "imitation"),
    # the grader's request to the kernel looks up __import__ in the notebook's namespace first
    ("def __import__(name, *a, **k):\n    return fake\n", "patching"),
    ("__import__ = fake\n", "patching"),
    # look-ups by name that spell getattr otherwise, and a course module named without its package
    ("import operator\nimport mlsys\nw = operator.attrgetter('course.worker')(mlsys)\n", "dynamic"),
    ("import operator\nimport mlsys\nw = operator.attrgetter('course.worker')(mlsys)\n", "introspection"),
    ("from functools import reduce\nimport mlsys\nf = reduce(getattr, ['roofline', 'bound'], mlsys)\n", "dynamic"),
    ("w = find()\nw.__dict__.update(x=1)\n", "dynamic"),
    # the grader's own machinery used as a tool: run_isolated forks a process whose work no record sees
    ("from mlsys.labkit.grading import run_isolated\n", "introspection"),
    ("import mlsys\nc = mlsys.labkit.checks.calls_of(f, 'g')\n", "introspection"),
    # an IPython event hook on a shell object not named like one, and the profile hook the worker's record uses
    ("shell = thing()\nshell.events.register('pre_run_cell', f)\n", "introspection"),
    ("import torch\ntorch.sys.setprofile(None)\n", "introspection"),
    # parts of allowed packages that do the work where no record of the call looks: other processes, native code
    # built or loaded at run time, other threads; and private parts of any allowed package
    ("import torch.multiprocessing as tmp\npool = tmp.Pool(1)\n", "process"),
    ("import torch\nrows = torch.utils.data.DataLoader(ds, num_workers=2)\n", "process"),
    ("from torch.utils.data import DataLoader\n", "process"),
    ("import torch.distributed.rpc as rpc\n", "process"),
    ("from torch.utils.cpp_extension import load_inline\n", "native"),
    ("import torch\ntorch.ops.load_library('libmm.so')\n", "native"),
    ("import numpy as np\nlib = np.ctypeslib.load_library('libmm', '.')\n", "native"),
    ("import torch\nfut = torch.jit.fork(f, x)\n", "concurrency"),
    ("from torch.futures import Future\n", "concurrency"),
    ("import torch\nm = torch.hub.load('a/b', 'c')\n", "network"),
    ("from torch.utils._mode_utils import no_dispatch\n", "introspection"),
    ("import torch\nx = torch._utils._rebuild_tensor\n", "introspection"),
    ("import triton\nd = triton.runtime.driver.active\n", "introspection"),
    ("from mlsys.runtime.processes import kill_tree\n", "process"),
    # a Triton kernel whose body calls NumPy: it runs only under the interpreter, outside the call's record
    ("import numpy as np\nimport triton\n@triton.jit\ndef k(a_ptr):\n    x = np.matmul(a_ptr, a_ptr)\n", "kernel"),
    # ... or a plain function of the notebook, or the interpreter's data behind a Triton tensor
    ("import triton\ndef keep(x):\n    return x\n@triton.jit\ndef k(a_ptr):\n    keep(a_ptr)\n", "kernel"),
    ("import triton\n@triton.jit\ndef k(a_ptr):\n    d = a_ptr.handle.data\n", "kernel"),
])
def test_roundabout_ways_to_the_grader_are_flagged(src, kind):
    assert kind in {f.kind for f in audit_source(src)}, audit_source(src)


def test_the_graders_modules_through_a_name_the_course_imported_are_flagged():
    """A lab's set-up cell imports ``checks`` and ``grading``; an answer that calls ``grading.run_isolated`` uses the
    grader's machinery (its forked child's work is in no record), one that asks ``mlsys.labkit.device`` is fine."""
    course = {"grading": "mlsys.labkit.grading", "checks": "mlsys.labkit.checks", "mlsys": "mlsys"}
    flags = audit_source("out = grading.run_isolated(f, a)\nok = mlsys.labkit.device.triton_interpreted()\n"
                         "grading.assert_close(out, a)\nfrom mlsys.labkit.grading import GradingError\n", 1, course)
    assert [(f.line, f.kind) for f in flags] == [(1, "introspection")], flags


_KERNEL_HEAD = "import triton\nimport triton.language as tl\n"


@pytest.mark.parametrize("src, kind, what", [
    # round 4: a library known only through an assignment, an attribute or a subscript passed unflagged
    (_KERNEL_HEAD + "import torch\n_t = torch\n@triton.jit\ndef k(x_ptr):\n    x = tl.load(x_ptr)\n    y = _t.matmul(x, x)\n",
     "kernel", "calls torch.matmul()"),
    ("import torch\n_u = torch.utils\nm = _u._python_dispatch\n", "introspection", "torch.utils._python_dispatch"),
    ("import builtins\ng = getattr(builtins, 'get' + 'attr')\nimport torch\nf = g(torch, 'mat' + 'mul')\n",
     "dynamic", "getattr(torch, ...)"),
    (_KERNEL_HEAD + "import numpy as np\nclass blocks:\n    mac = staticmethod(lambda a, b, acc: acc + np.dot(a, b))\n"
     "@triton.jit\ndef k(a_ptr, b_ptr):\n    a = tl.load(a_ptr)\n    acc = tl.zeros((16, 16), tl.float32)\n"
     "    acc = blocks.mac(a, a, acc)\n    tl.store(a_ptr, acc.to(tl.float16))\n", "kernel", "calls blocks.mac()"),
    (_KERNEL_HEAD + "import torch\nOPS = {'softmax': torch.softmax}\n@triton.jit\ndef k(x_ptr):\n    x = tl.load(x_ptr)\n"
     "    y = OPS['softmax'](x)\n", "kernel", "torch.softmax[...]()"),
    (_KERNEL_HEAD + "import numpy as np\nalias = np\nsecond = alias\n@triton.jit\ndef k(x_ptr):\n    x = tl.load(x_ptr)\n"
     "    y = second.dot(x, x)\n", "kernel", "numpy.dot()"),
])
def test_names_are_resolved_through_assignments_attributes_and_subscripts(src, kind, what):
    flags = audit_source(src)
    assert any(f.kind == kind and what in f.what for f in flags), [str(f) for f in flags]


def test_a_kernel_of_triton_calls_and_its_own_values_methods_is_not_flagged():
    src = (_KERNEL_HEAD + "@triton.jit\ndef k(x_ptr, n, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n"
           "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n    x = tl.load(x_ptr + offs, mask=offs < n)\n"
           "    acc = tl.zeros((BLOCK,), tl.float32) + x.to(tl.float32)\n    m = tl.max(acc, axis=0)\n"
           "    tl.store(x_ptr + offs, (acc - m).to(tl.float16), mask=offs < n)\n    q = min(1, tl.cdiv(n, BLOCK))\n")
    assert audit_source(src) == []
