"""nbgrader's own paths (``nbgrader autograde``, formgrader's Autograde button) with the course's sandbox.

``make grade`` sets ``MLSYS_SANDBOX`` before it calls nbgrader, and ``labs/nbgrader_config.py`` then
uses :class:`mlsys.grader.sandboxed_execute.SandboxedExecute`. A teacher who runs nbgrader directly
(or presses Autograde in JupyterHub's formgrader) has no ``MLSYS_SANDBOX``; the config then uses
:class:`DirectSandboxedExecute`, which prepares the same settings itself, once per nbgrader process:
the ``mlsys`` site built into a private temporary folder, the lab's ``perf.toml`` for the trusted
performance process, CUDA timing where a GPU is present. Student code therefore runs in the same
bubblewrap sandbox and performance cells get the same trusted verdicts. Where bubblewrap cannot run,
it refuses, naming ``make grade``; nbgrader's plain ``Execute`` is never used.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mlsys.grader import sandbox
from mlsys.grader.sandboxed_execute import SandboxedExecute

__all__ = ["DirectSandboxedExecute", "REFUSAL"]

REFUSAL = ("refusing to run student code outside the course's sandbox: {why}. Grade with `make grade` "
           "(python -m mlsys.grader.teach grade), which runs every submission in bubblewrap, or install "
           "bubblewrap on this machine so that nbgrader autograde and formgrader's Autograde button use it too")

_LOCK = threading.Lock()
_SITE: dict[str, Path] = {}


def _shared_site() -> Path:
    """The read-only mlsys site, built once per process into a private temporary folder."""
    with _LOCK:
        if "site" not in _SITE:
            tmp = Path(tempfile.mkdtemp(prefix="mlsys-nbgrader-"))
            atexit.register(shutil.rmtree, tmp, True)
            site = sandbox.build_site(tmp / "site")
            for p in site.rglob("*"):
                if p.is_file():
                    p.chmod(0o444)
            (tmp / "scratch").mkdir()
            _SITE["site"], _SITE["scratch"] = site, tmp / "scratch"
        return _SITE["site"]


def _course_root(resources: dict[str, Any]) -> Path:
    """The course root: ``submitted/<student>/<lab>`` is the notebook's folder, three levels below it."""
    path = Path(resources.get("metadata", {}).get("path") or ".").resolve()
    return path.parents[2] if len(path.parents) > 2 else Path.cwd()


class DirectSandboxedExecute(SandboxedExecute):
    """:class:`SandboxedExecute` with settings of its own, for nbgrader run without ``make grade``."""

    def preprocess(self, nb: Any, resources: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        if os.environ.get("MLSYS_SANDBOX"):  # make grade's own settings win
            return super().preprocess(nb, resources)
        try:
            sandbox.check()
        except sandbox.SandboxUnavailable as exc:
            raise RuntimeError(REFUSAL.format(why=str(exc).splitlines()[0])) from None
        from mlsys.grader.teach import _perf_cases, _perf_mode

        lab = str(resources.get("nbgrader", {}).get("assignment") or "")
        root = _course_root(resources)
        site = _shared_site()
        perf = _perf_mode(None)
        report = Path(tempfile.mkstemp(prefix="report-", suffix=".json", dir=_SITE["scratch"])[1])
        settings = {"mode": "bwrap", "site": str(site), "scratch": str(_SITE["scratch"]), "wall": 3600,
                    "perf": perf, "cases": _perf_cases(root, lab) if lab else {}, "report": str(report),
                    "limits": asdict(sandbox.Limits()), "gpu": perf == "cuda"}
        with _LOCK:  # SandboxedExecute reads its settings from the environment
            os.environ["MLSYS_SANDBOX"] = json.dumps(settings)
            try:
                return super().preprocess(nb, resources)
            finally:
                os.environ.pop("MLSYS_SANDBOX", None)
                report.unlink(missing_ok=True)
