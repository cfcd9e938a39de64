"""The rooms and their import rules, checked on the source (docs/ARCHITECTURE.md explains them).

The order is models < runtime < bench < labkit < {book, grader}: a room imports only the rooms before it
(:data:`MAY_IMPORT`); the book's page helpers and the teacher's grader are siblings that never import each other.

* ``mlsys/*.py`` (the models; ``cli.py``, ``__main__.py`` and the package's ``__init__.py`` are the front door) import nothing from
  ``mlsys.runtime``, ``mlsys.bench`` or the course's rooms (``mlsys.labkit``, ``mlsys.book``, ``mlsys.grader``);
* ``mlsys.runtime`` imports neither ``mlsys.bench`` nor the course's rooms;
* ``mlsys.bench`` imports none of the course's rooms, with no exceptions;
* ``mlsys.labkit`` (what a learner's notebook imports) imports neither ``mlsys.book`` nor ``mlsys.grader``;
  ``mlsys.book`` imports no ``mlsys.grader`` module, nor ``mlsys.grader`` any ``mlsys.book`` module;
* the grader's trust zones (:data:`ZONES`, folders of ``mlsys/grader``): what decides (``decide``) and what
  measures clean (``clean``) load nothing of the learner's side (``learnerside``), directly or through any
  chain of imports; the learner's side imports nothing of what decides, directly or through a chain;
* no two modules of ``mlsys`` import each other, directly or round a longer loop (imports inside
  functions count);
* nothing outside ``mlsys/bench`` times GPU code: no ``torch.cuda.Event``, ``perf_counter`` or
  ``do_bench`` in the other Python modules, the scripts, or the code cells of chapters and labs;
* ``import mlsys`` does not import torch.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "mlsys"
FRONT_DOOR = {"cli.py", "__main__.py", "__init__.py"}  # the package itself: lazy submodules through mlsys.runtime.lazy
TIMERS = {"perf_counter", "perf_counter_ns", "Event", "do_bench", "elapsed_time"}

ROOMS = ("models", "runtime", "bench", "labkit", "book", "grader")
COURSE_ROOMS = ("labkit", "book", "grader")  # the course's three rooms: the learner's, the book's, the teacher's
MAY_IMPORT: dict[str, set[str]] = {
    "models": {"models"},
    "runtime": {"models", "runtime"},
    "bench": {"models", "runtime", "bench"},
    "labkit": {"models", "runtime", "bench", "labkit"},
    "book": {"models", "runtime", "bench", "labkit", "book"},
    "grader": {"models", "runtime", "bench", "labkit", "grader"},
}
"""Which rooms a room's modules may import (its own included): one direction, never back."""
ZONES = ("learnerside", "clean", "decide")  # the grader's trust zones, each a folder of mlsys/grader
ZONES_NEVER_REACH: dict[str, set[str]] = {
    "decide": {"learnerside"},  # what decides loads nothing a learner's process runs next to learner code
    "clean": {"learnerside"},  # nor does what measures clean
    "learnerside": {"decide"},  # and the learner's side holds none of what decides
}
"""Zone -> the zones it may not reach through any chain of imports (the grader's top level included)."""
# Exceptions to the room order, each with its reason. It is empty and must stay so: a module two rooms
# need belongs in the earlier room (mlsys.runtime holds what bench and course share).
BENCH_MAY_IMPORT: dict[str, str] = {}
TIMER_ALLOWED = {
    "mlsys/runtime/notebook.py": "records how long each notebook cell took (a report, not a GPU measurement)",
    "mlsys/grader/decide/trusted.py": "the verdict process: its own clock times each round of a worker from outside, "
                               "where no answer cell runs (a submission cannot swap it)",
    "mlsys/grader/decide/perfrounds.py": "the verdict process's state (its _Verdict, moved out of trusted.py): the same "
                                  "outside clock for each round of a worker, where no answer cell runs",
    "mlsys/grader/clean/perfworker.py": "the clean baseline worker times the grader's own work in a round with CUDA events, "
                                  "so that it can be subtracted from the verdict's round times",
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved), at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names.add(mod)
            names.update(f"{mod}.{a.name}" for a in node.names)  # from . import bench
    return names


def _in(name: str, room: str) -> bool:
    return name == room or name.startswith(room + ".")


MODELS = sorted(p for p in PKG.glob("*.py") if p.name not in FRONT_DOOR)
RUNTIME = sorted((PKG / "runtime").rglob("*.py"))
BENCH = sorted((PKG / "bench").rglob("*.py"))


def room(module: str) -> str | None:
    """The room of an ``mlsys`` module name (``None`` for the front door and the package itself)."""
    parts = module.split(".")
    if parts[0] != "mlsys" or len(parts) < 2:
        return None
    if parts[1] in ROOMS[1:]:
        return parts[1]
    return None if parts[1] in {p.removesuffix(".py") for p in FRONT_DOOR} else "models"


def zone(module: str) -> str | None:
    """The grader's trust zone of an ``mlsys`` module name (``None`` outside the zones' folders)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["mlsys", "grader"] and len(parts) > 2 and parts[2] in ZONES else None


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_models_import_no_other_room(path):
    bad = sorted(n for n in imported_modules(path) if any(_in(n, f"mlsys.{r}") for r in ROOMS[1:]))
    assert not bad, f"{path.relative_to(REPO)} is a model module but imports {bad}"


@pytest.mark.parametrize("path", RUNTIME, ids=lambda p: str(p.relative_to(PKG)))
def test_runtime_imports_neither_bench_nor_course(path):
    bad = sorted(n for n in imported_modules(path) if any(_in(n, f"mlsys.{r}") for r in ("bench", *COURSE_ROOMS)))
    assert not bad, f"{path.relative_to(REPO)} is in the runtime room but imports {bad}"


def test_bench_may_import_nothing_from_course():
    assert BENCH_MAY_IMPORT == {}, "bench imports nothing from course; move what both need into mlsys.runtime"


@pytest.mark.parametrize("path", BENCH, ids=lambda p: str(p.relative_to(PKG)))
def test_bench_imports_nothing_from_course(path):
    bad = sorted(n for n in imported_modules(path) if any(_in(n, f"mlsys.{r}") for r in COURSE_ROOMS))
    assert not bad, f"{path.relative_to(REPO)} imports {bad} from the course's rooms (shared code belongs in mlsys.runtime)"


def import_graph() -> dict[str, set[str]]:
    """Module -> the ``mlsys`` modules it imports (at any depth; a parent package, always loaded first, is no edge)."""
    files = {_module_name(p): p for p in PKG.rglob("*.py")}

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in files.items():
        targets = {resolve(n) for n in imported_modules(path) if _in(n, "mlsys")}
        graph[module] = {t for t in targets if t and t != module and not _in(module, t)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_module_cycles():
    loops = cycles(import_graph())
    assert not loops, f"modules that import each other (move what they share into one of them, or lower): {loops}"


def test_the_cycle_check_finds_a_loop():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def room_offences(graph: dict[str, set[str]]) -> list[str]:
    """The edges of ``graph`` from a room to a room it may not import (:data:`MAY_IMPORT`)."""
    return sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets
                  if room(m) and room(t) and room(t) not in MAY_IMPORT[room(m)])


def reach(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module ``start`` loads through a chain of imports, each with the chain that reaches it."""
    paths = {start: start}
    todo = [start]
    while todo:
        node = todo.pop()
        for t in sorted(graph.get(node, ())):
            if t not in paths:
                paths[t] = f"{paths[node]} -> {t}"
                todo.append(t)
    del paths[start]
    return paths


def zone_offences(graph: dict[str, set[str]]) -> list[str]:
    """Chains of imports from a trust zone of the grader to a zone it may not reach (:data:`ZONES_NEVER_REACH`)."""
    bad = []
    for module in sorted(graph):
        banned = ZONES_NEVER_REACH.get(zone(module) or "", set())
        bad += [chain for t, chain in reach(graph, module).items() if zone(t) in banned]
    return sorted(bad)


def test_every_import_goes_down_the_room_order():
    bad = room_offences(import_graph())
    assert not bad, f"imports against the rooms' order (models < runtime < bench < labkit < book | grader): {bad}"


def test_the_grader_zones_keep_apart():
    bad = zone_offences(import_graph())
    assert not bad, f"a trust zone of the grader loads one it may not (move what both need out of learnerside): {bad}"


def test_every_zone_is_a_folder_of_the_grader_and_nothing_else_is():
    folders = {p.parent.name for p in (PKG / "grader").glob("*/__init__.py")}
    assert folders == set(ZONES), f"mlsys/grader's folders {sorted(folders)} are not its trust zones {list(ZONES)}"
    assert all(len(list((PKG / "grader" / z).glob("*.py"))) > 1 for z in ZONES)


def test_the_room_and_zone_checks_catch_a_violating_import():
    graph = {
        "mlsys.labkit.grading": {"mlsys.grader.teach"},  # the learner's kit reaching into the grader
        "mlsys.book.page": {"mlsys.grader.sandbox"},  # the book reaching into the grader
        "mlsys.grader.teach": {"mlsys.book.site"},  # the grader reaching into the book
        "mlsys.roofline": {"mlsys.labkit.checks"},  # a model importing the learner's kit
        "mlsys.bench.timing": {"mlsys.book.claims"},
        "mlsys.grader.release": {"mlsys.labkit.checks", "mlsys.bench.records"},  # allowed
        "mlsys.book.site": {"mlsys.labkit.versions"},  # allowed
    }
    assert room_offences(graph) == ["mlsys.bench.timing -> mlsys.book.claims", "mlsys.book.page -> mlsys.grader.sandbox",
                                    "mlsys.grader.teach -> mlsys.book.site", "mlsys.labkit.grading -> mlsys.grader.teach",
                                    "mlsys.roofline -> mlsys.labkit.checks"]
    zones = {
        "mlsys.grader.decide.trusted": {"mlsys.grader.sandboxrun"},  # through the top level ...
        "mlsys.grader.sandboxrun": {"mlsys.grader.learnerside.cellrunner"},  # ... to the learner's side
        "mlsys.grader.clean.perfworker": {"mlsys.grader.learnerside.worker"},
        "mlsys.grader.learnerside.testcells": {"mlsys.grader.decide.verdict"},
        "mlsys.grader.learnerside.worker": {"mlsys.labkit.proxy", "mlsys.grader.clean.perfwire"},  # allowed
    }
    assert zone_offences(zones) == [
        "mlsys.grader.clean.perfworker -> mlsys.grader.learnerside.worker",
        "mlsys.grader.decide.trusted -> mlsys.grader.sandboxrun -> mlsys.grader.learnerside.cellrunner",
        "mlsys.grader.learnerside.testcells -> mlsys.grader.decide.verdict"]


def _timer_uses(source: str, where: str) -> list[str]:
    tree = ast.parse(source, where)
    hits = []
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in TIMERS:
            hits.append(f"{where}:{getattr(node, 'lineno', '?')}: {name}")
        if isinstance(node, ast.ImportFrom) and any(a.name in TIMERS for a in node.names):
            hits.append(f"{where}:{node.lineno}: from {node.module} import {[a.name for a in node.names]}")
    return hits


def _code_cells_of_page(path: Path) -> list[str]:
    """The code cells of a MyST notebook page (```{code-cell} fences)."""
    return re.findall(r"^```\{code-cell\}[^\n]*\n(?::[^\n]*\n)*(.*?)^```", path.read_text(encoding="utf-8"), re.S | re.M)


def _code_cells_of_notebook(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    out = []
    for c in cells:
        if c["cell_type"] == "code":
            src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            out.append("\n".join(ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))))
    return out


def _sources_outside_bench() -> list[tuple[str, str]]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(REPO).as_posix()
        if not rel.startswith("mlsys/bench/") and rel not in TIMER_ALLOWED:
            out.append((rel, p.read_text(encoding="utf-8")))
    for p in sorted((REPO / "scripts").rglob("*.py")):
        out.append((p.relative_to(REPO).as_posix(), p.read_text(encoding="utf-8")))
    for p in sorted((REPO / "chapters").glob("*.md")):
        out += [(f"{p.relative_to(REPO).as_posix()} cell {i}", c) for i, c in enumerate(_code_cells_of_page(p))]
    for p in sorted((REPO / "labs" / "source").rglob("*.ipynb")):
        out += [(f"{p.relative_to(REPO).as_posix()} cell {i}", c) for i, c in enumerate(_code_cells_of_notebook(p))]
    return out


def test_nothing_outside_bench_times_gpu_code():
    hits = []
    for where, source in _sources_outside_bench():
        try:
            hits += _timer_uses(source, where)
        except SyntaxError:  # a student cell with a deliberate gap, or IPython syntax: not ours to time
            continue
    assert not hits, "time GPU code with mlsys.bench (an experiment), not by hand:\n" + "\n".join(hits)


def test_the_timer_check_catches_a_hand_made_timer():
    assert _timer_uses("import time\nt0 = time.perf_counter()\n", "x")
    assert _timer_uses("import torch\ns = torch.cuda.Event(enable_timing=True)\n", "x")
    assert _timer_uses("from triton.testing import do_bench\n", "x")
    assert not _timer_uses("import time\ntime.sleep(1)\n", "x")


def test_the_import_check_resolves_relative_imports():
    fake = PKG / "roofline.py"
    names = imported_modules(fake)
    assert "mlsys.units" in names  # from .units import ...


def test_import_mlsys_does_not_import_torch():
    code = ("import sys, mlsys; import mlsys.hardware, mlsys.roofline, mlsys.units; "
            "bad = [m for m in ('torch', 'triton', 'numba', 'cupy') if m in sys.modules]; "
            "assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]


def test_listing_the_experiments_does_not_import_torch():
    code = ("import sys; from mlsys.bench.experiment import catalogue; c = catalogue(); "
            "assert c and 'torch' not in sys.modules and 'triton' not in sys.modules, sorted(sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_architecture_page_names_every_module():
    page = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = sorted(p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py")
                     if p.name != "__init__.py" and p.parent.name != "experiments" and p.name not in page)
    assert not missing, f"docs/ARCHITECTURE.md does not name {missing}; say in one line what each is for"



# The grader's size limits (issue 48, "a size it can keep"): no module of the course's rooms (mlsys/labkit,
# mlsys/book, mlsys/grader) over MAX_MODULE_LINES
# lines, no function over MAX_FUNCTION_LINES lines (def line to last line); complexity is ruff's C901
# (pyproject.toml, max-complexity 15). The tables below hold what is not split yet, each at its size when it
# was listed: a ceiling that may only come down. Anything else over a limit, or a listed one that grew, fails.
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
MODULES_NOT_YET_SPLIT: dict[str, int] = {
}
FUNCTIONS_NOT_YET_SPLIT: dict[str, int] = {
}


def function_sizes(source: str, where: str) -> dict[str, int]:
    """Each function's length in lines, ``end_lineno - lineno + 1`` (decorators not counted), keyed by its
    dotted name inside the module (``Class.method``, ``outer.inner``)."""
    sizes: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    sizes[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source, where), "")
    return sizes


def size_offences(files: dict[str, str]) -> list[str]:
    """What breaks the size limits in ``files`` (name relative to mlsys -> source), against the tables."""
    bad = []
    for rel, source in sorted(files.items()):
        lines = len(source.splitlines())
        ceiling = MODULES_NOT_YET_SPLIT.get(rel, MAX_MODULE_LINES)
        if lines > ceiling:
            bad.append(f"module {rel}: {lines} lines (limit {ceiling})")
        for name, length in function_sizes(source, rel).items():
            ceiling = FUNCTIONS_NOT_YET_SPLIT.get(f"{rel}:{name}", MAX_FUNCTION_LINES)
            if length > ceiling:
                bad.append(f"function {rel}:{name}: {length} lines (limit {ceiling})")
    return bad


def _course_sources() -> dict[str, str]:
    return {p.relative_to(PKG).as_posix(): p.read_text(encoding="utf-8")
            for r in COURSE_ROOMS for p in sorted((PKG / r).rglob("*.py"))}


def test_the_grader_keeps_its_size():
    bad = size_offences(_course_sources())
    assert not bad, ("split by concept (a module) or by named step (a helper with a docstring):\n" + "\n".join(bad))


def test_the_size_tables_list_only_what_is_still_too_big():
    """A ceiling left in a table after its module or function was split would let it grow back: take it off."""
    files = _course_sources()
    stale = [m for m, _ in MODULES_NOT_YET_SPLIT.items()
             if m not in files or len(files[m].splitlines()) <= MAX_MODULE_LINES]
    for key in FUNCTIONS_NOT_YET_SPLIT:
        rel, _, name = key.partition(":")
        if function_sizes(files.get(rel, ""), rel).get(name, 0) <= MAX_FUNCTION_LINES:
            stale.append(key)
    assert not stale, f"within the limits now, take them off the tables: {stale}"


def test_the_size_check_counts_what_the_brief_counts():
    # 3 lines for f (def, docstring, return): counted from the def line, decorators left out
    src = "import x\n\n@dec\ndef f():\n    '''doc'''\n    return 1\n\n\nclass C:\n    def m(self):\n        def inner():\n            pass\n"
    assert function_sizes(src, "x") == {"f": 3, "C.m": 3, "C.m.inner": 2}
    long_fn = "def g():\n" + "    x = 1\n" * 60  # 61 lines
    assert size_offences({"new.py": long_fn}) == ["function new.py:g: 61 lines (limit 60)"]
    assert size_offences({"new.py": "x = 1\n" * 601}) == ["module new.py: 601 lines (limit 600)"]
    assert size_offences({"new.py": "x = 1\n" * 600}) == []


_RUN_AS_MODULE = re.compile(r"""-m(?: |["'], ["'])(mlsys(?:\.\w+)+)""")
"""A module run by name (``python -m`` and a dotted name, or the two as argv items): a string no import checks."""


def _module_exists(dotted: str) -> bool:
    path = REPO.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_every_module_run_by_name_exists():
    """A module moved (issue 48: the course's three rooms) leaves no ``-m`` string naming where it was: in the
    package, scripts, tests, the Makefile, CI, nbgrader's config and the docs a teacher follows."""
    files = [*PKG.rglob("*.py"), *(REPO / "scripts").rglob("*.py"), *(REPO / "tests").glob("*.py"),
             *(REPO / "tests" / "gpu_runs").glob("*.py"), REPO / "Makefile", REPO / ".ci" / "run",
             *(REPO / ".github").rglob("*.yml"), REPO / "labs" / "nbgrader_config.py", REPO / "README.md",
             *(REPO / "docs").glob("*.md"), *(REPO / "teachers").glob("*.md"), *(REPO / "chapters").glob("*.md")]
    named = {(m, f.relative_to(REPO).as_posix()) for f in files if f.is_file()
             for m in _RUN_AS_MODULE.findall(f.read_text(encoding="utf-8"))}
    assert len({m for m, _ in named}) > 10, "the pattern no longer finds the course's -m strings"
    missing = sorted(f"{f}: -m {m}" for m, f in named if not _module_exists(m))
    assert not missing, "no such module:\n" + "\n".join(missing)
    assert not _module_exists(".".join(("mlsys", "course", "teach"))) and _module_exists("mlsys.grader.teach")  # gone, moved
