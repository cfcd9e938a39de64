"""Lab 6 on a GPU: ``python scripts/gpu/lab6_grading.py --out $OUT/lab6.json [--n 10] [--fake]``.

Through the trusted performance path (``python -P -m mlsys.grader.decide.trusted``, the verdict process that
``make grade`` runs, which never executes an answer cell itself), grades Lab 6's ``perf_step``:

1. the instructor notebook's answer cells ``--n`` times (each a full verdict: checked calls on fresh inputs,
   rounds alternating with the baseline, a re-measure below full credit); issue 47 asks for full credit in
   10 of 10;
2. the given step submitted as the fix (``fixed_step = block_step.given_step``): it must earn nothing;
3. the untouched release, and the corpus's ``cached_fix`` and ``skips_backward``: nothing.

Prints one line per verdict (score, points, the share of the given step's time, the reason) and writes every
verdict with the device and the date to ``--out``. ``--fake`` uses the fake timer (a CPU smoke test of the
plumbing: every honest function earns full credit there). Exit status 0 when every expectation held.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAB = "lab6_profiling"
SOURCE = REPO / "labs" / "source" / LAB


def verdict(cases: dict, cells: list[str], timeout: float, fake: bool) -> dict:
    """The verdict process's result for one job (``{"fatal": ...}`` when it gave none)."""
    job = {"cases": cases, "cells": cells, "fake": fake, "cell_timeout": 300, "nonce": "LAB6RUN",
           "deadline_s": max(timeout - 15, 10)}
    try:
        proc = subprocess.run([sys.executable, "-P", "-m", "mlsys.grader.decide.trusted"], input=json.dumps(job), cwd=REPO,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"fatal": f"timed out after {timeout:.0f} s"}
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("LAB6RUN ")), None)
    if line is None:
        return {"fatal": f"no verdict (exit {proc.returncode}): {proc.stderr[-2000:]}"}
    return json.loads(line[len("LAB6RUN "):])


def cells_of(path: Path, extra: str = "") -> list[str]:
    from mlsys.grader.decide.trusted import answer_cells

    return answer_cells(json.loads(path.read_text(encoding="utf-8"))) + ([extra] if extra else [])


def summary(v: dict) -> dict:
    ev = v.get("evidence", {})
    return {"score": v.get("score"), "points": v.get("points"), "credit": v.get("credit"), "reason": v.get("reason"),
            "line": (v.get("lines") or [""])[0], "baseline_rounds_s": ev.get("baseline_rounds_s"),
            "learner_rounds_s": ev.get("learner_rounds_s"), "remeasured": ev.get("remeasured"),
            "kernels": list(ev.get("kernels") or {})[:6], "replay": ev.get("replay")}


def run(name: str, cases: dict, cells: list[str], timeout: float, fake: bool) -> dict:
    t0 = time.monotonic()  # the grading run's wall time, not a GPU timing
    res = verdict(cases, cells, timeout, fake)
    row = {"wall_s": round(time.monotonic() - t0, 1), "fatal": res.get("fatal"),
           "verdicts": {g: summary(v) for g, v in res.get("verdicts", {}).items()}}
    for g, v in row["verdicts"].items():
        print(f"{name} {g}: {v['score']} of {v['points']}  {(v['reason'] or v['line'])[:160]}", flush=True)
    if row["fatal"]:
        print(f"{name}: FATAL {row['fatal'][:500]}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--n", type=int, default=10, help="gradings of the instructor's fix")
    p.add_argument("--fake", action="store_true", help="the fake timer (a CPU smoke test)")
    a = p.parse_args(argv)
    import torch

    spec = tomllib.loads((SOURCE / "perf.toml").read_text())
    out = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
           "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "torch": torch.__version__,
           "fake": a.fake, "spec": spec["perf_step"], "runs": {}}
    instructor = cells_of(SOURCE / f"{LAB}.ipynb")
    given = cells_of(SOURCE / f"{LAB}.ipynb", "from mlsys import block_step\nfixed_step = block_step.given_step\n")
    corpus = REPO / "tests" / "bad_submissions" / "lab6"
    jobs = [("instructor", {f"perf_step__{i + 1:02d}": spec["perf_step"] for i in range(a.n)}, instructor, 60 + 60 * a.n),
            ("given_step", spec, given, 300),
            ("untouched", spec, cells_of(REPO / "labs" / "release" / LAB / f"{LAB}.ipynb"), 300)]
    jobs += [(c, spec, cells_of(corpus / f"{c}.nb.json"), 300) for c in ("cached_fix", "skips_backward")]
    for name, cases, cells, timeout in jobs:
        out["runs"][name] = run(name, cases, cells, timeout, a.fake)
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1))
    # the fake timer reports every round as 1 ms, so the fix's share of the given step is 1.0 (no credit): there
    # an honest verdict is one that refused nothing, and the smoke test checks the plumbing only
    full = [(not v["reason"]) if a.fake else v["credit"] == 1.0 for v in out["runs"]["instructor"]["verdicts"].values()]
    zero = [v["score"] == 0 for n, r in out["runs"].items() if n != "instructor" for v in r["verdicts"].values()]
    ok = len(full) == a.n and all(full) and len(zero) == 4 and all(zero)
    print(f"instructor full credit in {sum(full)} of {a.n} gradings; given step, untouched release, cached_fix and "
          f"skips_backward at zero: {sum(zero)} of 4 -> {'OK' if ok else 'NOT AS EXPECTED'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
