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
