"""Grade each lab's instructor notebook N times through the real pipeline and record every score,
wall time and load average; writes one JSON record per run.

    nice -n 10 .venv/bin/python scripts/repeat_grading.py -n 20 --out data/grading/repeat_grading_cpu.json

For each lab, N copies of the instructor notebook (each with its own metadata, so each has its own
checksum and is graded for real) are handed in by N students of a fresh scratch course, then graded
by ``python -m mlsys.grader.teach grade LAB --root COURSE --jobs 1``, the command ``make grade`` runs
(bubblewrap sandbox, feedback pages, performance cells as the machine allows: "not graded here"
without a GPU). While it runs, the script watches the course's row store: when a submission's row
appears it records the 1-, 5- and 15-minute load averages of that moment; the wall time of each
grading is the one the grader stores with the row. A grading that is not full marks is listed with
the cells that lost points and the end of their output. The instructor notebook must score full
marks every time: any other count is a bug (a check that depends on an idle machine, a timeout too
tight under load).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _handin import course  # noqa: E402

from mlsys.bench.provenance import provenance  # noqa: E402
from mlsys.grader.teach import lab_names  # noqa: E402


def _lost_cells(graded: Path) -> list[dict[str, Any]]:
    """The autograded cells of a graded notebook that scored below their points, with their output's end."""
    from nbformat import from_dict
    from nbgrader.utils import determine_grade

    try:
        nb = json.loads(graded.read_text())
    except (OSError, ValueError) as exc:
        return [{"cell": None, "error": f"no autograded notebook: {exc}"}]
    lost = []
    for c in nb.get("cells", []):
        meta = c.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade") or meta.get("solution"):
            continue
        score, points = determine_grade(from_dict(c))
        if points and (score or 0) < points:
            text = ""
            for o in c.get("outputs", []):
                t = o.get("text") or "\n".join(o.get("traceback", [])) or o.get("evalue", "")
                text += "".join(t) if isinstance(t, list) else str(t)
            lost.append({"cell": meta.get("grade_id"), "score": score, "points": points, "output_tail": text[-1500:]})
    return lost


def grade_lab(lab: str, n: int, tmp: Path, timeout: float) -> dict[str, Any]:
    root = course(tmp / lab, lab, n, "mlsys_repeat_grading")
    rows_dir = root / ".grading" / "rows" / lab
    loads: dict[str, list[float]] = {}
    stop = threading.Semaphore(0)  # released when the grading has ended

    def watch() -> None:  # the load averages at the moment each row is stored
        while True:
            if rows_dir.is_dir():
                for p in rows_dir.glob("student*.json"):
                    loads.setdefault(p.stem, [round(x, 2) for x in os.getloadavg()])
            if stop.acquire(timeout=1.0):
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    cmd = [sys.executable, "-m", "mlsys.grader.teach", "grade", lab, "--root", str(root), "--jobs", "1",
           "--timeout", str(timeout)]
    t0 = time.monotonic()
    load_start = [round(x, 2) for x in os.getloadavg()]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    wall = time.monotonic() - t0
    stop.release()
    watcher.join()
    gradings = []
    for i in range(n):
        student = f"student{i:03d}"
        p = rows_dir / f"{student}.json"
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError):
            gradings.append({"student": student, "full_marks": False, "error": "no row stored"})
            continue
        row = data["row"]
        full = row["status"] == "ok" and row["correctness_score"] == row["correctness_max"] > 0
        g = {"student": student, "full_marks": full,
             "score": row["correctness_score"], "max": row["correctness_max"], "status": row["status"],
             "performance": row.get("performance"), "summary": row.get("summary"),
             "wall": {"value": data.get("seconds"), "unit": "s"},
             "load_average_1_5_15": loads.get(student, [round(x, 2) for x in os.getloadavg()])}
        if not full:
            g["reason"] = row.get("reason")
            g["lost"] = _lost_cells(root / "autograded" / student / lab / f"{lab}.ipynb")
        gradings.append(g)
    walls = [g["wall"]["value"] for g in gradings if g.get("wall", {}).get("value") is not None]
    load1 = [g["load_average_1_5_15"][0] for g in gradings if "load_average_1_5_15" in g]
    return {
        "lab": lab, "gradings": n, "full_marks": sum(g["full_marks"] for g in gradings),
        "command": f"python -m mlsys.grader.teach grade {lab} --root COURSE --jobs 1 --timeout {timeout:g}",
        "exit_code": proc.returncode, "stderr_tail": proc.stderr[-2000:],
        "total_wall": {"value": round(wall, 1), "unit": "s"},
        "wall_min_median_max": {"value": [round(min(walls), 1), round(statistics.median(walls), 1),
                                          round(max(walls), 1)] if walls else None, "unit": "s"},
        "load_average_1min_min_median_max": [min(load1), statistics.median(load1), max(load1)] if load1 else None,
        "load_average_at_start": load_start,
        "runs": gradings,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("labs", nargs="*", help="labs (default: every lab of labs/source)")
    ap.add_argument("-n", type=int, default=20, help="gradings per lab (default 20)")
    ap.add_argument("--timeout", type=float, default=3600, help="teach grade --timeout (default 3600, as make grade)")
    ap.add_argument("--out", type=Path, default=REPO / "data" / "grading" / "repeat_grading_cpu.json")
    ap.add_argument("--commit", help="the commit graded, where this copy is not a git checkout (a `git archive`)")
    a = ap.parse_args()
    labs = a.labs or lab_names()
    commit = a.commit or subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                        text=True).stdout.strip()
    dirty = not a.commit and bool(subprocess.run(["git", "status", "--porcelain", "--", "mlsys", "labs"], cwd=REPO,
                                                 capture_output=True, text=True).stdout.strip())
    prov = provenance("cpu")
    rec: dict[str, Any] = {
        "what": f"the instructor notebook of each lab graded {a.n} times through `teach grade` (as `make grade`)",
        "method": __doc__.split("\n\n", 2)[2].strip(),
        "date": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
        "device": prov["device"], "software": prov["software"],
        "commit": commit + (" (with uncommitted changes to mlsys/ or labs/)" if dirty else ""),
        "machine_note": "a 2-core VM shared with five other engineers' work (tests, notebooks) while grading; "
                        "this script ran under nice -n 10",
        "labs": [],
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mlsys-repeat-") as tmp:
        for lab in labs:
            print(f"{lab}: grading {a.n} times ...", flush=True)
            res = grade_lab(lab, a.n, Path(tmp), a.timeout)
            rec["labs"].append(res)
            a.out.write_text(json.dumps(rec, indent=1) + "\n")  # after every lab: a stopped run keeps the rest
            print(f"{lab}: {res['full_marks']}/{a.n} full marks, wall min/median/max "
                  f"{res['wall_min_median_max']['value']} s, load (1 min) {res['load_average_1min_min_median_max']}",
                  flush=True)
    return 0 if all(r["full_marks"] == r["gradings"] for r in rec["labs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
