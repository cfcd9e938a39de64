"""Workers forked instead of started: on a CPU grader with the fake timer, a process that has imported torch (and
Triton) once forks each :mod:`mlsys.grader.clean.perfworker` from itself instead of starting a fresh interpreter
that imports them again (about 2 CPU-seconds a worker).

Two processes fork workers, each holding nothing of the learner's: the verdict its clean workers
(:mod:`mlsys.grader.decide.perfboxes`), and the launcher in the learner's sandbox the learner's workers, before any
answer cell (:mod:`mlsys.grader.clean.ranks`). ``MLSYS_GRADER_FORK_CLEAN=0`` starts every worker afresh.
"""

from __future__ import annotations

import glob
import os
import sys

from mlsys.runtime.processes import close_all_but

FORK_ENV = "MLSYS_GRADER_FORK_CLEAN"
"""``0``: start every worker afresh, even where it could be forked (:func:`may_fork`)."""


def may_fork(fake: bool) -> bool:
    """Whether a worker may be forked from this process: only with the fake timer on a machine without an NVIDIA
    device (a CUDA driver does not survive a fork), forking not turned off, and Triton, if imported here, running
    under its interpreter as the worker will."""
    if not fake or glob.glob("/dev/nvidia*") or os.environ.get(FORK_ENV, "1") == "0":
        return False
    return "triton" not in sys.modules or os.environ.get("TRITON_INTERPRET") == "1"


def fork_worker(args: list[str], stdin: int, stdout: int, region: int | None, *, own_session: bool,
                quiet: bool) -> int:
    """Fork a worker that runs ``perfworker.main(args[0])`` as if started with ``args`` (role and flags); its pid.

    The child reads ``stdin`` and writes ``stdout`` as its standard input and output, keeps its standard error
    (``quiet``: sends it to ``/dev/null``) and the shared ``region`` descriptor, and closes every other
    descriptor it inherited; ``own_session``: it starts a session of its own, as ``start_new_session`` does."""
    pid = os.fork()
    if pid:
        return pid
    code = 1  # the child: never returns
    try:
        if own_session:
            os.setsid()
        os.dup2(stdin, 0)
        os.dup2(stdout, 1)
        if quiet:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        close_all_but({0, 1, 2} | ({region} if region is not None else set()))
        sys.argv = [sys.argv[0], *args]
        from mlsys.grader.clean import perfworker

        code = perfworker.main(args[0])
    finally:
        os._exit(code)
