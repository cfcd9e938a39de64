"""The learner's workers, one per rank: how the learner's sandbox (:mod:`mlsys.grader.learnerbox`) starts them.

``python -P -m mlsys.grader.clean.ranks IN:OUT:REGION[,...] [--fake]`` starts one learner worker
(:func:`mlsys.grader.clean.perfworker.main`) per descriptor triple, with IN as its standard input and OUT as
its standard output, and waits for them.

On a CPU grader with the fake timer (no ``/dev/nvidia*``: a CUDA driver does not survive a fork) the launcher
imports torch and Triton once and forks each worker from itself, instead of starting each afresh (about 2
CPU-seconds a rank). The launcher runs in the learner's sandbox before any answer cell, so a fork of it
inherits nothing a fresh worker would not have (:mod:`mlsys.grader.clean.workerfork`).
"""

from __future__ import annotations

import os
import subprocess
import sys

from mlsys.grader.clean.workerfork import fork_worker, may_fork


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
            pids.append(fork_worker(args, fd_in, fd_out, shm if shm >= 0 else None, own_session=False, quiet=False))
        else:
            procs.append(subprocess.Popen([sys.executable, "-P", "-m", "mlsys.grader.clean.perfworker", *args],
                                          stdin=fd_in, stdout=fd_out, pass_fds=(shm,) if shm >= 0 else ()))
        for fd in (fd_in, fd_out, *((shm,) if shm >= 0 else ())):
            os.close(fd)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids] + [p.wait() for p in procs]
    return max(codes, default=0)


if __name__ == "__main__":
    sys.exit(ranks(sys.argv[1], "--fake" in sys.argv))
