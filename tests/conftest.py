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


# ------------------------------------------------------------------------------------------------
# The labs' reference kernels, from the instructor notebooks' own cells, executed once per session
# when a test first asks for them (never at import: a broken notebook fails its tests, it does not
# stop collection). The test modules call mlsys.course.device.setup() before Triton is imported.

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
    from mlsys.runtime.notebook import code_cells
    from mlsys.runtime.paths import lab_notebook

    tagged = [c.grade_id for c in code_cells(lab_notebook("lab2_tiled_matmul")) if "lab2-kernel" in c.tags]
    return _notebook_module("lab2_tiled_matmul", ["setup", "add_kernel", *tagged], "lab2_kernels")


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
           "lab5_attention": "lab5"}


@pytest.fixture(scope="session")
def graded_lab(tmp_path_factory):
    """``graded_lab(lab)`` -> (course root, {student: Row}) for ``lab``, graded once per session."""
    import shutil
    from pathlib import Path

    from mlsys.course import teach
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
        rows = {r.student: r for r in teach.grade(root, timeout=900, feedback=False, verbose=False, jobs=2)}
        done[lab] = (root, rows)
        return done[lab]

    return grade
