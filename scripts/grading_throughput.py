"""Throughput of grading honest Lab 1 submissions: locally with --jobs 1 and --jobs 2, and as a Slurm
job array with two slots, in one run on one machine; writes a JSON record.

    .venv/bin/python scripts/grading_throughput.py -n 10 --out data/grading/lab1_throughput.json

Each submission is the instructor notebook (full marks) with its own metadata, so every one has its
own checksum and is graded for real. Every configuration grades the same submissions into a fresh
copy of the course (nothing is reused between them), with feedback, as `make grade` does. The Slurm
per-submission overhead is (Slurm wall time - local --jobs 2 wall time) / n: the same two slots, so
what remains is the scheduler (queueing, task start, the poll interval) and the per-task start-up.
Needs bubblewrap, and a Slurm that answers for the third configuration (`sudo .ci/slurm-up`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _handin import course  # noqa: E402

from mlsys.grader import slurm, teach  # noqa: E402
from mlsys.grader.rowstore import RowStore  # noqa: E402

LAB = "lab1_roofline"


def one(name: str, n: int, tmp: Path, **kw) -> dict:
    root = course(tmp / "".join(ch if ch.isalnum() else "-" for ch in name) / "course", LAB, n,
                  "mlsys_throughput_submission")
    t0 = time.monotonic()
    rows = teach.grade(root, timeout=900, verbose=True, **kw)
    wall = time.monotonic() - t0
    store = RowStore(root)
    per = [store.seconds(r.student, r.lab) for r in rows]
    per = [s for s in per if s is not None]
    ok = sum(r.status == "ok" and r.correctness_score == r.correctness_max for r in rows)
    return {"config": name, "submissions": n, "full_marks": ok, "wall": {"value": round(wall, 1), "unit": "s"},
            "throughput": {"value": round(n / wall * 3600, 1), "unit": "submission/h"},
            "grading_time_median": {"value": round(statistics.median(per), 1) if per else None, "unit": "s"},
            "grading_time_max": {"value": round(max(per), 1) if per else None, "unit": "s"}}


def record(results: list[dict], n: int) -> dict:
    by = {r["config"]: r for r in results}
    rec = {
        "what": f"grading {n} honest {LAB} submissions (instructor notebook), feedback included, sandboxed",
        "method": __doc__.split("\n\n", 2)[2].strip(),
        "date": datetime.date.today().isoformat(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "shared": "a 2-core VM shared with seven other engineers' work while measuring"},
        "results": results,
    }
    if "slurm, 2 slots" in by and "local --jobs 2" in by:
        diff = by["slurm, 2 slots"]["wall"]["value"] - by["local --jobs 2"]["wall"]["value"]
        rec["slurm_overhead_per_submission"] = {"value": round(diff / n, 2), "unit": "s"}
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=10, help="submissions (default 10)")
    ap.add_argument("--out", type=Path, default=REPO / "data" / "grading" / "lab1_throughput.json")
    a = ap.parse_args()
    results: list[dict] = []
    a.out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every configuration: a long run that is stopped keeps what it measured
        a.out.write_text(json.dumps(record(results, a.n), indent=1) + "\n")

    with tempfile.TemporaryDirectory(prefix="mlsys-throughput-") as tmp:
        results.append(one("local --jobs 1", a.n, Path(tmp), jobs=1))
        save()
        results.append(one("local --jobs 2", a.n, Path(tmp), jobs=2))
        save()
        why = slurm.available()
        if why:
            print(f"no Slurm: {why}", file=sys.stderr)
        else:
            results.append(one("slurm, 2 slots", a.n, Path(tmp),
                               slurm_options=slurm.SlurmOptions(max_running=2, time="30:00"), batch=1))
            save()
    print(a.out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
