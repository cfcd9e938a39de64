"""The device switch every lab's and chapter's first cell calls (``mlsys.labkit.device.setup()``).

The device logic lives in :mod:`mlsys.runtime.device`, which :mod:`mlsys.bench` uses too. The course's
:func:`setup` adds two things a learner's notebook needs: a check of the installed torch, Triton and
NumPy against the supported ranges (:mod:`mlsys.labkit.versions`), and short errors: in IPython, a
failing check (a :class:`mlsys.labkit.grading.GradingError`) shows its message, not the 20-35 lines of
traceback through the course's checks that lead to it (:func:`full_traceback` prints them).
"""

from __future__ import annotations

import sys
from typing import Any

from mlsys.runtime.device import default_device, fake_timer, has_cuda, pick_device, triton_interpreted
from mlsys.runtime.device import setup as _device_setup

__all__ = ["has_cuda", "setup", "default_device", "triton_interpreted", "pick_device", "fake_timer",
           "short_errors", "full_traceback"]


def setup(*, check_versions: bool = True) -> str:
    """Prepare the process for Triton kernels; return ``"cuda"`` or ``"cpu"`` (see :mod:`mlsys.runtime.device`).

    Also prints a plain notice for each installed version outside the supported range, and, in IPython,
    installs :func:`short_errors`.
    """
    device = _device_setup()
    if check_versions:
        from mlsys.labkit.versions import check

        check()
    short_errors()
    return device


def _short(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> list[str]:
    """IPython's handler for a check's error: its message first, the traceback left out (2 lines)."""
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb  # for full_traceback()
    red, reset = "\x1b[0;31m", "\x1b[0m"
    stb = [f"{red}{etype.__name__}{reset}: {value}",
           "(the check's traceback is hidden: mlsys.labkit.device.full_traceback() prints it)"]
    shell._showtraceback(etype, value, stb)  # IPython's run_code shows nothing itself; in Jupyter: an error output
    return stb


def short_errors() -> bool:
    """In IPython, show a failing check's message without its traceback; True if installed.

    Only :class:`mlsys.labkit.grading.GradingError` (the checks' own error) is shortened: an error in the
    learner's code keeps its full traceback, which points at the learner's line. The cell still fails as
    before (the kernel reports an error, nbgrader scores the cell 0).
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return False
    from mlsys.labkit.grading import GradingError

    shell.set_custom_exc((GradingError,), _short)
    return True


def full_traceback() -> None:
    """Print the full traceback of the last error that :func:`short_errors` shortened."""
    import traceback

    value = getattr(sys, "last_value", None)
    if value is None:
        print("no error to show")
        return
    traceback.print_exception(type(value), value, value.__traceback__, file=sys.stdout)
