"""Which device code runs on, Triton's interpreter on machines without a GPU, and CI's fake timer.

Every lab and chapter starts with ``mlsys.labkit.device.setup()`` (this module, re-exported for the
course's pages): on a machine without CUDA it sets
``TRITON_INTERPRET=1`` *before* Triton is imported, so the same kernels run on a laptop CPU
(slowly, element by element in NumPy) and on a GPU.
"""

from __future__ import annotations

import os
import sys

__all__ = ["has_cuda", "setup", "default_device", "triton_interpreted", "pick_device", "fake_timer", "FAKE_TIMER"]

#: the environment variable that selects the deterministic fake timer (CI grades performance cells with it)
FAKE_TIMER = "MLSYS_FAKE_TIMER"


def has_cuda() -> bool:
    """True if torch is importable and sees a CUDA device.

    On Linux without an NVIDIA device node CUDA cannot be present, so the answer is False without
    importing torch (which keeps graders and CLI start-up fast on CPU machines).
    """
    if sys.platform == "linux" and "torch" not in sys.modules and not any(
            os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")):
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def setup() -> str:
    """Prepare the process for Triton kernels and return ``"cuda"`` or ``"cpu"``.

    Without CUDA this sets ``TRITON_INTERPRET=1``. Triton reads the variable when it is first
    imported, so call this before ``import triton``; a warning is printed if it was too late.
    """
    if has_cuda() and os.environ.get("TRITON_INTERPRET") != "1":
        return "cuda"
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        print("warning: triton was imported before mlsys.labkit.device.setup(); restart the kernel "
              "and call setup() first so kernels run under the interpreter", file=sys.stderr)
    os.environ["TRITON_INTERPRET"] = "1"
    return "cpu"


def triton_interpreted() -> bool:
    """True if Triton kernels run under the CPU interpreter in this process."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def default_device() -> str:
    """``"cuda"`` when a GPU is usable by Triton kernels here, else ``"cpu"``."""
    return "cpu" if triton_interpreted() or not has_cuda() else "cuda"


def pick_device(requested: str = "auto") -> str:
    """``"cuda"`` if requested or available (``"auto"``), else ``"cpu"``; on a CPU, set up the
    Triton interpreter (``TRITON_INTERPRET=1``) before Triton is imported.

    Raises ``ValueError`` for anything but ``"auto"``, ``"cpu"`` or ``"cuda"``, and ``RuntimeError``
    when ``"cuda"`` is asked for on a machine without one.
    """
    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda', got {requested!r}")
    cuda = has_cuda()
    if requested == "cuda" and not cuda:
        raise RuntimeError("--device cuda was asked for, but torch sees no CUDA device")
    if requested == "cpu" or not cuda:
        os.environ["TRITON_INTERPRET"] = "1"
        return "cpu"
    return "cuda"


def fake_timer() -> bool:
    """True if ``MLSYS_FAKE_TIMER=1``: performance cells are graded with the deterministic fake timer (CI)."""
    return os.environ.get(FAKE_TIMER) == "1"
