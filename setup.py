"""Packaging details pyproject.toml cannot say: the recorded measurements ship inside the package.

``data/measurements/`` (outside the ``mlsys`` folder, where maintainers and the GPU runs write it)
is installed as ``mlsys/_measurements/``, so an installed course (pip, Colab) shows the recorded
figures; ``mlsys.datapaths.measurements_dir()`` finds either copy. Likewise ``labs/release/<lab>/perf.toml``
ships as ``mlsys/_labs/<lab>/perf.toml``, where ``mlsys.grader.decide.trusted.find_spec`` finds it last.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["mlsys", "mlsys.*"]), "mlsys._measurements", "mlsys._labs"],
    package_dir={"mlsys._measurements": "data/measurements", "mlsys._labs": "labs/release"},
    package_data={"mlsys": ["data/*.toml", "data/*.json"],
                  "mlsys._measurements": ["*.json", "*/*.json", "*/*/*.json"],
                  # the labs' performance specs: a learner's GPU previews the speed cells from the installed
                  # package alone (Colab, a notebook with no course checkout beside it)
                  "mlsys._labs": ["*/perf.toml"]},
)
