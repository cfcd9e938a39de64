"""One module per experiment; see :mod:`mlsys.bench.experiment` for what a module provides."""
