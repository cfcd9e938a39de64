"""A static audit of answer cells: constructs a solution has no reason to use, flagged for the teacher.

:func:`audit_source` parses one cell (IPython magics and shell escapes are flagged, then blanked) and
returns :class:`Flag` records; :func:`audit_notebook` runs it over every code cell that is not an
autograded test cell. Flags never change a score by themselves: ``make grade`` writes them into the
``flags`` column of grades.csv and onto the feedback page, so a person looks at the submission.

What is flagged (the ``kind`` of a flag):

* ``file``: ``open``/``Path`` reads or writes of absolute paths or paths going up (``..``), ``os.walk``,
  ``glob`` over such paths, ``shutil`` file operations, ``os.remove``/``rename``/``chmod``;
* ``process``: ``subprocess``, ``os.system``/``popen``/``exec*``/``spawn*``/``fork``/``kill``,
  ``multiprocessing``, ``threading``, ``signal``, ``atexit``, ``pty``, shell escapes (``!cmd``, ``%%bash``);
* ``native``: ``ctypes``, ``cffi``, ``mmap``;
* ``patching``: assignment to an attribute of ``torch``, ``triton``, ``numpy``, ``mlsys``, ``builtins``,
  ``time``, ``sys`` or of any name imported from them (e.g. ``torch.matmul = ...``,
  ``Tensor.copy_ = ...``), ``setattr`` on them, ``torch.library`` registrations, ``sys.modules`` edits;
* ``introspection``: ``importlib`` tricks, ``linecache``, ``gc``, ``inspect`` frame walking,
  ``sys._getframe``, ``sys.settrace``/``setprofile``, ``get_ipython`` hooks, torch dispatch or function
  modes and private ``torch._C`` calls (code that can tell whether it is being checked);
* ``network``: ``socket``, ``urllib``, ``requests``, ``http``;
* ``dynamic``: ``eval``/``exec``/``compile``/``__import__``; ``syntax``: a cell that does not parse.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from ..runtime.notebook import is_autograded

__all__ = ["Flag", "audit_source", "audit_notebook", "format_flags"]

WATCHED_MODULES = ("torch", "triton", "numpy", "mlsys", "builtins", "time", "sys", "math", "os")
_MODULE_KIND = {
    "subprocess": "process", "multiprocessing": "process", "threading": "process", "signal": "process",
    "atexit": "process", "pty": "process", "concurrent": "process", "ctypes": "native", "cffi": "native",
    "mmap": "native", "_ctypes": "native", "socket": "network", "urllib": "network", "requests": "network",
    "http": "network", "ftplib": "network", "smtplib": "network", "ssl": "network", "importlib": "introspection",
    "linecache": "introspection", "gc": "introspection", "inspect": "introspection", "shutil": "file",
    "glob": "file", "tempfile": "file", "sqlite3": "file", "pickle": "file", "dill": "file",
    "torch.library": "patching", "torch.utils._python_dispatch": "introspection", "torch.overrides": "introspection",
    "torch.profiler": "introspection", "code": "introspection", "codeop": "introspection",
}
_CALL_KIND = {
    "os.system": "process", "os.popen": "process", "os.fork": "process", "os.kill": "process", "os.killpg": "process",
    "os.setsid": "process", "os.daemon": "process", "os.posix_spawn": "process", "os._exit": "process",
    "os.remove": "file", "os.unlink": "file", "os.rename": "file", "os.replace": "file", "os.chmod": "file",
    "os.walk": "file", "os.listdir": "file", "os.scandir": "file", "os.symlink": "file", "os.link": "file",
    "os.chdir": "file", "sys._getframe": "introspection", "sys.settrace": "introspection",
    "sys.setprofile": "introspection", "sys.addaudithook": "introspection", "setattr": "patching",
    "delattr": "patching", "eval": "dynamic", "exec": "dynamic", "compile": "dynamic", "__import__": "dynamic",
    "globals": "introspection", "get_ipython": "introspection", "breakpoint": "introspection",
}
_SUSPECT_ATTRS = {
    "_len_torch_dispatch_stack": "introspection", "_get_current_dispatch_mode": "introspection",
    "_is_torch_function_mode_enabled": "introspection", "f_back": "introspection", "f_globals": "introspection",
    "f_locals": "introspection", "gi_frame": "introspection", "tb_frame": "introspection",
    "__subclasses__": "introspection", "__globals__": "introspection", "__code__": "patching",
    "set_custom_exc": "introspection", "input_transformers_post": "introspection", "register_magic_function":
    "introspection",
}


@dataclass(frozen=True)
class Flag:
    """One suspicious construct: where (``cell`` index among code cells, ``line``), what, and its kind."""

    cell: int
    line: int
    kind: str
    what: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.what} (cell {self.cell}, line {self.line})"


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if isinstance(node, ast.Call):  # e.g. get_ipython().events
        inner = _dotted(node.func)
        if inner:
            parts.append(inner + "()")
            return ".".join(reversed(parts))
    return None


def _suspect_path(node: ast.AST) -> bool:
    """A literal path that is absolute, goes up a folder, or names the home folder."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            v = sub.value
            if v.startswith(("/", "~")) or ".." in v.replace("\\", "/").split("/") or v.startswith("../"):
                return True
        if isinstance(sub, ast.Attribute) and sub.attr in ("__file__", "home", "parent", "parents", "root"):
            return True
        if isinstance(sub, ast.Name) and sub.id == "__file__":
            return True
    return False


_MAGIC = re.compile(r"^\s*(%%?|!)(.*)$")


def audit_source(source: str, cell: int = 0) -> list[Flag]:
    """Flags for one cell's source (IPython syntax allowed)."""
    flags: list[Flag] = []
    lines = source.splitlines()
    py_lines = []
    for i, line in enumerate(lines, 1):
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
        tree = ast.parse("\n".join(py_lines))
    except SyntaxError as exc:
        return flags + [Flag(cell, exc.lineno or 0, "syntax", f"does not parse: {exc.msg}")]
    aliases: dict[str, str] = {}  # local name -> module or dotted origin
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def origin(name: str | None) -> str | None:
        if not name:
            return None
        head, _, rest = name.partition(".")
        base = aliases.get(head, head)
        return f"{base}.{rest}" if rest else base

    def module_kind(mod: str) -> str | None:
        for key in sorted(_MODULE_KIND, key=len, reverse=True):
            if mod == key or mod.startswith(key + "."):
                return _MODULE_KIND[key]
        return None

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.module:
                mods += [f"{node.module}.{a.name}" for a in node.names]
            for mod in mods:
                kind = module_kind(mod)
                if kind:
                    flags.append(Flag(cell, line, kind, f"import {mod}"))
                    break
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute):
                        full = origin(_dotted(sub))
                        if full and full.split(".")[0] in WATCHED_MODULES:
                            flags.append(Flag(cell, line, "patching", f"assignment to {full}"))
                        elif full and full.startswith("__builtins__"):
                            flags.append(Flag(cell, line, "patching", f"assignment to {full}"))
                    if isinstance(sub, ast.Subscript):
                        full = origin(_dotted(sub.value))
                        if full in ("sys.modules", "__builtins__", "builtins.__dict__", "globals()"):
                            flags.append(Flag(cell, line, "patching", f"item assignment in {full}"))
        elif isinstance(node, ast.Call):
            name = origin(_dotted(node.func))
            if name is None:
                continue
            short = name.rsplit(".", 1)[-1]
            kind = _CALL_KIND.get(name)
            if name.startswith("builtins.") and short in _CALL_KIND:
                kind = _CALL_KIND[short]
            if name.startswith(("os.exec", "os.spawn")):
                kind = "process"
            if name.startswith("torch.library."):
                kind = "patching"
            elif name.startswith(("torch.utils._python_dispatch.", "torch.overrides.", "torch._C._")):
                kind = kind or "introspection"
            if kind:
                if short in ("setattr", "delattr") and node.args:
                    target = origin(_dotted(node.args[0])) or ""
                    if target.split(".")[0] not in WATCHED_MODULES and target not in ("__builtins__",):
                        continue
                flags.append(Flag(cell, line, kind, f"{name}()"))
            elif short in ("open", "read_text", "read_bytes", "write_text", "write_bytes", "Path", "glob", "rglob",
                           "iterdir", "listdir", "load") and _suspect_path(node):
                flags.append(Flag(cell, line, "file", f"{name}() outside the working folder"))
            elif name.startswith("sys.modules") and short in ("pop", "update", "clear", "setdefault", "__setitem__"):
                flags.append(Flag(cell, line, "patching", f"{name}()"))
        elif isinstance(node, ast.Attribute):
            kind = _SUSPECT_ATTRS.get(node.attr)
            full = origin(_dotted(node)) or ""
            if kind:
                flags.append(Flag(cell, line, kind, f"uses {full or node.attr}"))
            elif full.startswith("torch._C.") and not full.startswith("torch._C._nn"):
                flags.append(Flag(cell, line, "introspection", f"private {full}"))
    return _dedupe(flags)


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


def audit_notebook(nb: dict[str, Any], given: dict[str, Any] | None = None) -> list[Flag]:
    """Flags for every code cell of ``nb`` except autograded test cells (which the grader restores).

    ``given`` (the released notebook) lists cells the course wrote: a cell left exactly as released
    (e.g. the set-up cell that pip-installs in Colab) is not audited.
    """
    released = {_text(c) for c in (given or {}).get("cells", []) if c.get("cell_type") == "code"}
    flags: list[Flag] = []
    code_index = -1
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        code_index += 1
        if is_autograded(cell.get("metadata", {}).get("nbgrader")):
            continue
        if _text(cell) in released:
            continue
        flags += audit_source(_text(cell), code_index)
    return flags


def format_flags(flags: list[Flag], limit: int = 8) -> str:
    """One line for the CSV: ``kind: what (cell c, line l); ...``, at most ``limit`` items then a count."""
    items = [str(f) for f in flags[:limit]]
    if len(flags) > limit:
        items.append(f"... {len(flags) - limit} more")
    return "; ".join(items)
