"""The labs' learner-facing support: slips named by visible checks, kernels compiled for the GPU on a CPU,
short errors in IPython and a plain check of the installed versions (issue 45)."""

from __future__ import annotations

import re
import textwrap

import pytest

import mlsys

mlsys.labkit.device.setup(check_versions=False)  # TRITON_INTERPRET=1 without CUDA, before triton is imported

from mlsys import Q_  # noqa: E402
from mlsys.labkit import compilecheck, slips, versions  # noqa: E402
from mlsys.labkit.grading import GradingError  # noqa: E402

# ------------------------------------------------------------------------------------------------ slips


def test_a_known_slip_is_named_and_the_answer_is_not_given():
    with pytest.raises(GradingError, match=r"sum of 4: you found 4 FLOP: one add too many \(see hint 2\)$"):
        slips.check_count("sum of 4", Q_(4, "FLOP"), "FLOP", 3, {4: "one add too many"}, hint="see hint 2")
    with pytest.raises(GradingError, match="not what Part 1's conventions give") as err:
        slips.check_count("sum of 4", Q_(7, "FLOP"), "FLOP", 3, {4: "one add too many"})
    assert " 3 " not in str(err.value) and "3 FLOP" not in str(err.value)
    slips.check_count("sum of 4", Q_(3, "FLOP"), "FLOP", 3, {})  # right: silent
    slips.check_count("bytes", Q_(160, "bit"), "byte", 20, {})  # any unit of the right dimension


@pytest.mark.parametrize(("found", "message"), [(3, "expected a quantity in FLOP"),
                                                 (Q_(3, "byte"), "expected a quantity in FLOP.*swapped")])
def test_a_count_without_its_unit_is_named(found, message):
    with pytest.raises(GradingError, match=message):
        slips.check_count("sum of 4", found, "FLOP", 3, {})


# ------------------------------------------------------------------------------------------------ compile


KERNELS = textwrap.dedent('''
    import triton
    import triton.language as tl

    SCALE = tl.constexpr(2.0)  # a plain float global compiles nowhere (see below)


    @triton.jit
    def twice(x):
        return x * SCALE


    @triton.jit
    def dot_kernel(a_ptr, out_ptr, K, BLOCK_K: tl.constexpr):
        acc = tl.zeros((BLOCK_K,), dtype=ACC)
        for k0 in range(0, K, BLOCK_K):
            offs = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + offs, mask=offs < K, other=0.0)
            acc += twice(a.to(tl.float32))
        tl.store(out_ptr, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))
''')


def _launch(acc_dtype: str, tmp_path, scale: str = "") -> list[str]:
    """Define the kernels in a file (as a cell would: inspect must find the source), launch under the
    interpreter, then compile what ran for sm_90."""
    return compilecheck.compile_errors(_launches(acc_dtype, tmp_path, scale))


def _launches(acc_dtype: str, tmp_path, scale: str = "") -> list:
    import importlib.util

    import torch

    path = tmp_path / f"kernels_{acc_dtype}{len(scale)}.py"
    text = KERNELS.replace("dtype=ACC", f"dtype=tl.{acc_dtype}")
    path.write_text(text.replace("SCALE = tl.constexpr(2.0)  # a plain float global compiles nowhere (see below)\n",
                                 scale) if scale else text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a = torch.ones(40, dtype=torch.float16)
    out = torch.zeros(1, dtype=torch.float16)
    with compilecheck.record_launches() as launches:
        mod.dot_kernel[(1,)](a, out, 40, BLOCK_K=16)
    assert float(out) == 80.0  # the interpreter runs both versions: 40 ones, each doubled
    assert len(launches) == 1
    return launches


@pytest.mark.slow  # two compilations for sm_90 in fresh processes (a few seconds each)
def test_a_loop_carried_dtype_change_is_caught_on_a_cpu_and_an_honest_kernel_compiles(tmp_path, monkeypatch):
    monkeypatch.setenv(compilecheck.CACHE_ENV, str(tmp_path / "cache"))  # compiled here, not taken from a run before
    assert _launch("float32", tmp_path) == []
    errors = _launch("float16", tmp_path)
    assert len(errors) == 1
    # the kernel's `for` line in the file: line 16 (line 1 is empty, the def is on line 14)
    assert "dot_kernel: the GPU compiler (Triton, for sm_90) rejects your kernel at line 16" in errors[0], errors[0]
    assert "`for k0 in range(0, K, BLOCK_K):`" in errors[0]
    assert "Loop-carried variable acc has initial type" in errors[0] and "fp16" in errors[0]
    assert "tl.zeros(..., dtype=tl.float32)" in errors[0]
    # the interpreter reads a plain global too; the compiler refuses it, inside the function that reads it
    errors = _launch("float32", tmp_path, "SCALE = 2.0\n")
    assert "at line 10 of the cell that defines twice (`return x * SCALE`)" in errors[0], errors[0]
    assert "Cannot access global variable SCALE" in errors[0]


def test_a_compile_verdict_is_kept_for_the_next_run_and_nothing_else_is(tmp_path, monkeypatch):
    """A kernel compiled once is not compiled again by the next run (a new kernel process, its cell in another file)
    with the same Triton; a failure that is no verdict (no ptxas, a time-out) is not kept; ``0`` keeps nothing."""
    import subprocess

    import triton

    monkeypatch.setenv(compilecheck.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(compilecheck, "_DONE", {})
    launches = _launches("float32", tmp_path)
    replies = iter(['{"other": "RuntimeError: no ptxas"}', '{"error": "dot_kernel: rejected"}', '{"ok": true}',
                    '{"error": "dot_kernel: rejected"}', '{"error": "dot_kernel: rejected"}'])
    calls = []

    def run(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, next(replies) + "\n", "")

    monkeypatch.setattr(compilecheck.subprocess, "run", run)

    def again():
        compilecheck._DONE.clear()  # a new kernel process
        return compilecheck.compile_errors(launches)

    assert again() == [] and len(calls) == 1  # noted, not a verdict: not kept
    assert again() == ["dot_kernel: rejected"] and len(calls) == 2
    assert again() == ["dot_kernel: rejected"] and len(calls) == 2  # from the folder: not compiled again
    job = compilecheck.describe(*launches[0])
    assert compilecheck._key(job) == compilecheck._key({**job, "file": "/tmp/ipykernel_1/2.py"})
    assert compilecheck._key(job) != compilecheck._key({**job, "source": job["source"] + "\n"})
    monkeypatch.setattr(triton, "__version__", "0.0.0")  # another Triton compiles it afresh
    assert again() == [] and len(calls) == 3
    monkeypatch.setenv(compilecheck.CACHE_ENV, "0")
    assert again() == ["dot_kernel: rejected"] and len(calls) == 4  # nothing kept at all: compiled each time
    assert again() == ["dot_kernel: rejected"] and len(calls) == 5
    with pytest.raises(StopIteration):
        next(replies)


def test_a_launch_is_described_with_its_argument_types():
    import torch

    def fn(a_ptr, n, scale, flag, BLOCK: tl.constexpr):  # noqa: F821 - a string (future annotations), only read
        pass

    class Fake:
        pass

    kernel = Fake()
    kernel.fn = fn
    Fake.__name__ = "InterpretedFunction"
    job = compilecheck.describe(kernel, (torch.zeros(2, dtype=torch.bfloat16), 3, 0.5, True), {"BLOCK": 64,
                                                                                               "num_warps": 4})
    assert job["signature"] == {"a_ptr": "*bf16", "n": "i32", "scale": "fp32", "flag": "i1", "BLOCK": "constexpr"}
    assert job["constexprs"] == {"BLOCK": 64} and job["options"] == {"num_warps": 4}
    with pytest.raises(compilecheck.CompileProblem, match="argument of type list"):
        compilecheck.describe(kernel, ([1], 3, 0.5, True), {"BLOCK": 64})


# ------------------------------------------------------------------------------------------------ short errors


def test_a_failing_check_shows_its_message_in_two_lines_and_other_errors_stay_whole(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        assert mlsys.labkit.device.short_errors()
        shell.run_cell("from mlsys.labkit.grading import GradingError\n"
                       "def check():\n    raise GradingError('add: your kernel wrote 3 elements past the end of out')\n"
                       "check()")
        out = capsys.readouterr().out.strip().splitlines()
        assert 1 <= len(out) <= 3, out
        assert "GradingError" in out[0] and "wrote 3 elements past the end of out" in out[0]
        mlsys.labkit.device.full_traceback()  # the hidden traceback, on demand: down to the raise in check()
        assert "raise GradingError('add: your kernel wrote 3" in capsys.readouterr().out
        shell.run_cell("def mine():\n    return 1 / 0\nmine()")
        out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
        assert "ZeroDivisionError" in out and "return 1 / 0" in out  # the learner's own error keeps its traceback
    finally:
        shell.set_custom_exc((), None)
        InteractiveShell.clear_instance()


def test_short_errors_do_nothing_outside_ipython(monkeypatch):
    import sys

    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert mlsys.labkit.device.short_errors() is False


# ------------------------------------------------------------------------------------------------ versions


def test_versions_outside_the_range_say_what_to_install():
    ok = {"torch": "2.13.0+cpu", "triton": "3.7.1", "numpy": "2.3.4"}
    assert versions.problems(ok) == []
    old = versions.problems({**ok, "torch": "2.9.1+cu126", "numpy": "2.5.0"})
    assert len(old) == 2
    assert old[0].startswith("torch 2.9.1+cu126 is outside") and 'pip install "torch>=2.11,<2.14"' in old[0]
    assert old[1].startswith("numpy 2.5.0 is outside") and 'pip install "numpy>=1.26,<2.5"' in old[1]
    assert versions.problems({**ok, "numpy": None}) == ['numpy is not installed: pip install "numpy>=1.26,<2.5"']
    assert versions.problems({**ok, "triton": None}) == []  # labs without kernels run without Triton


def test_every_tested_combination_is_inside_the_supported_range_and_a_broken_one_is_named():
    for combo in versions.TESTED:
        said = versions.problems({"torch": "2.13.0", **combo})
        broken = combo["triton"].startswith("3.6") and combo["numpy"] >= "2.4"
        assert len(said) == int(broken), (combo, said)
    # Triton 3.6's interpreter with NumPy 2.4 (its own int() of a 1-element array): named, with what to install
    said = versions.problems({"torch": "2.13.0", "triton": "3.6.0", "numpy": "2.4.6"})
    assert len(said) == 1 and 'pip install "numpy<2.4"' in said[0] and "interpreter" in said[0]
    assert versions.installed()["numpy"] is not None


def test_the_tested_combinations_span_the_oldest_the_pinned_and_the_newest_triton_with_two_numpys():
    # requirements.txt, read here by hand: the pair the course's .venv (and so make test) runs
    pins = dict(re.findall(r"^(triton|numpy)==(\S+)$", (mlsys_root() / "requirements.txt").read_text(), re.M))
    assert versions.PINNED == pins == {"triton": "3.7.1", "numpy": "2.3.4"}
    tritons = {c["triton"] for c in versions.TESTED}
    assert tritons == {"3.6.0", "3.7.1", "3.8.0"}  # SUPPORTED is >=3.6,<3.9: its oldest, the pinned, its newest
    assert {c["numpy"] for c in versions.TESTED} == {"2.3.4", "2.4.6"}
    assert len(versions.TESTED) == 6 and versions.PINNED in versions.TESTED
    # CI runs two of them and the suite the pinned one: three Triton versions and two NumPy versions on every run
    covered = [*versions.CI, versions.PINNED]
    assert {c["triton"] for c in covered} == tritons and {c["numpy"] for c in covered} == {"2.3.4", "2.4.6"}
    assert all(c in versions.TESTED and not versions.covered_by_suite(c) for c in versions.CI)


def test_the_pinned_pair_and_the_broken_ranges_are_recognised_by_release_number():
    assert versions.covered_by_suite({"triton": "3.7.1", "numpy": "2.3.4"})
    assert versions.covered_by_suite({"triton": "3.7.1+git1a2b", "numpy": "2.3.4"})  # a local build of the same release
    assert not versions.covered_by_suite({"triton": "3.7.1", "numpy": "2.4.6"})
    assert not versions.covered_by_suite({"triton": "3.7", "numpy": "2.3.4"})  # 3.7 is not 3.7.1
    advice = versions.BROKEN[0][1]
    assert versions.broken_advice({"triton": "3.6.0", "numpy": "2.4.6"}) == advice
    assert versions.broken_advice({"triton": "3.6.9", "numpy": "2.4.0"}) == advice  # lower bounds included
    assert versions.broken_advice({"triton": "3.7.0", "numpy": "2.4.6"}) is None  # upper bound excluded
    assert versions.broken_advice({"triton": "3.6.0", "numpy": "2.3.4"}) is None
    assert versions.broken_advice({"triton": "3.8.0", "numpy": "2.4.6"}) is None
    assert versions.broken_advice({"numpy": "2.4.6"}) is None  # no Triton: nothing of Triton's is broken


def test_the_version_script_picks_the_ci_subset_and_filters_by_version(monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("test_versions_script", mlsys_root() / "scripts" / "test_versions.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.delenv("MLSYS_VERSIONS_TRITON", raising=False)
    monkeypatch.delenv("MLSYS_VERSIONS_NUMPY", raising=False)
    assert script.chosen(ci=True) == [{"triton": "3.6.0", "numpy": "2.3.4"}, {"triton": "3.8.0", "numpy": "2.4.6"}]
    assert len(script.chosen(ci=False)) == 6
    monkeypatch.setenv("MLSYS_VERSIONS_TRITON", "3.8.0")
    assert script.chosen(ci=False) == [{"triton": "3.8.0", "numpy": "2.3.4"}, {"triton": "3.8.0", "numpy": "2.4.6"}]
    monkeypatch.setenv("MLSYS_VERSIONS_NUMPY", "2.4.6")
    assert script.chosen(ci=False) == [{"triton": "3.8.0", "numpy": "2.4.6"}]
    monkeypatch.setenv("MLSYS_VERSIONS_TRITON", "3.5.0")
    with pytest.raises(SystemExit, match="match none"):
        script.chosen(ci=True)


def mlsys_root():
    """The checkout this test runs in (requirements.txt and scripts/ are not in the installed package)."""
    from pathlib import Path

    return Path(__file__).resolve().parents[1]


def test_the_interpreters_numpy_error_is_blamed_on_the_versions_not_the_kernel(monkeypatch):
    from mlsys.labkit import checks

    exc = RuntimeError("InterpreterError: TypeError('only 0-dimensional arrays can be converted to Python scalars')")
    monkeypatch.setattr(versions, "installed", lambda *a: {"torch": "2.13.0", "triton": "3.6.0", "numpy": "2.4.6"})
    text = checks.explain_exception("naive_matmul on a 2x3 by 3x2 example", exc)
    assert text.startswith("naive_matmul on a 2x3 by 3x2 example: not your kernel: Triton 3.6"), text
    monkeypatch.setattr(versions, "installed", lambda *a: {"torch": "2.13.0", "triton": "3.7.1", "numpy": "2.4.6"})
    assert "the Triton interpreter stopped your kernel" in checks.explain_exception("k", exc)


@pytest.mark.slow  # a Jupyter kernel starts
def test_in_jupyter_a_failing_check_is_an_error_output_of_two_lines(tmp_path):
    """In a real kernel (as JupyterLab, nbgrader's Validate and the grader run cells) the shortened error is still an
    error output: the cell fails and nbgrader scores it 0; only the traceback lines are fewer."""
    import nbformat
    from nbclient import NotebookClient
    from nbgrader.utils import determine_grade

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import mlsys\ndevice = mlsys.labkit.device.setup()"),
                nbformat.v4.new_code_cell("from mlsys.labkit.grading import GradingError\n"
                                          "raise GradingError('sum of 4: you found 4 FLOP')",
                                          metadata={"nbgrader": {"grade": True, "solution": False, "points": 2,
                                                                 "grade_id": "test_x", "schema_version": 3}})]
    NotebookClient(nb, timeout=120, allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}).execute()
    (error,) = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert error.ename == "GradingError" and error.evalue == "sum of 4: you found 4 FLOP"
    assert len(error.traceback) == 2 and "sum of 4: you found 4 FLOP" in error.traceback[0], error.traceback
    assert determine_grade(nb.cells[1]) == (0, 2)


def test_no_compiler_process_is_started_inside_the_graders_sandbox(monkeypatch):
    # the grader's census flags a grandchild of the learner's kernel; the learner's own machine is where this helps
    import subprocess

    def no_process(*a, **k):
        raise AssertionError("a process was started")

    monkeypatch.setattr(compilecheck, "in_grader_sandbox", lambda: True)
    monkeypatch.setattr(subprocess, "run", no_process)
    assert compilecheck.compile_errors([(object(), (), {})]) == []
    monkeypatch.undo()
    assert compilecheck.in_grader_sandbox() is False  # this checkout is not the sandbox's /sandbox/site
