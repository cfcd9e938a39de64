"""nbgrader run by the course's grader: one command at a time with a log and a time limit (every live one
ended on an interrupt), a scratch course of the labs, their generated assignments, the students registered.

Moved out of :mod:`mlsys.grader.teach` (issue 48, "a size it can keep"); ``teach`` re-exports its names.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from mlsys.grader import gradebook, nbgraderfork
from mlsys.grader.slots import Slot
from mlsys.runtime.paths import checkout
from mlsys.runtime.processes import kill_tree

_LIVE: set[int] = set()  # nbgrader processes running now (killed, with everything below them, on Ctrl-C)


_LIVE_LOCK = threading.Lock()


def base_env() -> dict[str, str]:
    """The environment of every nbgrader command: this one's, with the grader's own mlsys first on the path
    (nbgrader_config.py imports its sandboxed executor) whatever the working folder, the ``alembic`` script of
    nbgrader's own environment first on ``PATH``, a fixed hash seed and no display."""
    env = dict(os.environ, PYTHONHASHSEED="0", MPLBACKEND="Agg", PYDEVD_DISABLE_FILE_VALIDATION="1")
    env["PYTHONPATH"] = os.pathsep.join([str(checkout()), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _run(args: list[str], cwd: Path, timeout: float, log: Path,
         env: dict[str, str] | None = None, slot: Slot | None = None) -> tuple[int | None, str]:
    """Run ``python -m nbgrader ARGS`` in its own process group; (returncode or None on timeout, log tail).

    ``slot`` pins it (and the sandboxes it starts) to that slot's CPU cores and GPU. Within a
    :func:`mlsys.grader.nbgraderfork.session` the command is a fork of the session's pre-imported nbgrader.
    """
    env = {**base_env(), **(env or {}), **(slot.env() if slot is not None else {})}
    server = nbgraderfork.active()
    if server is not None:
        try:
            return _forked(server, args, cwd, timeout, log, env, slot)
        except OSError:  # the server ended: this command starts afresh
            pass
    argv = [*(slot.prefix() if slot is not None else []), sys.executable, "-m", "nbgrader", *args]
    with open(log, "ab") as fh:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        with _LIVE_LOCK:
            _LIVE.add(proc.pid)
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            kill_tree(proc.pid)
            proc.wait()
            with _LIVE_LOCK:
                _LIVE.discard(proc.pid)
    return rc, _tail(log)


def _forked(server: nbgraderfork.ForkServer, args: list[str], cwd: Path, timeout: float, log: Path,
            env: dict[str, str], slot: Slot | None) -> tuple[int | None, str]:
    """:func:`_run` through the session's fork server: the same command, log, time limit and ending."""
    pid = server.spawn(args, cwd, env, log, sorted(slot.cores) if slot is not None else None)
    with _LIVE_LOCK:
        _LIVE.add(pid)
    rc: int | None = None
    try:
        rc = server.wait(pid, timeout)
    finally:
        kill_tree(pid)  # what it left in its session, or all of it on a timeout
        if rc is None:
            server.wait(pid, 60)  # reaped by the server once killed
        with _LIVE_LOCK:
            _LIVE.discard(pid)
    return rc, _tail(log)


def _tail(log: Path) -> str:
    with open(log, "rb") as fh:
        fh.seek(max(0, log.stat().st_size - 20_000))
        return fh.read().decode("utf-8", "replace")


def _kill_live() -> None:
    """End every nbgrader process this run started and everything below it (an interrupted run)."""
    with _LIVE_LOCK:
        pids = list(_LIVE)
    for pid in pids:
        kill_tree(pid)


def _scratch_course(root: Path, labs: list[str], tmp: Path) -> Path:
    course = tmp / "course"
    (course / "source").mkdir(parents=True)
    shutil.copy2(root / "nbgrader_config.py", course / "nbgrader_config.py")
    for lab in labs:
        # a run of the notebook leaves outputs beside it (Lab 6's profiles, *_trace.json): never part of a release
        shutil.copytree(root / "source" / lab, course / "source" / lab,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*_trace.json"))
    return course


def _generate(course: Path, lab: str, timeout: float = 300, db: str | None = None) -> None:
    """``nbgrader generate_assignment`` in the scratch ``course``, registering the lab in ``db`` (default: the
    scratch course's own gradebook)."""
    rc, out = _run(["generate_assignment", lab, "--force", "--db", db or f"sqlite:///{course / 'gradebook.db'}"],
                   course, timeout, course / f"generate_{lab}.log")
    if rc != 0:
        raise RuntimeError(f"nbgrader generate_assignment {lab} failed (exit {rc}):\n{out[-4000:]}")


def seed_gradebook(root: Path, course: Path) -> bool:
    """Give a course without a gradebook the scratch ``course``'s (its labs just generated, no student in it).

    That gradebook holds what :func:`register` would write into an empty ``root/gradebook.db``: the same
    ``generate_assignment`` over the same sources, which cost a second nbgrader and alembic start (about 3.5
    CPU-seconds per grading run). Created exclusively: a gradebook that exists (formgrader's scores, another
    run's) is never replaced. Returns whether it was seeded."""
    src, dest = Path(course) / "gradebook.db", Path(root) / "gradebook.db"
    if not src.is_file() or dest.exists():
        return False
    tmp = dest.with_name(f".gradebook.db.{os.getpid()}.{threading.get_ident()}")
    shutil.copyfile(src, tmp)
    try:
        os.link(tmp, dest)  # fails if another run created one meanwhile: theirs is kept
    except OSError:  # that, or a filesystem without hard links: register() writes it after grading instead
        return False
    finally:
        tmp.unlink()
    return True


def register(root: Path, labs: list[str]) -> list[str]:
    """Register ``labs`` in the course gradebook ``root/gradebook.db`` (nbgrader's assignment, notebook and
    cells), so that formgrader's Autograde button and ``nbgrader autograde`` work on labs released by
    ``make release``. Returns a warning per lab that could not be registered (e.g. its cells changed after
    submissions were recorded: nbgrader keeps the gradebook as it is then)."""
    warnings = []
    with tempfile.TemporaryDirectory(prefix="mlsys-register-") as tmp:
        course = _scratch_course(root, labs, Path(tmp))
        for lab in labs:
            try:
                _generate(course, lab, db=gradebook.db_url(root))
            except RuntimeError as exc:
                last = [ln for ln in str(exc).splitlines() if ln.strip()][-1:] or [""]
                warnings.append(f"{lab} is not registered in {root / 'gradebook.db'}: {last[0][:300]}")
    return warnings
