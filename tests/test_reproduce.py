"""Every re-measure line the book prints works, and every experiment that can run on a CPU does.

A page that quotes a recorded figure prints the record's ``reproduce`` line (``mlsys.bench.run("name")``).
The experiments a page loads are found in the pages themselves (the chapters, the labs' instructor
notebooks, the front page), not in the experiments' own ``SHOWN_IN``, so a page that quotes an
experiment its module does not list is still covered. Each line is parsed and executed for real, with
``quick=True, device="cpu"`` added, for every such experiment that can run on a CPU (``NEEDS == "any"``).
The CPU-capable experiments no page loads run through the command line, ``--quick --device cpu``.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import mlsys
from mlsys.bench import records
from mlsys.bench.experiment import catalogue

REPO = Path(__file__).resolve().parents[1]
CATALOGUE = catalogue()
# every test that runs an experiment is slow: on the 2-core CI machine a quick CPU run takes 1-45 s
# (measured 2026-11-25, torch imported once per process)


def _pages() -> list[Path]:
    return [*sorted((REPO / "chapters").glob("*.md")), *sorted((REPO / "labs" / "source").glob("*/*.ipynb")),
            REPO / "intro.md"]


def book_experiments() -> dict[str, list[str]]:
    """Experiment -> the pages that print its re-measure line (a page that mentions ``reproduce`` or
    ``mlsys.bench.run`` and names the experiment as a string)."""
    found: dict[str, list[str]] = {}
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        if "reproduce" not in text and "mlsys.bench.run(" not in text and "mlsys.bench run " not in text:
            continue
        names = set(re.findall(r'\\?"([a-z0-9_]+)\\?"', text)) & set(CATALOGUE)
        for command in re.findall(r"mlsys\.bench run ((?:[a-z0-9_]+ ?)+)", text):  # the command a page prints
            names |= set(command.split()) & set(CATALOGUE)
        for name in names:
            found.setdefault(name, []).append(page.relative_to(REPO).as_posix())
    return found


BOOK = book_experiments()


def test_the_book_prints_reproduce_lines_for_the_experiments_it_quotes():
    # found by reading the pages: chapter 4 quotes divergence, Lab 2 its matmul, chapter 11 the NCCL sweep
    assert {"divergence", "lab2_matmul", "nccl_allreduce", "layer_roofline"} <= set(BOOK)
    assert "chapters/04_execution_model.md" in BOOK["divergence"]


def reproduce_line(name: str) -> str:
    """The line a page prints for ``name``: the recorded run's ``reproduce`` (any device it was recorded on)."""
    have = sorted(p.parent.name for p in records.data_dir().glob(f"*/{name}.json"))
    assert have, f"experiment {name} is quoted by {BOOK[name]} but has no recording in {records.data_dir()}"
    return records.load_experiment(name, device=have[0]).reproduce


def _quick_on_cpu(line: str) -> ast.Module:
    """``line`` (one call, ``mlsys.bench.run("name")``) with ``quick=True, device="cpu"`` added."""
    tree = ast.parse(line)
    assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr), f"not one expression: {line!r}"
    call = tree.body[0].value
    assert isinstance(call, ast.Call) and ast.unparse(call.func) == "mlsys.bench.run", f"not a run call: {line!r}"
    assert [type(a) for a in call.args] == [ast.Constant] and not call.keywords, line
    call.keywords += [ast.keyword("quick", ast.Constant(True)), ast.keyword("device", ast.Constant("cpu"))]
    return ast.fix_missing_locations(ast.Module([ast.Assign([ast.Name("rec", ast.Store())], call)], []))


# the labs' experiments already run quick on a CPU in their lab's tests (one run each in CI, not two)
RUN_BY_LAB_TESTS = {"lab2_matmul": "test_lab2.py", "lab3_fusion": "test_lab3.py", "ring_allreduce": "test_lab4.py",
                    "lab5_attention": "test_lab5.py"}
CPU = sorted(n for n, e in CATALOGUE.items() if e.needs == "any" and n not in RUN_BY_LAB_TESTS)


@pytest.mark.parametrize("name", sorted(RUN_BY_LAB_TESTS))
def test_the_lab_experiments_run_quick_in_their_lab_tests(name):
    assert CATALOGUE[name].needs == "any"
    source = (REPO / "tests" / RUN_BY_LAB_TESTS[name]).read_text(encoding="utf-8")
    assert re.search(rf'run\("{name}", quick=True', source), f"{RUN_BY_LAB_TESTS[name]} no longer runs {name} quick"


def _check(rec: records.Record, name: str) -> None:
    assert isinstance(rec, records.Record) and rec.experiment == name
    assert rec.data["quick"] is True and rec.data["device"]["kind"] == "cpu"
    if name == "xla_hlo" and not rec.results:  # jax is optional; the record must say it was missing
        assert any("jax is not importable" in n for n in rec.data["notes"]), rec.data["notes"]
    else:
        assert rec.results, f"{name}: an empty result"


@pytest.mark.slow
@pytest.mark.parametrize("name", CPU)
def test_every_cpu_experiment_runs_quick_the_way_the_book_says(name, tmp_path, capsys):
    """The book's own reproduce line where a page prints one; the command line for any other."""
    if name in BOOK:
        line = reproduce_line(name)
        assert line == f'mlsys.bench.run("{name}")'
        ns: dict = {"mlsys": mlsys}
        exec(compile(_quick_on_cpu(line), f"<reproduce {name}>", "exec"), ns)  # noqa: S102 -- the book's own line
        _check(ns["rec"], name)
        return
    from mlsys.bench.__main__ import cli

    assert cli(["run", name, "--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob(f"*/{name}.json")
    assert f"wrote {path}" in capsys.readouterr().out
    _check(records.Record(json.loads(path.read_text(encoding="utf-8")), str(path)), name)


# Experiments the book quotes before their first GPU run: their pages show every figure as missing, "not in
# the course's data yet" (tests/test_kernel_limiters_page.py runs those pages without the record). An entry
# must go once its record exists (the test below fails on a stale one).
AWAITING_A_GPU_RUN: dict[str, str] = {}  # experiment -> why the book quotes it before its first GPU run


def test_every_gpu_figure_the_book_quotes_has_a_recording():
    recorded = {n for n in BOOK if list(records.data_dir().glob(f"*/{n}.json"))}
    missing = sorted(set(BOOK) - recorded - set(AWAITING_A_GPU_RUN))
    assert not missing, f"quoted by the book but never recorded: {missing}"
    stale = sorted(set(AWAITING_A_GPU_RUN) & recorded)
    assert not stale, f"recorded now, so no longer awaiting a GPU run: {stale}"
    assert set(AWAITING_A_GPU_RUN) <= set(BOOK), "an experiment awaiting a run that no page quotes"


def test_a_gpu_experiment_on_a_cpu_says_what_it_needs():
    gpu_only = sorted(n for n, e in CATALOGUE.items() if e.needs == "cuda")
    with pytest.raises(mlsys.bench.NeedsDevice, match="needs 1 CUDA GPU"):
        mlsys.bench.run(gpu_only[0], quick=True, device="cpu")


def test_the_reproduce_rewrite_refuses_other_code():
    with pytest.raises(AssertionError):
        _quick_on_cpu("import os")
    with pytest.raises(AssertionError):
        _quick_on_cpu('mlsys.bench.run("a", quick=False)')
    assert "quick=True" in ast.unparse(_quick_on_cpu('mlsys.bench.run("a")'))


def test_divergence_emulation_matches_the_kernel_and_counts_passes():
    np = pytest.importorskip("numpy")
    from mlsys.bench.experiments.divergence import simt_emulation

    warps, iters = 4, 3
    for paths in (1, 2, 4, 32):
        for warp_level in (False, True):
            x, passes = simt_emulation(warps, paths, warp_level, iters)
            # the kernel, thread by thread: x = tid, then iters times x = x * 0.999 + path (float32)
            tid = np.arange(warps * 32)
            key = tid // 32 if warp_level else tid % 32
            expect = tid.astype(np.float32)
            for _ in range(iters):
                expect = expect * np.float32(0.999) + (key % paths).astype(np.float32)
            np.testing.assert_allclose(x, expect, rtol=1e-6)
            # by hand: k paths inside every warp -> k passes per warp; paths between warps -> one pass per warp
            assert passes == (warps if warp_level else warps * paths)
