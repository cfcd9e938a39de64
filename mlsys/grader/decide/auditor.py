"""The audit's visitor: one answer cell's syntax tree walked against the tables of
:mod:`mlsys.grader.decide.auditrules`, each suspicious construct a :class:`Flag` (see :mod:`mlsys.grader.decide.audit`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from mlsys.grader.decide.auditrules import (
    _CALL_KIND,
    _COURSE_INTERNALS,
    _GET_IPYTHON,
    _HELPERS,
    _IMITATED_BASES,
    _IMITATION_DUNDERS,
    _IPYTHON_TEXT,
    _KERNEL_BUILTINS,
    _LEARNER_COURSE_MODULES,
    _LEARNER_COURSE_NAMES,
    _LEGIT_BASES,
    _LOOKUP_BUILTINS,
    _MODULE_KIND,
    _NUMBER_BASES,
    _REACHED_MODULES,
    _STREAMS,
    _SUSPECT_ATTRS,
    _TL_METHODS,
    ALLOWED_MODULES,
    _module_kind,
    _patchable_names,
    course_module,
)


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
            if v.startswith(("/", "~")) or ".." in v.replace("\\", "/").split("/"):
                return True
        if isinstance(sub, ast.Attribute) and sub.attr in ("__file__", "home", "parent", "parents", "root"):
            return True
        if isinstance(sub, ast.Name) and sub.id == "__file__":
            return True
    return False


class Auditor(ast.NodeVisitor):
    """Walks one cell's syntax tree and collects :class:`Flag` records (see the module doc)."""

    def __init__(self, cell: int = 0, course_names: dict[str, str] | None = None,
                 jit_names: frozenset[str] = frozenset(), imported: dict[str, set[str]] | None = None) -> None:
        self.cell = cell
        self.imported = imported or {}  # names any cell of the notebook imports -> what they name
        self.jit_names = jit_names  # the notebook's @triton.jit functions: what a kernel may call
        self.course_names = course_names or {}  # names the course's own cells import -> what they name
        self.flags: list[Flag] = []
        self.aliases: dict[str, str] = {}  # local name -> dotted origin (a module or an object in one)
        self.containers: dict[str, dict[str, str]] = {}  # a dict/list/tuple of library objects, by key
        self._called: set[int] = set()  # the func nodes of calls (set by run)

    # -- helpers
    def flag(self, node: ast.AST, kind: str, what: str) -> None:
        self.flags.append(Flag(self.cell, getattr(node, "lineno", 0), kind, what))

    def origin(self, name: str | None) -> str | None:
        if not name:
            return None
        head, _, rest = name.partition(".")
        base = self.aliases.get(head, head)
        return f"{base}.{rest}" if rest else base

    def is_library(self, node: ast.AST) -> bool:
        """``node`` names a module or an object imported from one (``torch``, ``F``, ``np.linalg``...)."""
        full = self.origin(_dotted(node)) or ""
        head = full.split(".")[0]
        return (full.split(".")[0] in self.aliases.values() or head in ALLOWED_MODULES or head in _MODULE_KIND
                or (isinstance(node, ast.Name) and node.id in self.aliases))

    def run(self, tree: ast.AST) -> list[Flag]:
        self._called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):  # aliases first: a later import still names what an earlier line used
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        self.bind_assignments(tree)
        self.visit(tree)
        return self.flags

    def resolve(self, node: ast.AST) -> str | None:
        """What ``node`` names when it is a library, a part of one, or a look-up builtin: through imports and the
        assignments :meth:`bind_assignments` follows (``_t = torch``; ``_u = torch.utils``; ``g = getattr``;
        ``f = getattr(torch, "mat" + "mul")``; ``b = __builtins__["getattr"]``), else None."""
        if isinstance(node, ast.Name) and node.id in _LOOKUP_BUILTINS and node.id not in self.aliases:
            return f"builtins.{node.id}"
        if isinstance(node, ast.Call) and _dotted(node.func) is not None and len(node.args) >= 2:
            fn = self.origin(_dotted(node.func))
            if fn in ("getattr", "builtins.getattr"):
                base, attr = self.resolve(node.args[0]), _folded(node.args[1])
                return f"{base}.{attr}" if base and attr else None
        if isinstance(node, ast.Subscript):
            base, key = self.origin(_dotted(node.value)), _folded(node.slice)
            if base in ("__builtins__", "builtins.__dict__", "__builtins__.__dict__", "vars()") and key:
                return f"builtins.{key}"
            held = self.containers.get(node.value.id, {}) if isinstance(node.value, ast.Name) else {}
            return (held.get(key) if key else None) or next(iter(held.values()), None)
        full = self.origin(_dotted(node))
        if not full:
            return None
        head = full.split(".")[0]
        if head in ALLOWED_MODULES or head in _MODULE_KIND or head == "builtins" or full.startswith("__builtins__"):
            return full
        return None

    def bind_assignments(self, tree: ast.AST) -> None:
        """Follow plain assignments of a library (or a part of one) to a name, and containers of them
        (``OPS = {"softmax": torch.softmax}``), so that the visitors judge ``_t.matmul`` as ``torch.matmul`` and
        ``OPS["softmax"](x)`` as ``torch.softmax(x)``. Repeated until nothing new binds (a chain of aliases)."""
        for _ in range(5):
            before = (dict(self.aliases), {k: dict(v) for k, v in self.containers.items()})
            for node in ast.walk(tree):
                if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for t in targets:
                        if isinstance(t, ast.Name):
                            self._bind(t.id, node.value)
            if (self.aliases, self.containers) == before:
                break

    def _bind(self, name: str, value: ast.AST) -> None:
        if isinstance(value, (ast.Dict, ast.List, ast.Tuple, ast.Set)):
            keys = value.keys if isinstance(value, ast.Dict) else [ast.Constant(str(i)) for i in range(len(value.elts))]
            values = value.values if isinstance(value, ast.Dict) else value.elts
            held = {(_folded(k) if k is not None else None) or str(i): r
                    for i, (k, v) in enumerate(zip(keys, values, strict=False)) if (r := self.resolve(v))}
            if held:
                self.containers[name] = held
            return
        full = self.resolve(value)
        if full and self.aliases.get(name) != full and name not in ("self", "cls"):
            self.aliases[name] = full

    def rebinds(self, node: ast.AST, name: str, origin: str | None = None) -> None:
        """Flag a top-level rebinding of a name the course imported (``grading = ...``), unless it names the same thing."""
        was = self.course_names.get(name)
        if was and (was.startswith(_HELPERS) or name.startswith("assert_")) and origin != was:
            self.flag(node, "patching", f"rebinds the course's name {name!r} ({self.course_names[name]})")

    def visit_Module(self, node: ast.Module) -> None:
        for stmt in node.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for t in targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, ast.Name):
                            self.rebinds(stmt, sub.id)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.rebinds(stmt, stmt.name)
            elif isinstance(stmt, ast.Import):
                for a in stmt.names:
                    self.rebinds(stmt, a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0])
            elif isinstance(stmt, ast.ImportFrom) and stmt.module:
                for a in stmt.names:
                    self.rebinds(stmt, a.asname or a.name, f"{stmt.module}.{a.name}")
        self.generic_visit(node)

    # -- visitors
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            kind = _module_kind(a.name)
            if kind:
                self.flag(node, kind, f"import {a.name}")
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        if node.level:
            self.flag(node, "import", f"relative import from {'.' * node.level}{mod}")
        kind = _module_kind(mod) if mod else None
        if kind:
            self.flag(node, kind, f"import {mod}")
        for a in node.names:
            sub = _module_kind(f"{mod}.{a.name}") if not kind else None
            if sub:
                self.flag(node, sub, f"import {mod}.{a.name}")
            elif not kind and self.grader_module(f"{mod}.{a.name}"):
                self.flag(node, "introspection", f"imports the grader's {self.grader_module(f'{mod}.{a.name}')}")
            if _GET_IPYTHON.search(a.name):
                self.flag(node, "introspection", f"get_ipython (as {mod}.{a.name})")
        self.generic_visit(node)

    def _assigned(self, node: ast.AST, targets: list[ast.AST]) -> None:
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                    full = self.origin(_dotted(sub))
                    head = (full or "").split(".")[0]
                    if full and (head in ALLOWED_MODULES or head in _MODULE_KIND or full.startswith("__builtins__")):
                        self.flag(node, "patching", f"assignment to {full}")
                    elif head not in ("self", "cls") and sub.attr in _patchable_names():
                        # a course or torch function replaced on an object reached some other way (a module from
                        # sys.modules or print.__self__, type(tensor)): the name says what it replaces
                        self.flag(node, "patching", f"assignment to {full or '...'} (replaces the course's or "
                                                    f"torch's {sub.attr})")
                elif isinstance(sub, ast.Subscript):
                    full = self.origin(_dotted(sub.value))
                    if full in ("sys.modules", "__builtins__", "builtins.__dict__", "globals()") or (
                            full and full.endswith(".__dict__")):
                        self.flag(node, "patching", f"item assignment in {full}")

    def visit_Assign(self, node: ast.Assign) -> None:
        self._assigned(node, node.targets)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._assigned(node, [node.target])
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._assigned(node, [node.target])
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._assigned(node, node.targets)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name.startswith("__") and node.name.endswith("__") and node.col_offset == 0:
            # a module-level __import__ shadows the builtin for every cell run in this namespace, the grader's
            # request to the kernel included
            self.flag(node, "patching", f"defines {node.name} in the notebook's namespace")
        if any((self.origin(_dotted(d.func if isinstance(d, ast.Call) else d)) or "").startswith("triton.jit")
               for d in node.decorator_list):
            self.kernel_body(node)
        self.generic_visit(node)

    def kernel_body(self, node: ast.FunctionDef) -> None:
        """A ``@triton.jit`` kernel calls Triton's language, the notebook's other kernels and a few builtins only:
        anything else (NumPy, torch, math, a plain function of the notebook, the interpreter's ``.handle``) runs
        only under the interpreter, where it computes outside the kernel unrecorded. (Its decorators run on the
        host: not read here.)"""
        local = {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
        local |= {n.id for stmt in node.body for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for sub in (n for stmt in node.body for n in ast.walk(stmt)):
            if isinstance(sub, ast.Attribute) and sub.attr == "handle":
                self.flag(sub, "kernel", f"the Triton kernel {node.name} uses .handle (the interpreter's data behind "
                                         "a Triton tensor)")
            if isinstance(sub, ast.Call):
                why = self.kernel_call(sub, local)
                if why:
                    self.flag(sub, "kernel", f"the Triton kernel {node.name} calls {why} (Python that runs only "
                                             "under the interpreter, outside the kernel's record)")

    def kernel_call(self, call: ast.Call, local: set[str]) -> str | None:
        """Why a call in a kernel's body is not Triton (None where it is): the language (``tl.*`` or any name that
        resolves into ``triton``), the notebook's kernels, a few builtins, or a Triton tensor's method on a value
        of the kernel's own. Anything else (a library, a plain function, a method of an object from outside,
        a call through a subscript) runs only under the interpreter."""
        func = call.func
        if isinstance(func, ast.Subscript):
            return f"{self.resolve(func) or _dotted(func.value) or 'a value'}[...]()"
        full = self.resolve(func) or self.origin(_dotted(func)) or ""
        head, _, rest = full.partition(".")
        elsewhere = self.imported.get(head, set()) | ({self.course_names[head]} if head in self.course_names else set())
        if head not in self.aliases and elsewhere:  # a name another cell imported (tl): every binding must be Triton's
            if all(o.split(".")[0] == "triton" for o in elsewhere):
                return None
            full = sorted(elsewhere)[0] + (f".{rest}" if rest else "")
        if full.split(".")[0] == "triton":
            return None
        if isinstance(func, ast.Name):
            ok = func.id in self.jit_names or (func.id in _KERNEL_BUILTINS and func.id not in self.aliases)
            return None if ok else f"{full or func.id}()"
        if isinstance(func, ast.Attribute) and func.attr in _TL_METHODS:
            root = func.value
            while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
                root = root.func if isinstance(root, ast.Call) else root.value
            if not isinstance(root, ast.Name) or root.id in local:
                return None  # a method of a value the kernel made: acc.to(...), tl.load(p).sum()
        return f"{full or _dotted(func) or 'an expression'}()"

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            full = self.origin(_dotted(base)) or ""
            if full in _LEGIT_BASES:
                continue
            if full.startswith(_IMITATED_BASES) or full in _NUMBER_BASES:
                self.flag(node, "imitation", f"class {node.name} subclasses {full}")
        for kw in node.keywords:
            if kw.arg == "metaclass":
                self.flag(node, "imitation", f"class {node.name} has a metaclass")
        for stmt in node.body:
            names = []
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [stmt.name]
            for n in names:
                if n in _IMITATION_DUNDERS:
                    self.flag(stmt, "imitation", f"class {node.name} defines {n}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = self.origin(_dotted(node.func))
        if name is not None:
            short = name.rsplit(".", 1)[-1]
            kind = _CALL_KIND.get(name) or (_CALL_KIND.get(short) if name.startswith("builtins.") else None)
            if name.startswith(("os.exec", "os.spawn")):
                kind = "process"
            if name.startswith("torch.library."):
                kind = "patching"
            elif name.startswith(("torch.utils._python_dispatch.", "torch.overrides.", "torch._C._")):
                kind = kind or "introspection"
            if name.startswith(_STREAMS):
                self.flag(node, "concurrency", f"{name}() (a CUDA stream)")
            elif name.startswith(("threading.", "concurrent.", "_thread.", "asyncio.")) or name in (
                    "multiprocessing.Process", "multiprocessing.Pool"):
                self.flag(node, "concurrency", f"{name}() (a thread or task)")
            self.lookup(node, name, short)
            if kind:
                if short in ("setattr", "delattr") and node.args and not self.is_library(node.args[0]):
                    # on an object of the learner's own: flagged only where the name replaces a course function or a
                    # tensor method (setattr(type(x), "any", ...)), or is not written out
                    attr = node.args[1] if len(node.args) > 1 else None
                    if isinstance(attr, ast.Constant) and str(attr.value) not in _patchable_names():
                        kind = None
                if kind:
                    self.flag(node, kind, f"{name}()")
            elif short in ("open", "read_text", "read_bytes", "write_text", "write_bytes", "Path", "glob", "rglob",
                           "iterdir", "listdir", "load") and _suspect_path(node):
                self.flag(node, "file", f"{name}() outside the working folder")
            elif name.startswith("sys.modules") and short in ("pop", "update", "clear", "setdefault", "__setitem__"):
                self.flag(node, "patching", f"{name}()")
            if name.endswith((".events.register", ".events.unregister")):
                self.flag(node, "introspection", f"{name}() (an IPython event hook)")
        self.generic_visit(node)

    def lookup(self, node: ast.Call, name: str, short: str) -> None:
        """``vars(x)``, or ``getattr``/``hasattr`` on a library or by a name not written out, under any alias."""
        if short in ("vars", "getattr", "hasattr") and name in (short, f"builtins.{short}") and node.args:
            target = node.args[0]
            if short == "vars" or self.is_library(target) or (
                    short == "getattr" and len(node.args) > 1 and not isinstance(node.args[1], ast.Constant)):
                self.flag(node, "dynamic", f"{short}({_dotted(target) or '...'}, ...) on a module or object")

    def grader_module(self, dotted: str | None) -> str | None:
        """The course's grading module that ``dotted`` reaches (through an import of this cell or of the course's
        cells: ``checks.run_isolated`` where a course cell imported ``checks``), if it is not a learner's tool."""
        if not dotted:
            return None
        head, _, rest = dotted.partition(".")
        base = self.aliases.get(head) or self.course_names.get(head) or head
        full = f"{base}.{rest}" if rest else base
        found = course_module(full)
        if found is None or found[1][0] in _LEARNER_COURSE_MODULES:
            return None
        package, parts = found
        if parts[0] in ("grading", "checks") and (len(parts) == 1 or parts[1] in _LEARNER_COURSE_NAMES):
            return None  # the module itself, and the checks a learner may run on its own results
        return ".".join([package, *parts[:2]])

    def visit_Attribute(self, node: ast.Attribute) -> None:
        full = self.origin(_dotted(node)) or ""
        grader = self.grader_module(_dotted(node)) if isinstance(node.ctx, ast.Load) else None
        if grader and (isinstance(node.value, ast.Name) or self.grader_module(_dotted(node.value)) is None):  # once a chain
            self.flag(node, "introspection", f"uses the grader's module {grader} ({_dotted(node)})")
        kind = _SUSPECT_ATTRS.get(node.attr)
        if _GET_IPYTHON.search(node.attr):
            self.flag(node, "introspection", f"get_ipython ({full or node.attr})")
        elif kind and (node.attr != "__dict__" or not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            self.flag(node, kind, f"uses {full or node.attr}")
        elif full.startswith("torch._C.") and not full.startswith("torch._C._nn"):
            self.flag(node, "introspection", f"private {full}")
        elif node.attr in _REACHED_MODULES and self.is_library(node.value):
            self.flag(node, _module_kind(node.attr) or "introspection", f"reaches {node.attr} through {full}")
        elif node.attr == "events" and "ipython" in full.lower():
            self.flag(node, "introspection", f"uses {full}")
        elif self.reaches_part(node, full):
            self.flag(node, _module_kind(full) or "introspection", f"uses {full}")
        self.generic_visit(node)

    def reaches_part(self, node: ast.Attribute, full: str) -> bool:
        """``full`` is a library path the allowlist does not admit (``torch.multiprocessing.Pool``,
        ``np.ctypeslib``, ``torch._utils``), and the chain's outer part is where it starts (flagged once a chain)."""
        if not full or not self.is_library(node) or not _module_kind(full):
            return False
        if full.split(".")[0] not in ALLOWED_MODULES:
            return False  # an import of a module outside the allowlist is flagged where it is imported
        inner = self.origin(_dotted(node.value)) or ""
        return not (inner and _module_kind(inner))

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and node.id in _LOOKUP_BUILTINS and id(node) not in self._called:
            self.flag(node, "dynamic", f"{node.id} passed as a value (a look-up by name: reduce(getattr, ...))")
        if isinstance(node.ctx, ast.Store) and node.id in ("__name__", "__file__", "__package__", "__module__"):
            self.flag(node, "imitation", f"rebinds {node.id} (code that claims to come from elsewhere)")
        elif isinstance(node.ctx, ast.Store) and node.id in _LOOKUP_BUILTINS | {"__import__", "__build_class__"}:
            self.flag(node, "patching", f"rebinds {node.id} in the notebook's namespace")
        if _GET_IPYTHON.search(node.id) or node.id in ("__builtins__", "__loader__", "__spec__"):
            self.flag(node, "introspection", f"get_ipython ({node.id})" if _GET_IPYTHON.search(node.id) else node.id)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and len(node.value) < 200 and _IPYTHON_TEXT.search(node.value):
            self.flag(node, "introspection", f"get_ipython (in the string {node.value[:40]!r})")
        elif isinstance(node.value, str) and (node.value in _REACHED_MODULES or _COURSE_INTERNALS.search(node.value) or (
                course_module(node.value) and _module_kind(node.value))):
            self.flag(node, "introspection" if _COURSE_INTERNALS.search(node.value) else (_module_kind(node.value) or "introspection"), f"names the module {node.value!r} in a string")

    def visit_BinOp(self, node: ast.BinOp) -> None:
        text = _folded(node)  # 'get_' + 'ipython': the pieces of a name spelled apart
        if text is not None and _IPYTHON_TEXT.search(text):
            self.flag(node, "introspection", f"get_ipython (in the string {text[:40]!r})")
        self.generic_visit(node)


def _folded(node: ast.AST) -> str | None:
    """A string built from constants with ``+`` (and f-strings of constants), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _folded(node.left), _folded(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        parts = [_folded(v) for v in node.values]
        return "".join(parts) if all(p is not None for p in parts) else None
    return None
