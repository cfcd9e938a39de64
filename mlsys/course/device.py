"""The device switch every lab's and chapter's first cell calls (``mlsys.course.device.setup()``).

It lives in :mod:`mlsys.runtime.device`, which :mod:`mlsys.bench` uses too; this module re-exports it
so the course's pages keep one short, stable name.
"""

from __future__ import annotations

from ..runtime.device import default_device, fake_timer, has_cuda, pick_device, setup, triton_interpreted

__all__ = ["has_cuda", "setup", "default_device", "triton_interpreted", "pick_device", "fake_timer"]
