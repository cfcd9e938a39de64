"""Which device code runs on, and Triton's interpreter on machines without a GPU.

Every lab and chapter starts with ``mlsys.course.device.setup()``: on a machine without CUDA it sets
``TRITON_INTERPRET=1`` *before* Triton is imported, so the same kernels run on a laptop CPU
(slowly, element by element in NumPy) and on a GPU.
"""

from __future__ import annotations

import os
import sys

__all__ = ["has_cuda", "setup", "default_device", "triton_interpreted"]


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
        print("warning: triton was imported before mlsys.course.device.setup(); restart the kernel "
              "and call setup() first so kernels run under the interpreter", file=sys.stderr)
    os.environ["TRITON_INTERPRET"] = "1"
    return "cpu"


def triton_interpreted() -> bool:
    """True if Triton kernels run under the CPU interpreter in this process."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def default_device() -> str:
    """``"cuda"`` when a GPU is usable by Triton kernels here, else ``"cpu"``."""
    return "cpu" if triton_interpreted() or not has_cuda() else "cuda"
