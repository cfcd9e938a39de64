"""The audit's tables: what an answer cell may import (the allowlist), and what each thing it may not is
flagged as (process, native, introspection, patching...), with the course's own modules a learner may not
reach. :mod:`mlsys.grader.decide.auditor` walks a cell against them; :mod:`mlsys.grader.decide.audit` is the entry point.
"""

from __future__ import annotations

import re

ALLOWED_MODULES: frozenset[str] = frozenset({
    "torch", "triton", "numpy", "math", "mlsys", "matplotlib", "__future__", "dataclasses", "functools",
    "itertools", "typing", "collections", "contextlib", "random", "statistics", "operator", "enum", "fractions",
    "string", "textwrap", "warnings",
})
"""Top-level modules an answer cell may import without a flag."""

_PRIVATE_PARTS = {
    "torch.library": "patching", "torch._C": "introspection", "torch.utils._python_dispatch": "introspection",
    "torch.overrides": "introspection", "torch._dynamo": "introspection", "torch.testing._internal": "introspection",
    "torch._ops": "introspection", "torch._subclasses": "imitation", "mlsys.grader.decide.trusted": "introspection",
    "mlsys.grader.learnerside.cellrunner": "introspection", "mlsys.grader.learnerside.testcells": "introspection",
    "mlsys.labkit.proxy": "introspection", "mlsys.grader.learnerside.worker": "introspection",
    "mlsys.grader.sandbox": "introspection", "mlsys.grader.teach": "introspection",
    # the verdict's parts, moved out of mlsys.grader.decide.trusted (issue 48): as private as it
    "mlsys.grader.decide.perfspec": "introspection", "mlsys.grader.decide.perfrules": "introspection",
    "mlsys.grader.decide.perfboxes": "introspection", "mlsys.grader.decide.perfrounds": "introspection",
    # and teach's (the class grader's) parts
    "mlsys.grader.nbgraderrun": "introspection", "mlsys.grader.release": "introspection",
    "mlsys.grader.submission": "introspection", "mlsys.grader.gradedrow": "introspection",
    "mlsys.grader.classplan": "introspection", "mlsys.grader.classrun": "introspection",
    "mlsys.grader.classgrading": "introspection",
    "torch.cuda.streams": "concurrency", "triton.runtime.driver": "introspection",
    # parts of allowed packages that run work where no record of the call sees it: other processes, native code
    # built or loaded at run time, other threads, other machines
    "torch.multiprocessing": "process", "torch.utils.data.DataLoader": "process",
    "torch.utils.data.dataloader": "process", "torch.distributed.rpc": "process",
    "torch.distributed.elastic": "process", "torch.distributed.run": "process", "torch.distributed.launch": "process",
    "torch.distributed.launcher": "process", "numpy.f2py": "process", "numpy.distutils": "process",
    "mlsys.runtime.processes": "process",
    "torch.utils.cpp_extension": "native", "torch.ops.load_library": "native", "torch.classes.load_library": "native",
    "torch.cuda.jiterator": "native", "numpy.ctypeslib": "native", "triton.runtime.build": "native",
    "torch.jit.fork": "concurrency", "torch.futures": "concurrency", "torch.hub": "network", "torch.package": "file",
}
_MODULE_KIND = {
    "subprocess": "process", "multiprocessing": "process", "signal": "process", "atexit": "process", "pty": "process",
    "os": "process", "sys": "introspection", "threading": "concurrency", "_thread": "concurrency",
    "concurrent": "concurrency", "asyncio": "concurrency", "ctypes": "native", "cffi": "native", "mmap": "native",
    "_ctypes": "native", "socket": "network", "urllib": "network", "requests": "network", "http": "network",
    "ftplib": "network", "smtplib": "network", "ssl": "network", "importlib": "introspection",
    "linecache": "introspection", "gc": "introspection", "inspect": "introspection", "IPython": "introspection",
    "ipykernel": "introspection", "traitlets": "introspection", "code": "introspection", "codeop": "introspection",
    "builtins": "patching", "shutil": "file", "glob": "file", "tempfile": "file", "pathlib": "file",
    "sqlite3": "file", "pickle": "file", "dill": "file", "io": "file",
}
_CALL_KIND = {
    "eval": "dynamic", "exec": "dynamic", "compile": "dynamic", "__import__": "dynamic", "globals": "introspection",
    "locals": "introspection", "breakpoint": "introspection", "setattr": "patching", "delattr": "patching",
    "os.system": "process", "os.popen": "process", "os.fork": "process", "os.kill": "process",
    "os.killpg": "process", "os.setsid": "process", "os.posix_spawn": "process", "os._exit": "process",
    "os.remove": "file", "os.unlink": "file", "os.rename": "file", "os.replace": "file", "os.chmod": "file",
    "os.walk": "file", "os.listdir": "file", "os.scandir": "file", "os.symlink": "file", "os.link": "file",
    "os.chdir": "file", "sys._getframe": "introspection", "sys.settrace": "introspection",
    "sys.setprofile": "introspection", "sys.addaudithook": "introspection",
    "operator.attrgetter": "dynamic", "operator.methodcaller": "dynamic",  # getattr by a string, spelled otherwise
}
_STREAMS = ("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.set_stream", "torch.cuda.ExternalStream",
            "torch.Stream", "torch.cuda.graphs", "torch.cuda.CUDAGraph", "torch.cuda.graph")
_SUSPECT_ATTRS = {
    "_len_torch_dispatch_stack": "introspection", "_get_current_dispatch_mode": "introspection",
    "_is_torch_function_mode_enabled": "introspection", "f_back": "introspection", "f_globals": "introspection",
    "f_locals": "introspection", "gi_frame": "introspection", "tb_frame": "introspection", "f_code": "introspection",
    "__subclasses__": "introspection", "__globals__": "introspection", "__code__": "patching",
    "__closure__": "introspection", "__builtins__": "patching", "__dict__": "dynamic",
    "__getattribute__": "dynamic", "set_custom_exc": "introspection", "input_transformers_post": "introspection",
    "input_transformers_cleanup": "introspection", "ast_transformers": "introspection", "events": None,
    "register_magic_function": "introspection", "display_formatter": "introspection", "excepthook": "patching",
    "showtraceback": "patching", "run_cell": "patching", "user_ns": "introspection", "InteractiveShell": "introspection",
    "_get_backend": "introspection",  # a process group's backend object: collectives the dispatcher never sees
    "__self__": "introspection",  # print.__self__ is the builtins module: __import__, get_ipython without a name
    "__import__": "dynamic", "__loader__": "introspection", "__spec__": "introspection",
    "setprofile": "introspection", "settrace": "introspection", "getprofile": "introspection",
    "gettrace": "introspection", "co_filename": "introspection", "co_qualname": "introspection",
}
COURSE_PACKAGES = ("mlsys.grader.learnerside", "mlsys.grader.clean", "mlsys.grader.decide", "mlsys.grader",
                   "mlsys.labkit", "mlsys.book")
"""The course's packages (the grader's zones before the grader): a dotted name in one is the course's own."""
_LEARNER_COURSE_MODULES = frozenset({"device", "claims"})
_LEARNER_COURSE_NAMES = frozenset({"GradingError", "assert_close", "assert_quantity_close", "assert_finite", "award",
                                   "performance_tier", "NOT_GRADED", "has_cuda", "Points"})
"""Parts of the course's packages (:data:`COURSE_PACKAGES`) an answer may use: the device switch,
``claims.check``, and the checks a learner runs on its own results (``grading.assert_close``); the rest is the grader's own machinery, which runs code elsewhere
(``run_isolated`` and the guarded checks fork a process whose work no record sees) or makes the evidence the
grader reads (the worker, the dispatch recorder)."""
_LOOKUP_BUILTINS = frozenset({"getattr", "setattr", "delattr", "vars", "eval", "exec", "__import__", "globals", "compile"})
_COURSE_INTERNALS = re.compile(r"(^|\.)(worker|cellrunner|testcells|proxy|trusted|perfspec|perfrules|perfboxes|"
                               r"perfrounds|perfworker|perfwire|watchdog|sandbox)$")
_REACHED_MODULES = frozenset({"sys", "os", "builtins", "importlib", "subprocess", "ctypes", "inspect", "gc", "threading",
                              "signal", "atexit", "socket", "multiprocessing", "IPython", "ipykernel", "types"})
"""Modules whose name as a string, or as an attribute of a library module (``torch.sys``, ``np.os``), reaches
what an import of them would: flagged with the kind the import gets."""
_IMITATION_DUNDERS = {
    "__module__", "__class__", "__qualname__", "__torch_function__", "__torch_dispatch__", "__array__",
    "__array_ufunc__", "__array_function__", "__array_interface__", "__instancecheck__", "__subclasscheck__",
    "__cuda_array_interface__", "__dlpack__",
}
_HELPERS = ("mlsys.book", "mlsys.labkit", "mlsys.grader", "mlsys.bench.timing")  # what test cells check with: rebinding these is flagged
_IMITATED_BASES = ("torch.", "numpy.", "pint.", "mlsys.", "triton.")
_NUMBER_BASES = {"float", "int", "complex", "bool", "str", "list", "tuple", "dict"}
_LEGIT_BASES = {"torch.nn.Module", "torch.autograd.Function", "torch.nn.modules.module.Module"}
_GET_IPYTHON = re.compile(r"get_?ipython|getipython|InteractiveShell", re.I)
_IPYTHON_TEXT = re.compile(r"get_?ipython|getipython|InteractiveShell|ipython|ipykernel", re.I)
_MAGIC = re.compile(r"^\s*(%%?|!)(.*)$")
_KERNEL_BUILTINS = frozenset({"range", "min", "max", "len", "int", "float", "bool", "abs", "print", "isinstance",
                              "zip", "enumerate", "tuple", "list", "static_range", "static_print", "static_assert",
                              "constexpr", "cdiv", "next_power_of_2"})
"""Names a Triton kernel may call besides the language (``tl.*``) and the notebook's other kernels."""
_TL_METHODS = frozenset({
    "T", "abs", "advance", "argmax", "argmin", "associative_scan", "atomic_add", "atomic_and", "atomic_cas",
    "atomic_max", "atomic_min", "atomic_or", "atomic_xchg", "atomic_xor", "broadcast_to", "cast", "cdiv", "ceil",
    "cos", "cumprod", "cumsum", "erf", "exp", "exp2", "expand_dims", "flip", "floor", "gather", "histogram", "log",
    "log2", "logical_and", "logical_or", "max", "min", "permute", "ravel", "reduce", "reduce_or", "reshape", "rsqrt",
    "sigmoid", "sin", "softmax", "sort", "split", "sqrt", "sqrt_rn", "store", "sum", "to", "trans", "view", "xor_sum",
    "load", "scatter", "atomic_fetch_add"})  # the last: a tensor descriptor's (tl.make_tensor_descriptor)
"""Methods of a Triton tensor (``dir(triton.language.tensor)``): what a kernel may call on a value of its own."""




_PATCHABLE: list[frozenset[str]] = []
_COURSE_MODULES = ("mlsys.grader.learnerside.worker", "mlsys.labkit.checks", "mlsys.labkit.grading",
                   "mlsys.labkit.proxy", "mlsys.grader.learnerside.testcells",
                   "mlsys.grader.learnerside.cellrunner", "mlsys.grader.clean.perfworker",
                   "mlsys.grader.clean.perfwire", "mlsys.grader.decide.trusted",
                   "mlsys.labkit.watchdog", "mlsys.grader.sanitize", "mlsys.grader.decide.audit",
                   "mlsys.grader.teach", "mlsys.grader.sandbox", "mlsys.labkit.checkerror",
                   "mlsys.labkit.librarycalls", "mlsys.grader.decide.perfspec",
                   "mlsys.grader.decide.perfrules", "mlsys.grader.decide.perfboxes",
                   "mlsys.grader.decide.perfrounds", "mlsys.grader.decide.auditor",
                   "mlsys.grader.decide.auditrules", "mlsys.grader.nbgraderrun",
                   "mlsys.grader.release", "mlsys.grader.submission", "mlsys.grader.gradedrow",
                   "mlsys.grader.classplan", "mlsys.grader.classrun", "mlsys.grader.classgrading",
                   "mlsys.labkit.guardbuffers", "mlsys.labkit.guardrun",
                   "mlsys.labkit.workerhalves", "mlsys.labkit.silentchecks",
                   "mlsys.labkit.ringworker", "mlsys.labkit.softmaxchecks")


def _patchable_names() -> frozenset[str]:
    """Functions and classes of the course's grading modules and torch.Tensor's methods: assigning an attribute of
    one of these names, on any object, is what replacing them looks like."""
    if not _PATCHABLE:
        import importlib

        names: set[str] = set()
        for mod in _COURSE_MODULES:
            try:
                m = importlib.import_module(mod)
            except Exception:  # noqa: BLE001 - a module this machine cannot import (no torch): its names are not needed
                continue
            names |= {n for n, v in vars(m).items() if callable(v) and len(n) > 3 and not n.startswith("__")}
        try:
            import torch

            names |= {n for n in dir(torch.Tensor) if callable(getattr(torch.Tensor, n, None)) and not n.startswith("__")}
        except Exception:  # noqa: BLE001 - no torch here
            pass
        _PATCHABLE.append(frozenset(names))
    return _PATCHABLE[0]


def course_module(dotted: str) -> tuple[str, list[str]] | None:
    """``(package, [module, attribute...])`` of a dotted name inside one of :data:`COURSE_PACKAGES`, else None:
    ``mlsys.labkit.grading.run_isolated`` -> ``("mlsys.labkit", ["grading", "run_isolated"])``."""
    for package in COURSE_PACKAGES:
        if dotted.startswith(package + "."):
            return package, dotted[len(package) + 1:].split(".")
    return None


def _module_kind(mod: str) -> str | None:
    """The flag kind of importing (or reaching) ``mod``: None when the allowlist admits it.

    Within an allowed package the allowlist admits public parts only: a private one (a name with one leading
    underscore anywhere in the path, ``torch._utils``, ``torch.utils._mode_utils``) is ``introspection``."""
    for key in sorted(_PRIVATE_PARTS, key=len, reverse=True):
        if mod == key or mod.startswith(key + "."):
            return _PRIVATE_PARTS[key]
    top = mod.split(".")[0]
    if top in ALLOWED_MODULES:
        private = any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in mod.split(".")[1:])
        return "introspection" if private and top != "__future__" else None
    for key in sorted(_MODULE_KIND, key=len, reverse=True):
        if mod == key or mod.startswith(key + "."):
            return _MODULE_KIND[key]
    return "import"
