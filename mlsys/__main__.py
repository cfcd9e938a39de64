"""``python -m mlsys``: see :mod:`mlsys.cli`."""

from .cli import main

raise SystemExit(main())
