"""A static audit of answer cells, written as an allowlist: what a solution needs passes, the rest is flagged.

:func:`audit_source` parses one cell (IPython magics and shell escapes are flagged, then blanked) and
an :class:`Auditor` (an ``ast.NodeVisitor``) walks it, returning :class:`Flag` records;
:func:`audit_notebook` runs it over every code cell that is not an autograded test cell and differs
from the released notebook. Flags never change a score by themselves: ``make grade`` writes them into
the ``flags`` column of grades.csv and onto the feedback page, so a person looks at the submission.
The audit reads source; it is the teacher's early warning, not the defence (test cells run in the
grader process, performance in the trusted process).

What passes (:data:`ALLOWED_MODULES`): imports of the lab's own tools, ``torch``, ``triton``,
``numpy``, ``math``, the course package ``mlsys`` and a few pure helpers of the standard library, and
plain code over them. Everything else is flagged, by kind:

* ``import``: any other module (``os``, ``IPython``, ``pickle``...; known dangerous ones get the kind
  below instead), and private or meta parts of allowed ones (``torch.library``, ``torch._C``, any name
  with a leading underscore such as ``torch.utils._mode_utils``, ``torch.overrides``, ``mlsys.grader``
  internals), imported or reached as attributes; parts of allowed packages that do work where no record of
  a call looks get the kind of what they do (``torch.multiprocessing`` and ``DataLoader``: ``process``;
  ``torch.utils.cpp_extension``, ``torch.ops.load_library``, ``numpy.ctypeslib``: ``native``;
  ``torch.jit.fork``: ``concurrency``; ``torch.hub``: ``network``);
* ``dynamic``: ``eval``/``exec``/``compile``/``__import__``, and dynamic attribute access to a
  module or library object: ``vars(m)``, ``getattr(m, ...)``, ``m.__dict__``, ``__getattribute__``;
* ``introspection``: ``get_ipython`` in any spelling (the bare name, an attribute, a string), frame
  and tracing hooks, ``globals()``, dispatch or function modes, private ``torch._C`` calls;
* ``patching``: assignment to an attribute of a library module or a name imported from one
  (``torch.matmul = ...``, ``Tensor.copy_ = ...``), ``setattr``/``delattr``, ``sys.modules`` edits,
  and rebinding a grading helper the course's own cells import (``grading = ...``, ``def assert_close``);
* ``imitation``: a class that subclasses a library type (``torch.Tensor``, ``numpy.ndarray``, a
  number type, a course class) or claims another identity (``__module__``, ``__class__``,
  ``__torch_function__``, ``__torch_dispatch__``, ``__array__``, ``__instancecheck__``...);
* ``concurrency``: threads, thread pools, ``asyncio`` and CUDA streams created in an answer cell
  (work left running when a function returns, or outside the timed stream);
* ``process``, ``native``, ``network``, ``file``: subprocesses and signals, ``ctypes``, sockets,
  reads and writes outside the working folder; ``syntax``: a cell that does not parse;
* ``kernel``: a ``@triton.jit`` kernel that calls a library (NumPy, torch, math): Python that runs only
  under the interpreter, computing outside the kernel where no record of the call looks.
"""

from __future__ import annotations

import ast
from typing import Any

from mlsys.grader.decide.auditor import Auditor, Flag, _dotted
from mlsys.grader.decide.auditrules import _MAGIC, ALLOWED_MODULES
from mlsys.runtime import pysource
from mlsys.runtime.notebook import is_autograded

__all__ = ["Flag", "Auditor", "ALLOWED_MODULES", "audit_source", "audit_notebook", "course_names", "format_flags"]



def course_names(nb: dict[str, Any] | None) -> dict[str, str]:
    """Names the course's code cells of a released notebook bind by import, with what each names."""
    names: dict[str, str] = {}
    for cell in (nb or {}).get("cells", []):
        meta = _nbgrader(cell)
        if cell.get("cell_type") != "code" or meta.get("solution") or meta.get("grade"):
            continue
        if (tree := _parsed(_text(cell))) is None:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _parsed(src: str) -> ast.Module | None:
    """A cell's source parsed with its IPython magics blanked, or ``None`` if it is not Python."""
    try:
        return pysource.parse("\n".join("" if _MAGIC.match(ln) else ln for ln in src.splitlines()))
    except SyntaxError:
        return None


def jit_names(sources: list[str]) -> frozenset[str]:
    """The names of the ``@triton.jit`` functions (``@jit``, ``@triton.jit(...)``) that ``sources`` define."""
    names = set()
    for src in sources:
        if (tree := _parsed(src)) is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    (_dotted(d.func if isinstance(d, ast.Call) else d) or "").split(".")[-1] in ("jit", "autotune",
                                                                                              "heuristics")
                    for d in node.decorator_list):
                names.add(node.name)
    return frozenset(names)


def audit_source(source: str, cell: int = 0, course: dict[str, str] | None = None,
                 jit: frozenset[str] | None = None, imported: dict[str, set[str]] | None = None) -> list[Flag]:
    """Flags for one cell's source (IPython syntax allowed); ``course``: names the course's cells import
    (:func:`course_names`), whose rebinding is flagged; ``jit``: the notebook's Triton kernels (default: this
    cell's)."""
    flags: list[Flag] = []
    py_lines = []
    for i, line in enumerate(source.splitlines(), 1):
        m = _MAGIC.match(line)
        if m and not line.lstrip().startswith("%matplotlib"):
            word = m.group(2).split()[0] if m.group(2).split() else ""
            kind = "process" if m.group(1) == "!" or word in ("bash", "sh", "system", "sx", "script") else "dynamic"
            if not (m.group(1) == "%" and word in ("time", "timeit", "load_ext", "autoreload")):
                flags.append(Flag(cell, i, kind, f"IPython {m.group(1)}{word}"))
            py_lines.append("")
        else:
            py_lines.append(line)
    try:
        tree = pysource.parse("\n".join(py_lines))
    except SyntaxError as exc:
        return flags + [Flag(cell, exc.lineno or 0, "syntax", f"does not parse: {exc.msg}")]
    kernels = jit if jit is not None else jit_names([source])
    return _dedupe(flags + Auditor(cell, course, kernels, imported).run(tree))


def _dedupe(flags: list[Flag]) -> list[Flag]:
    seen, out = set(), []
    for f in flags:
        key = (f.cell, f.line, f.kind, f.what)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _text(cell: dict[str, Any]) -> str:
    src = cell.get("source", "")
    return ("".join(src) if isinstance(src, list) else str(src)).strip()


def _nbgrader(cell: dict[str, Any]) -> dict[str, Any]:
    """A cell's nbgrader metadata, or {} where a submission holds something else there."""
    meta = cell.get("metadata")
    nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
    return nbg if isinstance(nbg, dict) else {}


def audit_notebook(nb: dict[str, Any], given: dict[str, Any] | None = None) -> list[Flag]:
    """Flags for every code cell of ``nb`` except autograded test cells (which the grader restores).

    ``given`` (the released notebook) lists cells the course wrote: a cell left exactly as released
    (e.g. the set-up cell that pip-installs in Colab) is not audited, and a cell is a test cell only if the
    release has a test cell of its grade id and it is the first of that id (what :func:`mlsys.grader.teach.
    _normalise_cells` grades): a cell that only *says* it is a test (an invented or repeated grade id) runs as
    an ordinary cell and is audited like one.
    """
    released = {_text(c) for c in (given or {}).get("cells", []) if c.get("cell_type") == "code"}
    tests = {str(_nbgrader(c).get("grade_id")) for c in (given or {}).get("cells", []) if is_autograded(_nbgrader(c))}
    seen: set[str] = set()
    names = course_names(given)
    kernels = jit_names([_text(c) for c in nb.get("cells", []) if c.get("cell_type") == "code"])
    imports = notebook_imports([_text(c) for c in nb.get("cells", []) if c.get("cell_type") == "code"])
    flags: list[Flag] = []
    code_index = -1
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        code_index += 1
        meta = _nbgrader(cell)
        gid = str(meta.get("grade_id"))
        first = gid not in seen
        seen.add(gid)
        if is_autograded(meta) and (given is None or (gid in tests and first)):
            continue
        if _text(cell) in released:
            continue
        flags += audit_source(_text(cell), code_index, names, kernels, imports)
    return flags


def notebook_imports(sources: list[str]) -> dict[str, set[str]]:
    """Every name the cells bind by import, with what it names (a notebook's cells share one namespace)."""
    out: dict[str, set[str]] = {}
    for src in sources:
        if (tree := _parsed(src)) is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    out.setdefault(a.asname or a.name.split(".")[0], set()).add(a.name if a.asname else a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    out.setdefault(a.asname or a.name, set()).add(f"{node.module}.{a.name}")
    return out


def format_flags(flags: list[Flag], limit: int = 8) -> str:
    """One line for the CSV: ``kind: what (cell c, line l); ...``, at most ``limit`` items then a count."""
    items = [str(f) for f in flags[:limit]]
    if len(flags) > limit:
        items.append(f"... {len(flags) - limit} more")
    return "; ".join(items)
