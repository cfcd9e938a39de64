"""The three rooms and their import rules, checked on the source (docs/ARCHITECTURE.md explains them).

* ``mlsys/*.py`` (the models; ``cli.py`` and ``__main__.py`` are the front door) import nothing from
  ``mlsys.bench`` or ``mlsys.course``;
* ``mlsys.bench`` imports no ``mlsys.course`` module except ``mlsys.course.device``;
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
FRONT_DOOR = {"cli.py", "__main__.py"}
TIMERS = {"perf_counter", "perf_counter_ns", "Event", "do_bench", "elapsed_time"}

# Known exceptions, each with its reason. Keep this list short; an entry is a debt, not a licence.
BENCH_MAY_IMPORT = {
    "mlsys.course.device": "the runner picks the device and the Triton interpreter the same way pages do",
    # the lab experiments read the instructor notebooks' kernel cells; until the cell reader moves to a
    # room both may use, they use the course's one notebook reader rather than a second copy
    "mlsys.course.nbexec": "lab2_matmul and lab3_fusion read kernel cells of the instructor notebooks",
    # the multi-GPU experiments start their ranks with the launcher the labs use; it belongs in a room both
    # may import (debt: move mlsys.course.launch's process start-up next to mlsys.course.device)
    "mlsys.course.launch": "nccl_allreduce starts one process per GPU with the labs' launcher",
}
TIMER_ALLOWED = {
    "mlsys/course/nbexec.py": "records how long each notebook cell took (a report, not a GPU measurement)",
    "mlsys/course/trusted.py": "the verdict process: its own clock times each round of a worker from outside, "
                               "where no answer cell runs (a submission cannot swap it)",
    "mlsys/course/perfworker.py": "the clean baseline worker times the grader's own work in a round with CUDA events, "
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
BENCH = sorted((PKG / "bench").rglob("*.py"))


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_models_import_neither_bench_nor_course(path):
    bad = sorted(n for n in imported_modules(path) if _in(n, "mlsys.bench") or _in(n, "mlsys.course"))
    assert not bad, f"{path.relative_to(REPO)} is a model module but imports {bad}"


@pytest.mark.parametrize("path", BENCH, ids=lambda p: str(p.relative_to(PKG)))
def test_bench_imports_only_the_device_switch_from_course(path):
    bad = sorted(n for n in imported_modules(path)
                 if _in(n, "mlsys.course") and n != "mlsys.course" and not any(_in(n, ok) for ok in BENCH_MAY_IMPORT))
    assert not bad, f"{path.relative_to(REPO)} imports {bad} from mlsys.course (allowed: {sorted(BENCH_MAY_IMPORT)})"


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
