"""Grade the whole bad-submission corpus once and write the report: ``python tests/bad_submissions/grade_corpus.py OUT``.

Builds the tiny lab's course in a temporary folder, submits every ``*.nb.json`` here, grades them
with :func:`mlsys.grader.teach.grade` and writes ``OUT/grades.csv`` and ``OUT/corpus_run.json``
(device, date, torch version, options, every row, and whether each row matches expected.json).
Options: ``--perf cuda|fake|off`` (default: cuda where present), ``--no-sandbox`` (machines without
bubblewrap: student code then runs unconfined, acceptable for this corpus only because it is ours),
``--only a,b`` (some cases).

``--trusted-only`` needs neither nbgrader nor bubblewrap (a bare GPU image with torch): it runs just
the trusted performance process (``python -P -m mlsys.grader.decide.trusted``) once per case, on the
answer cells of each submission, and writes ``OUT/trusted_run.json`` (device, date, verdict per
case, and whether each matches expected.json's performance_score).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
PERF_CASES = ("good", "untouched", "patch_timer", "patch_reference", "library_override", "hidden_library_call",
              "differs_after_timing", "calls_library", "nans", "perf_cache_by_address", "perf_cache_by_shape",
              "perf_stale_buffer", "perf_work_after_return", "perf_library_outside_aten", "perf_lazy_result",
              "perf_claims_torch_module", "perf_patch_trusted", "perf_patch_harness", "perf_input_to_output",
              "perf_lower_precision", "perf_patch_clocks")
REPO = HERE.parent.parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--perf", choices=["cuda", "fake", "off"])
    p.add_argument("--no-sandbox", action="store_true")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--only", help="comma-separated cases (default: all); e.g. the performance cases without a sandbox")
    p.add_argument("--trusted-only", action="store_true", help="run only the trusted performance process per case")
    a = p.parse_args(argv)
    sys.path.insert(0, str(REPO))

    expected = json.loads((HERE / "expected.json").read_text())
    if a.only:
        unknown = set(a.only.split(",")) - set(expected)
        if unknown:
            p.error(f"unknown cases {sorted(unknown)}; expected some of {sorted(expected)}")
        expected = {k: v for k, v in expected.items() if k in a.only.split(",")}
    if a.trusted_only:  # unconfined here: only the cases that attack the performance path, never the others
        others = sorted(set(expected) - set(PERF_CASES))
        if a.only and others:  # a helper that outlives its case (perf_signal_baseline's) runs as this user:
            p.error(f"--trusted-only runs answer cells unconfined; {others} only run in the sandboxed "
                    f"pipeline (their helpers outlive the case and reach later ones); choose among {sorted(PERF_CASES)}")
        expected = {k: v for k, v in expected.items() if k in PERF_CASES}
        return _trusted_only(a.out, expected, fake=a.perf == "fake")
    from mlsys.grader import teach
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
        root = Path(tmp) / "course"
        (root / "source" / "lab0_tiny").mkdir(parents=True)
        shutil.copy2(REPO / "labs" / "nbgrader_config.py", root / "nbgrader_config.py")
        shutil.copy2(HERE / "source" / "lab0_tiny" / "lab0_tiny.nb.json", root / "source" / "lab0_tiny" / "lab0_tiny.ipynb")
        shutil.copy2(HERE / "source" / "lab0_tiny" / "perf.toml", root / "source" / "lab0_tiny" / "perf.toml")
        for name in expected:
            dest = root / "submitted" / name / "lab0_tiny" / "lab0_tiny.ipynb"
            dest.parent.mkdir(parents=True)
            shutil.copy2(HERE / f"{name}.nb.json", dest)
        start = dt.datetime.now(dt.UTC)
        rows = teach.grade(root, timeout=120, cell_timeout=10, feedback=False, verbose=True, jobs=a.jobs,
                           use_sandbox=not a.no_sandbox, perf=a.perf)
        a.out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / "grades.csv", a.out / "grades.csv")
        if (root / ".grading" / "evidence").is_dir():  # each verdict's rounds and traced kernels, as the teacher has them
            shutil.copytree(root / ".grading" / "evidence", a.out / "evidence", dirs_exist_ok=True)
    device = _cuda_name()
    try:
        import torch

        torch_version = torch.__version__
    except Exception:  # torch missing: still report
        torch_version = None
    def matches(r, key: str, want) -> bool:
        got = getattr(r, key)
        if isinstance(want, (int, float)):
            return got != "" and float(got) == float(want)
        if key in ("status", "performance"):
            return got == want
        return want in got if want else got == ""  # reason / flags: a word of it; "" means none

    verdicts = {}
    for r in rows:
        want = on_device(expected.get(r.student, {}), device)
        ok = all(matches(r, k, v) for k, v in want.items()
                 if k not in ("covered_by", "gpu") and not (k in ("performance_score", "performance") and r.performance != "graded"))
        verdicts[r.student] = {"row": {k: v for k, v in asdict(r).items() if k != "notes"}, "matches_expected": ok}
    report = {"device": device, "date": start.date().isoformat(), "started": start.isoformat(timespec="seconds"),
              "torch": torch_version, "perf": a.perf or "auto", "sandbox": not a.no_sandbox, "rows": verdicts,
              "all_match": all(v["matches_expected"] for v in verdicts.values())}
    (a.out / "corpus_run.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"{sum(v['matches_expected'] for v in verdicts.values())}/{len(verdicts)} rows as expected on {device}")
    return 0 if report["all_match"] else 1


def on_device(want: dict, device: str) -> dict:
    """A case's expected row on ``device`` ("cpu" or a GPU's name): expected.json's row, with the case's ``gpu``
    entries (an attack that reaches the CPU only, a refusal worded by the GPU's replay) in their place on a GPU."""
    if device == "cpu" or "gpu" not in want:
        return want
    return {**want, **{k: v for k, v in want["gpu"].items() if k != "why"}}


def _cuda_name() -> str:
    """The GPU's name, or "cpu" (torch missing or no GPU)."""
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception:  # torch missing: a CPU
        return "cpu"


def _trusted_only(out: Path, expected: dict, *, fake: bool) -> int:
    import os
    import subprocess
    import tomllib

    from mlsys.grader.decide.trusted import answer_cells

    cases = tomllib.loads((HERE / "source" / "lab0_tiny" / "perf.toml").read_text())
    start = dt.datetime.now(dt.UTC)
    results = {}
    device = _cuda_name()
    for name, want in expected.items():
        want = on_device(want, device)
        path = HERE / f"{name}.nb.json"
        try:
            nb = json.loads(path.read_text())
        except ValueError:
            continue  # the malformed case has no cells to run
        job = {"cases": cases, "cells": answer_cells(nb), "fake": fake, "cell_timeout": 30, "nonce": "CORPUS"}
        with tempfile.TemporaryDirectory(prefix="trusted-") as tmp:
            try:
                proc = subprocess.run([sys.executable, "-P", "-m", "mlsys.grader.decide.trusted"], input=json.dumps(job),
                                      capture_output=True, text=True, timeout=300, cwd=tmp,
                                      env=dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")))
                line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("CORPUS ")), None)
                result = json.loads(line[len("CORPUS "):]) if line else {"fatal": proc.stderr[-500:]}
            except subprocess.TimeoutExpired:
                result = {"fatal": "timed out after 300 s"}
        verdict = result.get("verdicts", {}).get("perf_speed", {"reason": result.get("fatal", "no verdict")})
        score = verdict.get("score")
        want_score = want.get("performance_score")
        results[name] = {"verdict": verdict, "expected_performance_score": want_score,
                         "matches_expected": want_score is None or (score is not None and float(score) == float(want_score))}
        print(f"{name:24s} score {score}  {verdict.get('reason') or (verdict.get('lines') or [''])[0]}", flush=True)
    torch_version = None
    try:
        import torch

        torch_version = torch.__version__
    except Exception:  # torch missing: still report
        pass
    report = {"device": device, "date": start.date().isoformat(), "started": start.isoformat(timespec="seconds"),
              "torch": torch_version, "timer": "fake" if fake else ("time_fn (CUDA events)" if device != "cpu" else "time_fn (CPU)"),
              "cases": results, "all_match": all(r["matches_expected"] for r in results.values())}
    out.mkdir(parents=True, exist_ok=True)
    (out / "trusted_run.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"{sum(r['matches_expected'] for r in results.values())}/{len(results)} cases as expected on {device}")
    return 0 if report["all_match"] else 1


if __name__ == "__main__":
    sys.exit(main())
