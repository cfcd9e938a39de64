"""nbgrader's execution step, moved into a sandbox; performance cells scored by trusted code.

``make grade`` (:mod:`mlsys.grader.teach`) runs ``nbgrader autograde`` outside any sandbox: it
restores the test cells from the gradebook, scores the executed notebook and writes the gradebook,
none of which student code can reach. Only the execution is replaced. ``labs/nbgrader_config.py``
swaps nbgrader's ``Execute`` for :class:`SandboxedExecute` when ``MLSYS_SANDBOX`` (JSON, set by
teach) is in the environment:

1. the notebook (test cells restored; ``perf_*`` cells left out) and the submission's other files
   go into a fresh scratch folder; :mod:`mlsys.grader.learnerside.cellrunner` executes it in bubblewrap
   (:mod:`mlsys.grader.sandbox`) and streams each executed cell back, so a dead kernel or the
   wall-clock limit costs only the cells after it (they get an error output, hence zero);
2. where performance is graded here (CUDA present, or the fake timer selected), a second, fresh
   sandbox runs :mod:`mlsys.grader.decide.trusted` over the answer cells only, from an untouched copy of the
   submission, and each ``perf_*`` cell's output becomes its verdict (points as the cell's value, or
   an error with the reason); elsewhere the cell says :data:`mlsys.labkit.grading.NOT_GRADED`;
3. what happened (kernel death, time limit, perf verdicts) is written to the report file named in
   ``MLSYS_SANDBOX`` for teach's CSV row.

Settings (keys of ``MLSYS_SANDBOX``): ``mode`` ("bwrap" | "none"), ``site`` (read-only mlsys
install), ``scratch`` (parent of scratch folders), ``wall`` (seconds for the whole submission),
``perf`` ("off" | "cuda" | "fake"), ``cases`` (the lab's perf.toml as a dict), ``report`` (path),
``limits`` (:class:`mlsys.grader.sandbox.Limits` fields), ``gpu`` (pass the GPU into the sandbox).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from nbgrader.preprocessors import Execute

from mlsys.grader import scratch
from mlsys.grader.decide.trusted import answer_cells
from mlsys.grader.decide.verdict import METADATA_KEY, Verdict
from mlsys.grader.learnerside import kernelfork
from mlsys.grader.learnerside.testcells import answer_names, course_imports, grader_cells
from mlsys.grader.sandboxrun import run_in_sandbox, run_verdict
from mlsys.labkit.grading import NOT_GRADED
from mlsys.runtime.notebook import DEMO_NOTE, demo_ids, error_output, is_autograded

__all__ = ["SandboxedExecute", "run_in_sandbox", "answer_cells"]


def _nbg(cell: Any) -> dict[str, Any]:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def _is_test(cell: Any) -> bool:
    return is_autograded(_nbg(cell))


def _demo_cells(nb: Any, source_nb: dict[str, Any]) -> set[int]:
    """Indices of the submission's demonstration cells, named by the instructor notebook (the submission's own
    metadata is never trusted): locked cells, restored from the gradebook, that grade nothing."""
    ids = demo_ids(source_nb.get("cells", []))
    return {i for i, c in enumerate(nb.cells) if c.cell_type == "code" and str(_nbg(c).get("grade_id", "")) in ids
            and _nbg(c).get("locked") and not _nbg(c).get("grade") and not _nbg(c).get("solution")}


def _copy_submission(src: Path | None, dest: Path) -> None:
    """The submission's files (no notebooks, no symbolic links) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    if src is None or not src.is_dir():
        return
    for p in src.rglob("*"):
        rel = p.relative_to(src)
        if p.is_symlink() or any(part.startswith(".") for part in rel.parts) or p.suffix == ".ipynb":
            continue
        if p.is_dir():
            (dest / rel).mkdir(parents=True, exist_ok=True)
        elif p.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dest / rel)


def _forked_kernels(job: dict[str, Any]) -> tuple[str, ...]:
    """The cell runner's arguments for kernels forked from a template (:mod:`mlsys.grader.learnerside.kernelfork`):
    torch imported before the job is read where the course imports it. Decided here, outside the sandbox, where
    ``MLSYS_GRADER_FORK_KERNEL`` and every NVIDIA device can be seen; none where kernels may not be forked."""
    if not kernelfork.may_fork():
        return ()
    return ("--preload", ",".join(kernelfork.preload_for(str(job.get("course_imports", "")))))


class SandboxedExecute(Execute):
    """nbgrader's Execute step, run in bubblewrap by :mod:`mlsys.grader.learnerside.cellrunner` (see the module doc)."""

    def preprocess(self, nb: Any, resources: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        import nbformat

        self._resources = resources
        settings = json.loads(os.environ.get("MLSYS_SANDBOX", "{}"))
        if settings.get("mode") not in ("bwrap", "none"):
            raise RuntimeError("SandboxedExecute: MLSYS_SANDBOX must name mode 'bwrap' or 'none' (set by `make grade`)")
        start = time.monotonic()
        deadline = start + float(settings.get("wall", 3600))
        report: dict[str, Any] = {"kernel_died": None, "timed_out": False, "not_run": 0, "perf": {}, "fatal": ""}
        src_dir = Path(resources.get("metadata", {}).get("path") or ".")
        root = Path(tempfile.mkdtemp(prefix="sub-", dir=settings.get("scratch")))
        mounted = settings.get("mode") == "bwrap" and scratch.scratch_fs(root)  # the submission's writes, capped in all
        try:
            self._execute(nb, settings, src_dir, root, deadline, report, nbformat)
        finally:
            if mounted:
                scratch.release_scratch(root)
            shutil.rmtree(root, ignore_errors=True)
            if settings.get("report"):
                Path(settings["report"]).write_text(json.dumps(report, indent=1), encoding="utf-8")
        return nb, resources

    def _execute(self, nb: Any, settings: dict[str, Any], src_dir: Path, root: Path, deadline: float,
                 report: dict[str, Any], nbformat: Any) -> None:
        perf_all = {i for i, c in enumerate(nb.cells) if _is_test(c) and str(_nbg(c).get("grade_id", "")).startswith("perf_")}
        # No perf_* cell runs in the notebook: the verdict process measures the ones the lab's perf.toml names; one it
        # does not name is "not measured" with that reason (issue 48: the in-notebook performance path is gone)
        perf_idx = perf_all
        work = root / "run"
        _copy_submission(src_dir, work)
        name = "notebook.ipynb"
        nbformat.write(nb, str(work / name))
        source_nb = _instructor_notebook(self._resources)
        demos = _demo_cells(nb, source_nb)
        if (source_nb.get("metadata", {}).get("mlsys", {}) or {}).get("test_cells") == "grader":
            # the lab's test cells run in the grader process, not in the kernel that ran the answers
            job_grader = {"grader_cells": sorted(i for i, c in enumerate(nb.cells) if _is_test(c) and i not in perf_idx),
                          "course_imports": course_imports(source_nb.get("cells", [])),
                          "course_cells": grader_cells(source_nb.get("cells", [])),
                          "answer_names": sorted(answer_names(source_nb.get("cells", []))),
                          "test_order": [str(_nbg(c).get("grade_id")) for c in source_nb.get("cells", []) if _is_test(c)]}
        else:
            job_grader = {}
        job = {**job_grader, "notebook": name, "skip": sorted(perf_idx | demos), "timeout": self.timeout,
               "interrupt_on_timeout": self.interrupt_on_timeout, "startup_timeout": self.startup_timeout,
               "error_on_timeout": self.error_on_timeout, "census": settings.get("mode") == "bwrap"}
        results, ended = run_in_sandbox("mlsys.grader.learnerside.cellrunner", job, work, settings, deadline=deadline,
                                        log=root / "cellrunner.log", args=_forked_kernels(job))
        got: dict[int, dict[str, Any]] = {}
        for item in results:
            if "index" in item:
                got[int(item["index"])] = item
            if item.get("fatal"):
                report["fatal"] = item["fatal"]
            if isinstance(item.get("stranger"), dict):
                report.setdefault("strangers", []).append(item["stranger"])
            if item.get("done") and item.get("kernel_died") is not None:
                report["kernel_died"] = _label(nb, item["kernel_died"])
        if ended == "timeout":
            report["timed_out"] = True
        why = ("not run: the submission reached its time limit of {wall:g} s before this cell; cells run before it "
               "keep their points" if ended == "timeout" else "not run: the notebook's process ended early ({fatal})")
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or i in perf_idx:
                continue
            if i in demos:
                cell.outputs = [nbformat.from_dict({"output_type": "stream", "name": "stdout", "text": DEMO_NOTE})]
                cell.execution_count = None
            elif i in got:
                cell.outputs = [nbformat.from_dict(o) for o in got[i].get("outputs", [])]
                cell.execution_count = got[i].get("execution_count")
                status = got[i].get("status")
                if status != "ok" and not any(o.get("output_type") == "error" for o in cell.outputs):
                    # points need a kernel that said "ok": a cell without outputs would otherwise earn them
                    cell.outputs.append(nbformat.from_dict(error_output(
                        "NotCompleted", f"the kernel did not report this cell as completed (status: {status})")))
            else:
                report["not_run"] += 1
                cell.outputs = [nbformat.from_dict(error_output(
                    "NotRun", why.format(wall=float(settings.get("wall", 3600)), fatal=report["fatal"] or "crash")))]
        self._performance(nb, settings, src_dir, root, deadline, report, perf_idx, nbformat)

    def _performance(self, nb: Any, settings: dict[str, Any], src_dir: Path, root: Path, deadline: float,
                     report: dict[str, Any], perf_idx: set[int], nbformat: Any) -> None:
        if not perf_idx:
            return
        cases = settings.get("cases") or {}
        mode = settings.get("perf", "off")
        verdicts: dict[str, Any] = {}
        if mode != "off" and cases:
            work = root / "perf"  # an untouched copy: nothing the first run wrote can shadow an import
            _copy_submission(src_dir, work)
            job = {"cases": cases, "cells": answer_cells(nb), "fake": mode == "fake", "cell_timeout": self.timeout}
            results, ended = run_verdict(job, work, root, settings, deadline)
            result = results[0] if results else {"fatal": "time limit reached" if ended == "timeout" else
                                                 "the trusted process ended without a verdict"}
            if result.get("fatal"):
                report["fatal"] = report["fatal"] or f"performance: {result['fatal']}"
            verdicts = result.get("verdicts", {})
        for i in sorted(perf_idx):
            cell = nb.cells[i]
            gid = str(_nbg(cell).get("grade_id"))
            points = float(_nbg(cell).get("points", 0))
            if mode == "off":
                v = Verdict(gid, points, None, "", (NOT_GRADED,))
            elif gid not in verdicts:
                v = Verdict.not_measured(gid, points, "no trusted measurement for this cell: the lab's perf.toml has no ["
                                         + gid + "]" if gid not in cases else
                                         f"no verdict ({report['fatal'] or 'the trusted process failed'})")
            else:
                report["perf"][gid] = verdicts[gid]
                v = Verdict.from_dict(verdicts[gid])
            cell.outputs = [nbformat.from_dict(o) for o in v.outputs(points, NOT_GRADED)]
            cell.metadata.setdefault("mlsys", {})[METADATA_KEY] = v.metadata()  # the status as a field, not text


def _instructor_notebook(resources: dict[str, Any]) -> dict[str, Any]:
    """The instructor version of the notebook being graded (``source/<lab>/<notebook>.ipynb`` of the
    scratch course nbgrader runs in), or {} where there is none: its metadata and its course cells are
    the course's word, never the submission's."""
    meta = resources.get("nbgrader", {}) or {}
    lab, notebook = meta.get("assignment"), meta.get("notebook")
    if not lab or not notebook:
        return {}
    path = Path("source") / str(lab) / f"{notebook}.ipynb"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _label(nb: Any, index: int) -> str:
    if index is None or index < 0 or index >= len(nb.cells):
        return "while starting"
    cell = nb.cells[index]
    return str(_nbg(cell).get("grade_id") or cell.get("id") or f"cell {index}")
