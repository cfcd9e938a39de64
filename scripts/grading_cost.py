"""CPU cost of grading one submission of each lab: wall and CPU seconds of `teach grade`, as `make grade` runs it.

    nice -n 10 .venv/bin/python scripts/grading_cost.py --out data/grading/grading_cost_cpu.json [LAB...]

For each lab, one student hands in the instructor notebook in a fresh scratch course, and
``python -m mlsys.grader.teach grade LAB --root COURSE --jobs 1`` grades it (bubblewrap sandbox, feedback
pages; the performance tier reports "not graded here" without a GPU). CPU seconds are those of the
grading and every process it starts, sandboxes included, read from a CPU-accounting cgroup the grading
runs in (cgroup v1 ``cpuacct.usage`` or v2 ``cpu.stat``; needs root). ``RUSAGE_CHILDREN`` would miss the
sandboxed processes (bubblewrap's pid namespace): measured here, two seconds of work inside ``bwrap`` showed
as 0.07 s. On a shared machine CPU seconds vary much less than wall seconds, which the record gives too,
with the load average at the start.
The GPU tier's cost comes from the recorded GPU runs (``mlsys.grader.grading_cost``), not from here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from _handin import course  # noqa: E402

LABS = ["lab1_roofline", "lab2_tiled_matmul", "lab3_fusion", "lab4_collectives", "lab5_attention"]


class CpuCgroup:
    """A CPU-accounting cgroup (v1 cpuacct, or v2) that a command joins before it starts; ``seconds()`` reads it."""

    def __init__(self, name: str) -> None:
        v1 = Path("/sys/fs/cgroup/cpuacct")
        self.v2 = not v1.is_dir()
        self.path = (Path("/sys/fs/cgroup") if self.v2 else v1) / name
        self.path.mkdir()

    def wrap(self, argv: list[str]) -> list[str]:
        return ["/bin/sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "cost", *argv]

    def seconds(self) -> float:
        if self.v2:
            usec = next(int(ln.split()[1]) for ln in (self.path / "cpu.stat").read_text().splitlines()
                        if ln.startswith("usage_usec"))
            return usec / 1e6
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def close(self) -> None:
        self.path.rmdir()


def grade_one(lab: str, tmp: Path) -> dict:
    root = course(tmp / lab, lab, 1, "mlsys_cost_submission")
    cmd = [sys.executable, "-m", "mlsys.grader.teach", "grade", lab, "--root", str(root), "--jobs", "1",
           "--timeout", "3600"]
    load = os.getloadavg()
    group = CpuCgroup(f"mlsys-grading-cost-{os.getpid()}-{lab}")
    t0 = time.monotonic()
    try:
        done = subprocess.run(group.wrap(cmd), cwd=REPO, capture_output=True, text=True)
        wall = time.monotonic() - t0
        time.sleep(1)  # processes of the sandbox that outlive the grader by a moment are counted too
        cpu = group.seconds()
    finally:
        group.close()
    rows = list((root / "grades.csv").read_text().splitlines()) if (root / "grades.csv").exists() else []
    return {"lab": lab, "command": " ".join(["python"] + cmd[1:]).replace(str(root), "COURSE"),
            "exit_code": done.returncode, "row": rows[1] if len(rows) > 1 else None,
            "wall": {"value": round(wall, 1), "unit": "s"}, "cpu": {"value": round(cpu, 1), "unit": "s"},
            "load_average_at_start": [round(x, 2) for x in load], "stderr_tail": done.stderr[-400:]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("labs", nargs="*", default=LABS)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    record = {"what": "CPU and wall seconds of grading one instructor submission per lab with `teach grade`",
              "method": __doc__.split("\n\n")[2].replace("\n", " "),
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "nice": os.nice(0),
                          "shared": "a 2-core VM shared with other engineers' work while measuring"},
              "labs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for lab in a.labs:
            record["labs"].append(grade_one(lab, Path(tmp)))
            a.out.write_text(json.dumps(record, indent=1) + "\n")
            print(json.dumps({k: record["labs"][-1][k] for k in ("lab", "exit_code", "wall", "cpu")}), flush=True)


if __name__ == "__main__":
    main()
