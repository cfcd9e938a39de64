"""``python -m mlsys.bench [--out PATH] [--quick]``: the same as ``python -m mlsys measure``."""

from . import main

raise SystemExit(main())
