"""Packaging details pyproject.toml cannot say: the recorded measurements ship inside the package.

``data/measurements/`` (outside the ``mlsys`` folder, where maintainers and the GPU runs write it)
is installed as ``mlsys/_measurements/``, so an installed course (pip, Colab) shows the recorded
figures; ``mlsys.datapaths.measurements_dir()`` finds either copy.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["mlsys", "mlsys.*"]), "mlsys._measurements"],
    package_dir={"mlsys._measurements": "data/measurements"},
    package_data={"mlsys": ["data/*.toml", "data/*.json"],
                  "mlsys._measurements": ["*.json", "*/*.json", "*/*/*.json"]},
)
