"""A GPU kernel that never finishes ends its process, visibly, within :data:`GPU_LIMIT` seconds.

On a CPU a check runs the learner's kernel in a child process
(:func:`mlsys.labkit.grading.run_isolated`), which is stopped after a CPU or wall-clock limit. On a
GPU that is not possible: a forked child loses the CUDA context, and a kernel that never finishes
cannot be interrupted. The host thread waits in the driver (a synchronize, a copy back to the host),
and Ctrl-C or nbclient's interrupt is seen only when that call returns, which it never does. So a
call that runs on the GPU in this process is watched from a thread (:func:`watch`):

* every :data:`HEARTBEAT` seconds it prints that the call is still running, and when the process
  will be ended;
* after :data:`GPU_LIMIT` seconds it prints :data:`MARK` with the check's name and the likely cause,
  then ends the process with exit code :data:`EXIT_CODE`. That is the only way to stop the kernel:
  the driver frees the GPU when the process is gone.

In a learner's notebook, Jupyter then restarts the kernel, and the message is the cell's last
output. At grading, :mod:`mlsys.grader.learnerside.cellrunner` sees the kernel die in that cell. It starts a
fresh kernel, runs the cells before that one again (their outputs are discarded) and goes on, so
the hang costs that cell's points only.

PyTorch and Triton release the GIL while they wait for the GPU, so the watching thread runs.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator

__all__ = ["GPU_LIMIT", "HEARTBEAT", "MARK", "EXIT_CODE", "watch", "hung_message"]

GPU_LIMIT = 120.0
"""Seconds a watched call may run. The labs' checks call kernels on small inputs: milliseconds on a
GPU, plus Triton's compilation of a few configurations (seconds to tens of seconds on a busy
machine)."""

HEARTBEAT = 15.0
"""Seconds between the "still running" lines."""

MARK = "GPU kernel hung"
"""Words the watchdog's message starts with; :mod:`mlsys.grader.learnerside.cellrunner` looks for them."""

EXIT_CODE = 86
"""Exit code of a process the watchdog ended (arbitrary, distinct from signals and Python's 1)."""


def hung_message(label: str, seconds: float) -> str:
    """The message printed before the process ends (one line; starts with :data:`MARK`)."""
    return (f"{MARK} in {label}: the call did not finish within {seconds:g} s (the check's own work takes "
            "milliseconds on a GPU, plus compilation). A kernel that never finishes cannot be interrupted, so "
            "this process ends now (exit code 86) and frees the GPU. Likely cause: an endless loop in the "
            "kernel (a loop counter that never reaches its bound, a while loop on a value that never changes) "
            "or a grid far too large. Fix it, restart the kernel and run the cells again.")


@contextlib.contextmanager
def watch(label: str, *, limit: float | None = None, heartbeat: float | None = None,
          active: bool = True) -> Iterator[None]:
    """Run the body under the watchdog: "still running" lines, then the process ends after ``limit`` s.

    ``limit`` and ``heartbeat`` default to :data:`GPU_LIMIT` and :data:`HEARTBEAT`, read when the
    body starts. With ``active`` false the body runs unwatched. Output goes to stdout (nbgrader scores
    any stderr as a failure).
    """
    if not active:
        yield
        return
    limit = GPU_LIMIT if limit is None else limit
    heartbeat = HEARTBEAT if heartbeat is None else heartbeat
    done = threading.Semaphore(0)  # released when the body ends
    start = time.monotonic()

    def run() -> None:
        next_beat = start + heartbeat
        while True:
            now = time.monotonic()
            if done.acquire(timeout=max(0.0, min(next_beat, start + limit) - now)):
                return
            now = time.monotonic()
            if now - start >= limit:
                print(hung_message(label, limit), flush=True)
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    time.sleep(1.0)  # a Jupyter kernel sends its output from another thread: let it go out
                os._exit(EXIT_CODE)
            print(f"  ... {label} still running on the GPU after {now - start:.0f} s (this process ends at "
                  f"{limit:g} s if it does not finish: a GPU kernel cannot be interrupted)", flush=True)
            next_beat = now + heartbeat

    thread = threading.Thread(target=run, name=f"mlsys-watchdog: {label}"[:60], daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.release()
