"""A lab's trusted performance cases on this machine: ``python tests/gpu_runs/trusted_lab.py LAB OUT.json``.

Runs ``python -P -m mlsys.grader.decide.trusted`` (the grader's fresh process) on the answer cells of the
lab's instructor notebook (which should earn its points on a GPU) and of its untouched release (which
must earn none), with the lab's ``perf.toml``, and writes both verdicts with the device, date and
versions. ``--fake`` uses the fake timer (a CPU check of the plumbing).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def verdicts(notebook: Path, cases: dict, fake: bool) -> dict:
    sys.path.insert(0, str(REPO))
    from mlsys.grader.decide import trusted

    job = {"cases": cases, "cells": trusted.answer_cells(json.loads(notebook.read_text(encoding="utf-8"))),
           "fake": fake, "nonce": "TRUSTED-LAB"}
    proc = subprocess.run([sys.executable, "-P", "-m", "mlsys.grader.decide.trusted"], input=json.dumps(job), cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("TRUSTED-LAB ")), None)
    if line is None:
        return {"fatal": f"no verdict (exit {proc.returncode}): {proc.stderr[-2000:]}"}
    return json.loads(line[len("TRUSTED-LAB "):])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("lab")
    p.add_argument("out", type=Path)
    p.add_argument("--fake", action="store_true")
    a = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from mlsys.bench.provenance import provenance

    cases = tomllib.loads((REPO / "labs" / "source" / a.lab / "perf.toml").read_text(encoding="utf-8"))
    result = {"lab": a.lab, "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "fake": a.fake,
              "provenance": provenance("cpu" if a.fake else "cuda"),
              "instructor": verdicts(REPO / "labs" / "source" / a.lab / f"{a.lab}.ipynb", cases, a.fake),
              "release": verdicts(REPO / "labs" / "release" / a.lab / f"{a.lab}.ipynb", cases, a.fake)}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for who in ("instructor", "release"):
        for gid, v in result[who].get("verdicts", {}).items():
            print(f"{who:10s} {gid}: {v['score']} of {v['points']}  {v['reason'] or v['lines'][0]}")
        if "fatal" in result[who]:
            print(who, "FATAL", result[who]["fatal"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
