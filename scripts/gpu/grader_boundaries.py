"""GPU checks of issue 48's trust boundaries, for a machine with an NVIDIA GPU, bubblewrap and root:

    OUT=/some/dir python scripts/gpu/grader_boundaries.py                 # every step (about 8-10 min on an H200)
    OUT=/some/dir python scripts/gpu/grader_boundaries.py --only verdict,nodes
    OUT=/some/dir python scripts/gpu/grader_boundaries.py --only solutions -n 10   # the 10-of-10 run (longer)

Steps, each writing ``$OUT/<step>.json`` as it ends (a step that fails says why there and the next runs):

- ``nodes``: a sandbox given the slot's GPU only (``CUDA_VISIBLE_DEVICES=0``: /dev/nvidia0 and the control
  nodes bound, no other /dev/nvidiaN) can still run a CUDA kernel, and sees one GPU;
- ``verdict``: the tiny lab's ``perf_speed`` graded by the verdict process in its sandbox, the learner's
  workers in a sandbox of their own (mlsys.grader.learnerbox), for an honest ``double`` and for the two
  corpus attacks of issue 48 (``perf_signal_baseline``: kill/stop the clean workers from a setsid helper;
  ``perf_poison_caches``: overwrite every Triton ``*.so`` the learner can reach, ``cuda_utils`` included):
  each must keep the honest credit (1.0); the evidence carries ``baseline_ran_share`` per baseline round
  (the share of each round the clean worker was runnable, which RAN_SHARE = 0.5 judges on a GPU: every value
  should be near 1, a synchronize spins; if not, set perfrules.RAN_SHARE = 0 and report it);
- ``corpus``: ``tests/bad_submissions/grade_corpus.py --perf cuda`` on those cases plus ``good`` and
  ``hidden_library_call`` through ``make grade``'s whole pipeline, rows checked against expected.json;
- ``sandboxed``: honest work through the sandboxed verdict ``-n`` times (the tiny lab's ``good``, also without a
  sandbox for contrast, and the instructor answer cells of Labs 2, 3 and 5): every case must earn credit 1;
- ``solutions``: ``scripts/repeat_grading.py -n N`` over the labs with performance cells (Lab 4 needs two
  GPUs: left out on one), every grading must be full marks.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

CORPUS = REPO / "tests" / "bad_submissions"
ATTACKS = ("good", "perf_signal_baseline", "perf_poison_caches")
NODE_PROBE = ("import glob, json, torch\nx = torch.arange(1 << 20, device='cuda', dtype=torch.float32)\n"
              "print(json.dumps({'count': torch.cuda.device_count(), 'sum': float((x * 2).sum()), "
              "'nodes': sorted(glob.glob('/dev/nvidia*'))}))\n")


def _write(out: Path, step: str, record: dict) -> None:
    record.update(step=step, date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))
    (out / f"{step}.json").write_text(json.dumps(record, indent=1, default=str))
    print(step, json.dumps(record, default=str)[:600], flush=True)


def step_nodes(out: Path, site: Path) -> dict:
    from mlsys.grader import sandbox

    scratch = Path(tempfile.mkdtemp(prefix="nodes-"))
    sandbox.own_scratch(scratch)
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"  # the slot: command() binds its node and passes the variable in
    try:
        argv = sandbox.command([sys.executable, "-c", NODE_PROBE], scratch, site, gpu=True)
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES")
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    seen = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {}
    want = float(sum(range(1 << 20)) * 2)
    return {"ok": bool(seen) and seen.get("count") == 1 and abs(seen.get("sum", 0) - want) < 1e-3 * want,
            "seen": seen, "bound": sandbox.gpu_nodes("0"), "stderr": proc.stderr[-2000:]}


def step_verdict(out: Path, site: Path) -> dict:
    from mlsys.grader.decide.trusted import answer_cells
    from mlsys.grader.sandboxrun import run_verdict

    cases = tomllib.loads((CORPUS / "source" / "lab0_tiny" / "perf.toml").read_text())
    got = {}
    for name in ATTACKS:
        nb = json.loads((CORPUS / f"{name}.nb.json").read_text())
        root = Path(tempfile.mkdtemp(prefix=f"verdict-{name}-"))
        work = root / "perf"
        work.mkdir()
        settings = {"mode": "bwrap", "site": str(site), "perf": "cuda", "limits": {}, "gpu": True}
        t0 = time.monotonic()
        results, ended = run_verdict({"cases": cases, "cells": answer_cells(nb), "fake": False, "cell_timeout": 600},
                                     work, root, settings, time.monotonic() + 900)
        v = (results[0].get("verdicts") or {}).get("perf_speed", {}) if results else {}
        got[name] = {"ended": ended, "wall_s": round(time.monotonic() - t0, 1), "credit": v.get("credit"),
                     "reason": v.get("reason"), "lines": v.get("lines"), "fatal": results[0].get("fatal") if results else None,
                     "baseline_ran_share": (v.get("evidence") or {}).get("baseline_ran_share"),
                     "evidence": v.get("evidence")}
    return {"ok": all(g["credit"] == 1.0 for g in got.values()), "cases": got}


def _one_verdict(cases: dict, cells: list[str], mode: str, site: Path, tag: str) -> dict:
    """One grading by the verdict process, in ``mode`` "bwrap" (learner and clean sides in sandboxes of their
    own) or "none" (one process tree, as ``trusted_gpu_run.py``): each case's credit, reason and round times."""
    from mlsys.grader.sandboxrun import run_verdict

    root = Path(tempfile.mkdtemp(prefix=f"verdict-{tag}-"))
    work = root / "perf"
    work.mkdir()
    settings = {"mode": mode, "site": str(site), "perf": "cuda", "limits": {}, "gpu": True}
    t0 = time.monotonic()
    results, ended = run_verdict({"cases": cases, "cells": cells, "fake": False, "cell_timeout": 600},
                                 work, root, settings, time.monotonic() + 600)
    verdicts = (results[0].get("verdicts") or {}) if results else {}
    keep = ("learner_rounds_s", "baseline_rounds_s", "overhead_rounds_s", "baseline_untraced_s", "stopped_early")
    return {"mode": mode, "ended": ended, "wall_s": round(time.monotonic() - t0, 1),
            "fatal": results[0].get("fatal") if results else None,
            "cases": {g: {"credit": v.get("credit"), "reason": v.get("reason"),
                          **{k: (v.get("evidence") or {}).get(k) for k in keep}} for g, v in verdicts.items()}}


SANDBOXED_LABS = ("good", "lab3_fusion", "lab2_tiled_matmul", "lab5_attention")


def step_sandboxed(out: Path, site: Path, n: int, only: tuple[str, ...] = SANDBOXED_LABS) -> dict:
    """Honest work through the sandboxed verdict on the GPU, ``n`` times each: the tiny lab's ``good`` (in both
    modes, for contrast) and the instructor answer cells of Labs 2, 3 and 5 (``only`` picks among them, in
    :data:`SANDBOXED_LABS`): every case must earn credit 1. Each lab's ``n`` gradings run one after another, and
    ``sandboxed.partial.json`` is rewritten after each, so a call cut short keeps what it graded."""
    from mlsys.grader.decide.trusted import answer_cells

    unknown = sorted(set(only) - set(SANDBOXED_LABS))
    if unknown:
        raise ValueError(f"--labs takes names among {', '.join(SANDBOXED_LABS)}; got {', '.join(unknown)}")
    runs = []
    for lab in only:
        if lab == "good":
            cases = tomllib.loads((CORPUS / "source" / "lab0_tiny" / "perf.toml").read_text())
            cells = answer_cells(json.loads((CORPUS / "good.nb.json").read_text()))
        else:
            cases = tomllib.loads((REPO / "labs" / "source" / lab / "perf.toml").read_text())
            cells = answer_cells(json.loads((REPO / "labs" / "source" / lab / f"{lab}.ipynb").read_text()))
        for i in range(n):
            for mode in ("bwrap", "none") if lab == "good" else ("bwrap",):
                runs.append({"what": lab, **_one_verdict(cases, cells, mode, site, f"{lab}{i}{mode}")})
            _write(out, "sandboxed.partial", {"runs": runs})
    credits = [c["credit"] for r in runs if r["mode"] == "bwrap" for c in r["cases"].values()]
    return {"ok": bool(credits) and all(c == 1.0 for c in credits), "n": n, "labs": list(only), "runs": runs}


def step_corpus(out: Path, site: Path) -> dict:
    dest = out / "corpus"
    only = ",".join([*ATTACKS, "hidden_library_call"])
    proc = subprocess.run([sys.executable, str(CORPUS / "grade_corpus.py"), str(dest), "--perf", "cuda", "--only", only],
                          capture_output=True, text=True, timeout=3000, cwd=REPO)
    report = json.loads((dest / "corpus_run.json").read_text()) if (dest / "corpus_run.json").is_file() else {}
    return {"ok": proc.returncode == 0, "returncode": proc.returncode, "report": report, "stderr": proc.stderr[-3000:]}


def step_solutions(out: Path, site: Path, n: int) -> dict:
    labs = ["lab2_tiled_matmul", "lab3_fusion", "lab5_attention"]
    dest = out / "solutions.raw.json"
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "repeat_grading.py"), "-n", str(n), *labs,
                           "--out", str(dest)], capture_output=True, text=True, timeout=36000, cwd=REPO)
    data = json.loads(dest.read_text()) if dest.is_file() else {}
    return {"ok": proc.returncode == 0, "returncode": proc.returncode, "n": n, "labs": labs, "runs": data,
            "stderr": proc.stderr[-3000:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="nodes,verdict,corpus", help="steps, comma-separated: nodes,verdict,corpus,solutions")
    ap.add_argument("-n", type=int, default=10, help="gradings per lab in the solutions and sandboxed steps (default 10)")
    ap.add_argument("--labs", default=",".join(SANDBOXED_LABS), help="the sandboxed step's labs, comma-separated")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or "gpu-out")
    out.mkdir(parents=True, exist_ok=True)
    from mlsys.grader import sandbox

    site = sandbox.build_site(Path(tempfile.mkdtemp(prefix="site-")))
    steps = {"nodes": step_nodes, "verdict": step_verdict, "corpus": step_corpus,
             "solutions": lambda o, s: step_solutions(o, s, args.n), "sandboxed": lambda o, s: step_sandboxed(o, s, args.n, tuple(x for x in args.labs.split(",") if x))}
    failed = 0
    for name in [s.strip() for s in args.only.split(",") if s.strip()]:
        try:
            record = steps[name](out, site)
        except Exception as exc:  # noqa: BLE001 - a step's failure is written down and the next one runs
            record = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        failed += not record.get("ok")
        _write(out, name, record)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
