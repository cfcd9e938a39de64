"""Issue 25's GPU run: ``python tests/gpu_runs/trusted_gpu_run.py OUT.json [--budget S] [--old MODULE OLD.toml]``.

In one call on a GPU, each step within what is left of ``--budget`` seconds:

1. ``time``: one grading of Lab 2's instructor answer cells by the verdict process, and (``--old``)
   by the previous trusted module on its own spec, side by side (wall seconds per grading);
2. ``release:LAB``: the untouched release of LAB (must earn 0);
3. ``repeat``: the instructor solutions of Labs 2, 3 and 5 graded again and again in one verdict
   process per lab (each case repeated, each repeat a full verdict: its own checked calls, rounds,
   re-measure), so the spread of the credit across gradings shows;
4. ``corpus``: every performance case of ``tests/bad_submissions`` (the tiny lab) through the
   verdict process, four at a time, against expected.json's performance_score;
5. ``lab4=N[:CASE+CASE]``: Lab 4's ``perf_ring`` on two ranks (NCCL, one GPU each; needs two GPUs): the
   instructor's ring N times, then every case (or those named) of ``tests/bad_submissions/lab4_perf`` (an attack must earn 0; the honest
   cases are reported with the share they earned, since the fake timer's expected 2.0 is no GPU figure).

Writes OUT.json after every step (device, date, versions, every verdict).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "bad_submissions"


def verdict(module: str, cases: dict, cells: list[str], timeout: float, fake: bool = False) -> tuple[dict, float]:
    """(result, wall seconds) of ``python -P -m module`` on one job."""
    job = {"cases": cases, "cells": cells, "fake": fake, "cell_timeout": 120, "nonce": "I25RUN",
           "deadline_s": max(timeout - 15, 10)}  # the verdict process stops in time and reports what it has
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-P", "-m", module], input=json.dumps(job), cwd=REPO,
                              capture_output=True, text=True, timeout=max(timeout, 1))
    except subprocess.TimeoutExpired:
        return {"fatal": f"timed out after {timeout:.0f} s"}, time.perf_counter() - t0
    wall = time.perf_counter() - t0
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("I25RUN ")), None)
    if line is None:
        return {"fatal": f"no verdict (exit {proc.returncode}): {proc.stderr[-1500:]}"}, wall
    return json.loads(line[len("I25RUN "):]), wall


def cells_of(path: Path) -> list[str]:
    from mlsys.grader.decide.trusted import answer_cells

    return answer_cells(json.loads(path.read_text(encoding="utf-8")))


def brief(v: dict) -> dict:
    ev = v.get("evidence", {})
    return {"score": v.get("score"), "points": v.get("points"), "credit": v.get("credit"), "reason": v.get("reason"),
            "line": (v.get("lines") or [""])[0], "learner_spread": ev.get("learner_spread"),
            "baseline_spread": ev.get("baseline_spread"), "remeasured": ev.get("remeasured"),
            "kernels": list(ev.get("kernels") or {})[:4], "trace": ev.get("trace"),
            "roofline_floor_s": ev.get("roofline_floor_s"), "learner_rounds_s": ev.get("learner_rounds_s"),
            "baseline_rounds_s": ev.get("baseline_rounds_s"), "overhead_rounds_s": ev.get("overhead_rounds_s"),
            "rounds_wall_s": ev.get("rounds_wall_s"), "checked_calls_wall_s": ev.get("checked_calls_wall_s"),
            "case_wall_s": ev.get("case_wall_s"), "stopped_early": ev.get("stopped_early"), "replay": ev.get("replay"),
            "kernel_us": {n[:60]: c for n, c in list((ev.get("kernels") or {}).items())[:6]}}


def time_step(a: argparse.Namespace, lab2: Path, left: object) -> dict:
    cells = cells_of(lab2 / "lab2_tiled_matmul.ipynb")
    new_cases = tomllib.loads((lab2 / "perf.toml").read_text())
    res, wall = verdict("mlsys.grader.decide.trusted", new_cases, cells, min(120, left()))
    row = {"new": {"wall_s": wall, "verdicts": {g: brief(v) for g, v in res.get("verdicts", {}).items()},
                   "fatal": res.get("fatal"), "phases_s": res.get("phases_s")}}
    print(f"time new: {wall:.1f} s {row['new']}", flush=True)
    if a.old:
        old_cases = tomllib.loads(Path(a.old[1]).read_text())
        res, wall = verdict(a.old[0], old_cases, cells, min(120, left()))
        row["old"] = {"wall_s": wall, "fatal": res.get("fatal"),
                      "verdicts": {g: {"score": v.get("score"), "reason": v.get("reason"),
                                       "line": (v.get("lines") or [""])[0]} for g, v in res.get("verdicts", {}).items()}}
        print(f"time old: {wall:.1f} s {row['old']}", flush=True)
    return row


def repeat_step(lab: str, n: int, left: object, fake: bool = False) -> dict:
    spec = tomllib.loads((REPO / "labs" / "source" / lab / "perf.toml").read_text())
    cases = {f"{gid}__{i + 1:02d}": d for i in range(n) for gid, d in spec.items()}
    res, wall = verdict("mlsys.grader.decide.trusted", cases, cells_of(REPO / "labs" / "source" / lab / f"{lab}.ipynb"),
                        left() - 10, fake)
    row = {"wall_s": wall, "fatal": res.get("fatal"), "phases_s": res.get("phases_s"),
           "verdicts": {g: brief(v) for g, v in res.get("verdicts", {}).items()}}
    for g, v in row["verdicts"].items():
        print(f"{g}: {v['score']} of {v['points']}  {v['reason'] or v['line']}", flush=True)
    if res.get("fatal"):
        print(lab, "FATAL", res["fatal"], flush=True)
    return row


def release_step(lab: str, left: object) -> dict:
    """The untouched release of ``lab`` (answer cells as handed out) through the verdict process: it must earn 0."""
    spec = tomllib.loads((REPO / "labs" / "source" / lab / "perf.toml").read_text())
    res, wall = verdict("mlsys.grader.decide.trusted", spec, cells_of(REPO / "labs" / "release" / lab / f"{lab}.ipynb"),
                        max(left() - 5, 5))
    row = {"wall_s": wall, "fatal": res.get("fatal"), "verdicts": {g: brief(v) for g, v in res.get("verdicts", {}).items()}}
    for g, v in row["verdicts"].items():
        print(f"release {g}: {v['score']} of {v['points']}  {(v['reason'] or v['line'])[:150]}", flush=True)
    return row


def corpus_step(a: argparse.Namespace, left: object) -> dict:
    expected = json.loads((CORPUS / "expected.json").read_text())
    sys.path.insert(0, str(CORPUS))
    from grade_corpus import PERF_CASES

    spec = tomllib.loads((CORPUS / "source" / "lab0_tiny" / "perf.toml").read_text())
    rows: dict = {}

    def one(name: str) -> tuple[str, dict, float]:
        res, wall = verdict("mlsys.grader.decide.trusted", spec, cells_of(CORPUS / f"{name}.nb.json"), max(left() - 5, 5), a.fake)
        return name, res, wall
    names = [n for n in PERF_CASES if (CORPUS / f"{n}.nb.json").is_file()]
    with cf.ThreadPoolExecutor(1 if a.fake else 3) as pool:
        for name, res, wall in pool.map(one, names):
            v = res.get("verdicts", {}).get("perf_speed", {"reason": res.get("fatal", "no verdict")})
            want = expected.get(name, {}).get("performance_score")
            ok = want is None or (v.get("score") is not None and float(v["score"]) == float(want))
            rows[name] = {"verdict": brief(v), "expected_performance_score": want, "matches_expected": ok, "wall_s": wall}
            print(f"{name:28s} {v.get('score')} (expected {want}) {v.get('reason') or (v.get('lines') or [''])[0]}",
                  flush=True)
    return {"rows": rows, "all_match": all(r["matches_expected"] for r in rows.values())}


def lab4_step(n: int, left: object, fake: bool = False, only: list[str] | None = None) -> dict:
    """Lab 4's ring through the verdict process on two NCCL ranks: N instructor gradings (none for N = 0),
    then the attacks (``only`` those named, if given)."""
    lab = "lab4_collectives"
    spec = tomllib.loads((REPO / "labs" / "source" / lab / "perf.toml").read_text())
    row: dict = {"instructor": repeat_step(lab, n, left, fake) if n else None}
    corpus = CORPUS / "lab4_perf"
    expected = json.loads((corpus / "expected.json").read_text())
    cases: dict = {}
    for name, want in sorted(expected.items()):
        if only and name not in only:
            continue
        if left() < 40:
            cases[name] = {"skipped": "device budget spent"}
            continue
        res, wall = verdict("mlsys.grader.decide.trusted", spec, cells_of(corpus / f"{name}.nb.json"), min(150, left() - 10),
                            fake)
        v = res.get("verdicts", {}).get("perf_ring", {"reason": res.get("fatal", "no verdict")})
        attack = float(want["performance_score"]) == 0.0
        ok = (v.get("score") == 0.0 and want["reason"].split(":")[0] in (v.get("reason") or "")) if attack else \
            v.get("score") is not None
        cases[name] = {"verdict": brief(v), "expected": want, "attack": attack, "as_expected": ok, "wall_s": wall}
        print(f"lab4 {name:24s} {v.get('score')} ({'attack' if attack else 'honest'}) "
              f"{(v.get('reason') or (v.get('lines') or [''])[0])[:160]}", flush=True)
    row["corpus"] = cases
    row["attacks_all_zero"] = all(c.get("as_expected") for c in cases.values() if c.get("attack"))
    return row


def tools() -> dict:
    """Where the profilers are on this machine (nsys could take a kernel trace from outside the learner's
    process) and the CUDA compiler's version."""
    import os
    import shutil

    out: dict = {t: shutil.which(t) for t in ("nsys", "ncu", "nvcc")}
    out["harness"] = os.environ.get("MLSYS_GRADER_HARNESS") or "torch"  # the grader's per-call GPU work (perfworker)
    if out["nvcc"]:
        r = subprocess.run([out["nvcc"], "--version"], capture_output=True, text=True)
        out["nvcc_version"] = r.stdout.strip().splitlines()[-2:] if r.stdout else None
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--budget", type=float, default=270.0)
    p.add_argument("--old", nargs=2, metavar=("MODULE", "SPEC"))
    p.add_argument("--steps", default="time,repeat:lab2_tiled_matmul=10,corpus,repeat:lab3_fusion=2,repeat:lab5_attention=2",
                   help="in order: time, repeat:LAB=N (N gradings of LAB's instructor cells), release:LAB, corpus, lab4=N")
    p.add_argument("--fake", action="store_true", help="the corpus step with the fake timer (a CPU check)")
    a = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from mlsys.bench.provenance import provenance

    end = time.monotonic() + a.budget
    out: dict = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "provenance": provenance("cpu" if a.fake else "cuda"),
                 "tools": tools(), "steps": {}}

    def save() -> None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(out, indent=1, default=str) + "\n", encoding="utf-8")

    def left() -> float:
        return end - time.monotonic()

    steps = a.steps.split(",")
    lab2 = REPO / "labs" / "source" / "lab2_tiled_matmul"
    rep: dict = {}
    for step in steps:
        if step == "time" and left() > 30:  # repeatable: "time,time" measures the pair again on warm caches
            key = "time" if "time" not in out["steps"] else f"time_{sum(k.startswith('time') for k in out['steps']) + 1}"
            out["steps"][key] = time_step(a, lab2, left)
        elif step.startswith("repeat:"):
            lab, n = step.removeprefix("repeat:").split("=")
            if left() < 30:
                rep[lab] = {"skipped": "device budget spent"}
            else:
                rep[lab] = repeat_step(lab, int(n), left)
            out["steps"]["repeat"] = rep
        elif step.startswith("release:") and left() > 20:
            out["steps"].setdefault("release", {})[step.removeprefix("release:")] = release_step(
                step.removeprefix("release:"), left)
        elif step == "corpus" and left() > 20:
            out["steps"]["corpus"] = corpus_step(a, left)
        elif step.startswith("lab4=") and left() > 60:
            n, _, names = step.removeprefix("lab4=").partition(":")  # lab4=N or lab4=N:case+case
            out["steps"]["lab4"] = lab4_step(int(n), left, a.fake, names.split("+") if names else None)
        save()
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
