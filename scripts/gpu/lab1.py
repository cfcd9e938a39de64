"""Run Lab 1's instructor notebook on this machine (no Jupyter needed) and record its grade.

The GPU image has no Jupyter, nbconvert or nbgrader, so this executes the notebook's code cells
itself: in order, in one namespace (as one kernel would), each cell's source registered with
``linecache`` so that ``inspect.getsource`` (used by ``mlsys.grading.assert_no_library_calls``)
works. For every nbgrader test cell it records pass/fail and the points nbgrader would give
(a ``perf_*`` cell's last expression is its partial credit). Without matplotlib (the GPU image may
lack it) plotting is replaced by a no-op stand-in and the plot cell is skipped; this is recorded.

Usage (repository root):  OUT=/some/dir python3 scripts/gpu/lab1.py [path/to/notebook.ipynb]
Writes $OUT/lab1_roofline.json. Exit status 0 when every graded cell earned its full points
(on a machine without CUDA, performance cells count as "not graded").
"""

from __future__ import annotations

import ast
import contextlib
import datetime as dt
import io
import json
import linecache
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
NOT_GRADED = "performance: not graded (no GPU)"


def _stub_matplotlib() -> bool:
    """Install a do-nothing matplotlib if it is missing; True if the stub was needed."""
    try:
        import matplotlib  # noqa: F401

        os.environ.setdefault("MPLBACKEND", "Agg")
        return False
    except ImportError:
        for name in ("matplotlib", "matplotlib.pyplot", "matplotlib.axes", "matplotlib.figure"):
            sys.modules[name] = mock.MagicMock(name=name)
        return True


def _run_cell(src: str, filename: str, ns: dict) -> tuple[object, str]:
    """Exec ``src`` in ``ns``; return (value of a trailing expression or None, captured stdout+stderr)."""
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    tree = ast.parse(src, filename)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    buf = io.StringIO()
    value = None
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        exec(compile(tree, filename, "exec"), ns)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), filename, "eval"), ns)
    return value, buf.getvalue()


def _versions() -> dict[str, object]:
    out: dict[str, object] = {"python": platform.python_version()}
    for mod in ("torch", "triton", "numpy", "pint"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as exc:  # record, never fail, on a missing library
            out[mod] = f"unavailable ({type(exc).__name__})"
    try:
        import torch

        out["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            out["device"] = torch.cuda.get_device_name(0)
            out["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    except Exception:
        pass
    try:
        from mlsys.bench.provenance import nvidia_smi

        out["nvidia_smi"] = nvidia_smi()
    except Exception as exc:
        out["nvidia_smi"] = f"unavailable ({type(exc).__name__})"
    return out


def main(argv: list[str]) -> int:
    nb_path = Path(argv[1]) if len(argv) > 1 else REPO / "labs/source/lab1_roofline/lab1_roofline.ipynb"
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    stubbed = _stub_matplotlib()
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    ns: dict = {"__name__": "__main__"}
    cells, total, earned, perf_not_graded = [], 0.0, 0.0, False
    t_start = time.perf_counter()
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id", f"cell-{i}")
        rec: dict[str, object] = {"grade_id": gid}
        if stubbed and gid == "plot":
            rec["status"] = "skipped (no matplotlib)"
            cells.append(rec)
            continue
        t0 = time.perf_counter()
        try:
            value, output = _run_cell(src, f"<{nb_path.stem} cell {gid}>", ns)
            rec["status"] = "ok"
        except BaseException as exc:  # a failing cell is recorded; later cells still run
            value, output = None, ""
            rec["status"] = "error"
            rec["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-2000:]
        rec["seconds"] = round(time.perf_counter() - t0, 3)
        rec["output"] = output[-4000:]
        if meta.get("grade") and not meta.get("solution"):
            points = float(meta.get("points", 0))
            if rec["status"] != "ok":
                score = 0.0
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                score = float(value)  # partial credit, as nbgrader reads a numeric result
            else:
                score = points
            rec.update(points=points, score=score)
            if gid.startswith("perf_") and NOT_GRADED in output:
                rec["performance"] = "not graded (no GPU)"
                perf_not_graded = True
            else:
                total += points
                earned += score
        cells.append(rec)
    summary: dict[str, object] = {"notebook": str(nb_path.relative_to(REPO)) if nb_path.is_relative_to(REPO) else str(nb_path)}
    roof = ns.get("my_roof")
    if roof is not None:
        summary["measured_roof"] = {"peak_flop_per_s": roof.peak.to("FLOP/s").m,
                                    "bandwidth_byte_per_s": roof.bandwidth.to("byte/s").m, "label": roof.label}
    pts = ns.get("points") or []
    summary["points"] = [{"label": p.label, "intensity_flop_per_byte": p.intensity.to("FLOP/byte").m,
                          "achieved_flop_per_s": p.performance.to("FLOP/s").m} for p in pts]
    result = {
        "what": "Lab 1 (roofline analysis) instructor notebook, executed cell by cell; nbgrader-style scores",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "versions": _versions(),
        "matplotlib_stubbed": stubbed,
        "graded_points": total,
        "earned_points": earned,
        "performance": "not graded (no GPU)" if perf_not_graded else "graded",
        "seconds": round(time.perf_counter() - t_start, 2),
        **summary,
        "cells": cells,
    }
    (out_dir / "lab1_roofline.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("graded_points", "earned_points", "performance", "seconds")}))
    for c in cells:
        if "points" in c:
            print(f"  {c['grade_id']:28s} {c['score']:g}/{c['points']:g} {c.get('performance', '')} {c.get('error', '')}")
    return 0 if earned == total else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
