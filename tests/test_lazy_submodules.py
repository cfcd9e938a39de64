"""Lazy submodules (mlsys.runtime.lazy): every module on disk is reachable after a bare import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import mlsys
from mlsys.runtime.lazy import submodules

PKG = Path(mlsys.__file__).parent


@pytest.mark.parametrize("package", ["mlsys", "mlsys.labkit", "mlsys.book", "mlsys.grader",
                                     "mlsys.grader.learnerside", "mlsys.grader.clean", "mlsys.grader.decide",
                                     "mlsys.runtime"])
def test_all_names_every_public_module_on_disk(package):
    folder = PKG.joinpath(*package.split(".")[1:])
    on_disk = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")}
    on_disk |= {p.parent.name for p in folder.glob("*/__init__.py") if not p.parent.name.startswith("_")}
    module = __import__(package, fromlist=["_"])
    assert on_disk <= set(module.__all__), f"{package}.__all__ misses {sorted(on_disk - set(module.__all__))}"
    assert set(submodules(module.__path__)) == on_disk


def test_a_module_added_after_the_old_lists_loads_by_attribute():
    # slurm, rowstore (course) and torus, tco (models) were missing from the hand-written lists
    code = ("import mlsys; print(mlsys.grader.slurm.__name__, mlsys.grader.rowstore.__name__, "
            "mlsys.torus.__name__, mlsys.runtime.paths.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["mlsys.grader.slurm", "mlsys.grader.rowstore", "mlsys.torus", "mlsys.runtime.paths"]


def test_private_modules_and_unknown_names_are_not_attributes():
    import mlsys.bench.experiments as experiments

    assert "__main__" not in mlsys.__all__ and "_matmul" not in submodules(experiments.__path__)
    with pytest.raises(AttributeError, match="module 'mlsys.grader' has no attribute 'no_such_module'"):
        mlsys.grader.no_such_module  # noqa: B018


def test_the_package_lists_its_own_names_first():
    assert mlsys.__all__[:3] == ["ureg", "Q_", "__version__"]
    assert dir(mlsys) == sorted(mlsys.__all__)
