"""Run Lab 1's instructor notebook on this machine (no Jupyter needed) and record its grade.

The GPU image has no Jupyter, nbconvert or nbgrader, so this executes the notebook's code cells
itself: in order, in one namespace (as one kernel would), each cell's source registered with
``linecache`` so that ``inspect.getsource`` (used by ``mlsys.course.grading.assert_no_library_calls``)
works. For every nbgrader test cell it records pass/fail and the points nbgrader would give
(a ``perf_*`` cell's last expression is its partial credit). Without matplotlib (the GPU image may
lack it) plotting is replaced by a no-op stand-in and the plot cell is skipped; this is recorded.

Usage (repository root):  OUT=/some/dir python3 scripts/gpu/lab1.py [path/to/notebook.ipynb]
Writes $OUT/lab1_roofline.json. Exit status 0 when every graded cell earned its full points
(on a machine without CUDA, performance cells count as "not graded").
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from mlsys.course.nbexec import run_cells  # noqa: E402

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
    ns: dict = {"__name__": "__main__"}
    total, earned, perf_not_graded = 0.0, 0.0, False
    t_start = time.perf_counter()
    cells = run_cells(nb_path, ns, skip=("plot",) if stubbed else ())
    for rec in cells:
        if not rec.pop("graded"):
            continue
        points = rec["points"]
        if rec["status"] != "ok" or rec["stderr"]:  # nbgrader gives 0 to a cell that raised or wrote to stderr
            rec["score"] = 0.0
        else:
            rec["score"] = float(rec.get("value", points))  # a numeric result is partial credit
        if rec["grade_id"].startswith("perf_") and NOT_GRADED in rec["output"]:
            rec["performance"] = "not graded (no GPU)"
            perf_not_graded = True
        else:
            total += points
            earned += rec["score"]
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
            print(f"  {c['grade_id']:28s} {c['score']:g}/{c['points']:g} {c.get('performance', '')} "
                  f"{'' if c['status'] == 'ok' else c['status']}")
    return 0 if earned == total else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
