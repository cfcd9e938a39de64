"""The learner's workers, one per rank: how the learner's sandbox (:mod:`mlsys.grader.learnerbox`) starts them.

``python -P -m mlsys.grader.clean.ranks IN:OUT:REGION[,...] [--fake]`` starts one learner worker
(:func:`mlsys.grader.clean.perfworker.main`) per descriptor triple, with IN as its standard input and OUT as
its standard output, and waits for them.

On a CPU grader with the fake timer (no ``/dev/nvidia*``: a CUDA driver does not survive a fork) the launcher
imports torch and Triton once and forks each worker from itself, instead of starting each afresh (about 2
CPU-seconds a rank). The launcher runs in the learner's sandbox before any answer cell, so a fork of it
inherits nothing a fresh worker would not have. ``MLSYS_GRADER_FORK_CLEAN=0`` starts every worker afresh.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

FORK_ENV = "MLSYS_GRADER_FORK_CLEAN"


def may_fork(fake: bool) -> bool:
    """Whether the workers may be forks of this process: the fake timer, no NVIDIA device, forking not off."""
    return fake and not glob.glob("/dev/nvidia*") and os.environ.get(FORK_ENV, "1") != "0"


def ranks(spec: str, fake: bool) -> int:
    """Start a learner worker per ``IN:OUT:REGION`` triple of ``spec`` (REGION -1: none) and wait for them all;
    the largest exit status (negative: the signal that ended one)."""
    triples = [tuple(int(x) for x in part.split(":")) for part in spec.split(",")]
    forking = may_fork(fake)
    if forking:
        os.environ["TRITON_INTERPRET"] = "1"  # as perfworker.main sets it under --fake, before Triton is imported
        import torch  # noqa: F401 - imported once, here, not again in each worker
        import triton  # noqa: F401
    pids: list[int] = []
    procs: list[subprocess.Popen] = []
    for fd_in, fd_out, shm in triples:
        args = ["learner"] + (["--fake"] if fake else []) + ([f"--shm={shm}:{os.fstat(shm).st_size}"] if shm >= 0 else [])
        if forking:
            pids.append(_fork(args, fd_in, fd_out, shm))
        else:
            procs.append(subprocess.Popen([sys.executable, "-P", "-m", "mlsys.grader.clean.perfworker", *args],
                                          stdin=fd_in, stdout=fd_out, pass_fds=(shm,) if shm >= 0 else ()))
        for fd in (fd_in, fd_out, *((shm,) if shm >= 0 else ())):
            os.close(fd)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids] + [p.wait() for p in procs]
    return max(codes, default=0)


def _fork(args: list[str], fd_in: int, fd_out: int, shm: int) -> int:
    """A learner worker forked from this process: IN and OUT as its standard input and output, its standard error
    kept (as a started worker inherits it), no other descriptor but the region; its pid."""
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.dup2(fd_in, 0)
            os.dup2(fd_out, 1)
            prev = -1
            for fd in sorted({0, 1, 2} | ({shm} if shm >= 0 else set())) + [os.sysconf("SC_OPEN_MAX")]:
                if fd > prev + 1:  # close everything between the descriptors kept
                    os.closerange(prev + 1, fd)
                prev = fd
            sys.argv = [sys.argv[0], *args]
            from mlsys.grader.clean import perfworker

            code = perfworker.main("learner")
        finally:
            os._exit(code)
    return pid


if __name__ == "__main__":
    sys.exit(ranks(sys.argv[1], "--fake" in sys.argv))
