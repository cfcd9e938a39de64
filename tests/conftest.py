"""Shared pytest settings.

Property tests draw the same examples on every run (``derandomize``), so CI never fails on a draw
that a maintainer cannot reproduce; ``HYPOTHESIS_PROFILE=explore`` draws fresh examples locally.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Under pytest-xdist (`make test` runs `pytest -n 3`), each worker's own threads get its share of the
# cores (at least one), so the workers' torch/BLAS pools do not oversubscribe a 2-core machine. Grading slots set
# their own thread counts (mlsys.grader.slots) and are not affected.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _share = max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, str(_share))


# ------------------------------------------------------------------------------------------------
# The labs' reference kernels, from the instructor notebooks' own cells, executed once per session
# when a test first asks for them (never at import: a broken notebook fails its tests, it does not
# stop collection). The test modules call mlsys.labkit.device.setup() before Triton is imported.

import types  # noqa: E402

import pytest  # noqa: E402


def _notebook_module(lab: str, grade_ids: list[str], name: str) -> types.ModuleType:
    from mlsys.runtime.notebook import exec_cells
    from mlsys.runtime.paths import lab_notebook

    module = types.ModuleType(name)  # the cells' globals: monkeypatching an attribute reaches the kernels
    exec_cells(lab_notebook(lab), grade_ids, module.__dict__)
    return module


@pytest.fixture(scope="session")
def lab2_kernels() -> types.ModuleType:
    """Lab 2's setup cell, warm-up and every cell tagged ``lab2-kernel``, as the GPU experiment runs them."""
    from mlsys.bench.experiments.lab2_matmul import GOING_FURTHER
    from mlsys.runtime.notebook import code_cells, exec_cells
    from mlsys.runtime.paths import lab_notebook

    tagged = [c.grade_id for c in code_cells(lab_notebook("lab2_tiled_matmul")) if "lab2-kernel" in c.tags]
    module = _notebook_module("lab2_tiled_matmul", ["setup", "add_kernel", *tagged], "lab2_kernels")
    module.fallback = module.matmul  # the optional notebook's persistent TMA kernel hands the rest to the grouped one
    exec_cells(GOING_FURTHER, [c.grade_id for c in code_cells(GOING_FURTHER) if "lab2-kernel" in c.tags], module.__dict__)
    return module


@pytest.fixture(scope="session")
def lab3_kernels() -> types.ModuleType:
    """Lab 3's setup and imports cells and its two fused kernels with their wrappers."""
    cells = ["setup", "imports", "fused_elementwise_kernel", "fused_elementwise", "fused_softmax_kernel", "fused_softmax"]
    return _notebook_module("lab3_fusion", cells, "lab3_kernels")


@pytest.fixture(scope="session")
def lab5_kernels() -> dict:
    """Lab 5's reference kernels as its experiment loads them, and the notebook's NumPy online softmax."""
    from mlsys.bench.experiments import lab5_attention

    return {"kernels": lab5_attention.load_reference(),
            "online": vars(_notebook_module("lab5_attention", ["online_softmax"], "lab5"))}


# ------------------------------------------------------------------------------------------------
# One graded course per lab, shared by every test that checks rows of it: the instructor notebook,
# the untouched release and the lab's bad-submission corpus (tests/bad_submissions/<short>/*.nb.json)
# go through nbgrader and the sandbox once per session, not once per test (CI time).

CORPORA = {"lab1_roofline": "lab1", "lab2_tiled_matmul": "lab2", "lab3_fusion": "lab3", "lab4_collectives": "lab4",
           "lab5_attention": "lab5", "lab6_profiling": "lab6"}
# Submissions made from the instructor notebook by replacing the solution region of the named cells
# (so they follow the lab as it changes), graded in the same course: {lab: {student: {grade_id: code}}}.
EDITED = {
    # a roof typed from a datasheet instead of measured: only the grader's own measurement can tell (issue 26)
    "lab1_roofline": {"typed_roof": {"measure": 'my_roof = Roof(Q_(989, "TFLOP/s"), Q_(3.35, "TB/s"), "datasheet")'}},
    # launchers that call PyTorch's ops instead of the Triton kernels (tests/test_lab3.py checks the row)
    "lab3_fusion": {"torch_ops": {"fused_elementwise": "out = torch.relu(x) * scale + shift",
                                  "fused_softmax": "out = torch.softmax(x, dim=-1)"}},
}


def with_solutions(nb: dict, answers: dict[str, str]) -> dict:
    """``nb`` with the solution region (### BEGIN SOLUTION ... ### END SOLUTION) of each cell named in
    ``answers`` replaced by that code; a named cell that is missing or has no solution region fails."""
    import re

    pattern = re.compile(r"^([ \t]*)### BEGIN SOLUTION.*?### END SOLUTION[^\n]*", re.S | re.M)
    cells, found = [], set()
    for cell in nb["cells"]:
        cell = dict(cell)
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in answers:
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            cell["source"], n = pattern.subn(lambda m, a=answers[gid]: m.group(1) + a, source)
            assert n == 1, f"cell {gid} has {n} solution regions, expected 1"
            found.add(gid)
        cells.append(cell)
    assert found == set(answers), f"no cells {sorted(set(answers) - found)} in the notebook"
    return dict(nb, cells=cells)


@pytest.fixture(scope="session")
def graded_lab(tmp_path_factory):
    """``graded_lab(lab)`` -> (course root, {student: Row}) for ``lab``, graded once per session."""
    import json
    import shutil
    from pathlib import Path

    from mlsys.grader import teach
    from mlsys.runtime.paths import lab_notebook, labs_root

    done: dict[str, tuple[Path, dict]] = {}

    def grade(lab: str) -> tuple[Path, dict]:
        if lab in done:
            return done[lab]
        root = tmp_path_factory.mktemp(lab) / "course"
        (root / "source").mkdir(parents=True)
        shutil.copy2(labs_root() / "nbgrader_config.py", root / "nbgrader_config.py")
        shutil.copytree(lab_notebook(lab).parent, root / "source" / lab,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        submissions = {"instructor": lab_notebook(lab), "untouched": lab_notebook(lab, release=True)}
        if lab in CORPORA:
            corpus = Path(__file__).resolve().parent / "bad_submissions" / CORPORA[lab]
            submissions.update({p.name.removesuffix(".nb.json"): p for p in sorted(corpus.glob("*.nb.json"))})
        for student, path in submissions.items():
            dest = root / "submitted" / student / lab / f"{lab}.ipynb"
            dest.parent.mkdir(parents=True)
            shutil.copy2(path, dest)
        for student, answers in EDITED.get(lab, {}).items():
            dest = root / "submitted" / student / lab / f"{lab}.ipynb"
            dest.parent.mkdir(parents=True)
            nb = json.loads(lab_notebook(lab).read_text(encoding="utf-8"))
            dest.write_text(json.dumps(with_solutions(nb, answers)), encoding="utf-8")
        rows = {r.student: r for r in teach.grade(root, timeout=900, feedback=False, verbose=False, jobs=2)}
        done[lab] = (root, rows)
        return done[lab]

    return grade


# ------------------------------------------------------------------------------------------------
# Running on several workers (pytest-xdist, `make test`): a session fixture is built once per worker,
# so every test that uses a lab's graded course runs on the worker that grades it (an ``xdist_group``,
# honoured by ``--dist loadgroup``): each lab is still graded once per run. A test that uses
# ``graded_lab`` names its lab as the parameter ``lab``, so its group is known before it runs. (The
# labs' kernels are not grouped: executing their cells costs about 1 s of CPU per worker.)
#
# Order: the work units (a group, or one test) that take longest are sent first, longest first (LONGEST),
# then the other slow tests, then the fast ones, so that no long unit starts last while the other workers
# have nothing left to do (a worker is sent its next unit while it still runs its current one).

# Rough seconds of each (per test of a parametrised one; a group's sum for a group), from the fresh-clone CI of
# 2026-11-27 (3 workers on the 2-core machine, its 20 slowest tests) and the measurements in the commits that
# changed them since. Only the order matters: a rough figure does no harm. (xdist would put the groups with the
# most tests first instead: `make test` passes --no-loadscope-reorder so that this order is the one sent.)
LONGEST = {
    "graded-lab4_collectives": 300,  # the deadlocking ring waits out 150 s of launcher deadlines
    "graded-lab5_attention": 215,
    "graded-lab2_tiled_matmul": 185,
    "slurm": 160,
    "test_lab_pipeline.py::test_bad_submission_corpus": 160,
    "graded-lab3_fusion": 140,
    "test_colab.py::test_setup_cell_and_first_exercise_in_a_fresh_colab_like_venv": 130,
    "graded-lab1_roofline": 75,
    "graded-lab6_profiling": 60,
    "test_lab_pipeline.py::test_nbval_lax_passes_over_instructor_and_release_notebooks": 60,
    "test_learner_mistakes.py::test_each_mistake_costs_its_exercise_and_names_itself": 50,
    "test_chapter_notebooks.py::test_part1_notebooks_execute_on_a_cpu": 110,  # five Part I notebooks, one kernel each
    "test_trusted.py::test_lab4_ring_attacks_earn_no_performance_credit_on_two_gloo_ranks": 20,
}


def work_unit(item: pytest.Item) -> str:
    """The name LONGEST knows ``item``'s work unit by: its xdist group, else ``file::test`` (every parameter)."""
    marker = item.get_closest_marker("xdist_group")
    if marker:
        return marker.args[0] if marker.args else marker.kwargs["name"]
    return f"{item.path.name}::{getattr(item, 'originalname', item.name)}"


def _order(item: pytest.Item) -> tuple[int, float]:
    """Sort key: the longest units first, then the other slow tests, the fast ones last."""
    if work_unit(item) in LONGEST:
        return (0, -LONGEST[work_unit(item)])
    return (1, 0.0) if item.get_closest_marker("slow") else (2, 0.0)


def xdist_group_of(item: pytest.Item) -> str | None:
    """The worker group of ``item``: ``graded-<lab>`` for a test of a lab's graded course, else None."""
    if "graded_lab" not in item.fixturenames:
        return None
    params = getattr(item, "callspec", None)
    lab = params.params.get("lab") if params else None
    if not isinstance(lab, str):
        raise pytest.UsageError(f"{item.nodeid} uses graded_lab: it must take its lab as the parameter `lab` "
                                "(@pytest.mark.parametrize(\"lab\", [...])), so its worker group is known")
    return f"graded-{lab}"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = xdist_group_of(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike: the collections stay identical
        items.sort(key=_order)
