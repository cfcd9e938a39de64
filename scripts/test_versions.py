"""Run the release notebooks' visible checks, with the instructor's answers, under other Triton and NumPy versions.

For each combination in :data:`mlsys.labkit.versions.TESTED` this makes (once) a small virtual environment under
``$MLSYS_VERSIONS_DIR`` (default ``/tmp/mlsys-versions``) that holds only that Triton and NumPy (``pip install
--no-deps``; pip fetches them) and takes everything else (torch, pint, the course package) from the course's
``.venv``, behind its own packages. In it, each kernel lab's *release* notebook runs top to bottom on the CPU with its
answer cells filled from the instructor notebook (the visible checks are the release's own; heavy cells that grade
nothing are skipped). A combination passes when every visible check passes, or, for a combination listed in
:data:`mlsys.labkit.versions.BROKEN` (which the setup cell names to the learner), when every failing check fails
with that known error (most name it: "not your kernel"). Prints a Markdown table for the README and exits 1 on any other failure.

A combination in BROKEN that passes every check is a failure too (BROKEN, and what the setup cell tells the learner,
would be stale). With ``--ci`` it runs :data:`mlsys.labkit.versions.CI` only, reports :data:`~mlsys.labkit.versions.PINNED`
as covered by ``make test`` (the suite runs every lab in the course's own ``.venv``, which pins it) and builds its
environments in a temporary folder it removes (nothing is kept between CI runs but pip's own cache).

    make test-versions            # 6-10 min per combination on a loaded 2-core machine (environments are cached)
    MLSYS_VERSIONS_LABS=lab2_tiled_matmul MLSYS_VERSIONS_TRITON=3.6.0 make test-versions   # a cheaper subset
    MLSYS_VERSIONS_NUMPY=2.4.6 MLSYS_VERSIONS_TRITON=3.8.0 make test-versions              # one combination
    .venv/bin/python scripts/test_versions.py --ci                                         # what .ci/run runs
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mlsys.labkit import versions  # noqa: E402

LABS = {"lab2_tiled_matmul": ("benchmark", "smem_table", "perf_matmul"),
        "lab3_fusion": ("compare", "count_show", "perf_elementwise", "perf_softmax"),
        "lab5_attention": ("measure", "plot", "recorded_gap", "perf_attention", "perf_attention_causal")}

RUN = """
import json, os, sys
os.environ["MPLBACKEND"] = "Agg"
from mlsys.runtime import notebook as nbexec
records = nbexec.run_cells(sys.argv[1], skip=tuple(sys.argv[3:]))
import numpy, triton
json.dump({"records": records, "numpy": numpy.__version__, "triton": triton.__version__}, open(sys.argv[2], "w"))
"""


def environment(combo: dict[str, str], root: Path) -> Path:
    """The python of a venv with ``combo``'s packages first and the course's .venv behind them."""
    venv = root / "-".join(f"{k}{v}" for k, v in sorted(combo.items()))
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                        *(f"{k}=={v}" for k, v in combo.items())], check=True)
        base = next((REPO / ".venv" / "lib").glob("python3*/site-packages"))
        site = next((venv / "lib").glob("python3*/site-packages"))
        (site / "zz_course_base.pth").write_text(f"import site; site.addsitedir({str(base)!r})\n")
    return python


def filled_release(lab: str, folder: Path) -> Path:
    """The release notebook with every answer cell replaced by the instructor's (by grade_id)."""
    source = json.loads((REPO / "labs" / "source" / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
    release = json.loads((REPO / "labs" / "release" / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
    answers = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in source["cells"]
               if c["metadata"].get("nbgrader", {}).get("solution")}
    for cell in release["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell["source"] = answers[gid]
    path = folder / lab / f"{lab}.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(release), encoding="utf-8")
    for spec in (REPO / "labs" / "release" / lab).glob("*.toml"):
        (path.parent / spec.name).write_bytes(spec.read_bytes())
    return path


def run(combo: dict[str, str], root: Path) -> tuple[str, str, float]:
    """(verdict, detail, seconds) of every lab under ``combo``."""
    python = environment(combo, root)
    said = versions.problems({"torch": "2.13", **combo})  # what setup() tells a learner with these versions
    broken = [advice for _, advice in versions.BROKEN if advice in said]
    assert broken == [a for a in [versions.broken_advice(combo)] if a], (combo, said)
    failures, t0 = [], time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = str(REPO)
    with tempfile.TemporaryDirectory(prefix="mlsys-versions-") as tmp:
        only = os.environ.get("MLSYS_VERSIONS_LABS", "").split(",")  # e.g. lab2_tiled_matmul: a cheaper CI run
        for lab, skip in LABS.items():
            if only != [""] and lab not in only:
                continue
            nb = filled_release(lab, Path(tmp))
            out = nb.with_suffix(".json")
            proc = subprocess.run([str(python), "-c", RUN, str(nb), str(out), *skip], cwd=nb.parent, env=env,
                                  capture_output=True, text=True, timeout=900)
            if proc.returncode or not out.is_file():
                failures.append(f"{lab}: the run died: {proc.stderr[-500:]}")
                continue
            got = json.loads(out.read_text())
            if got["triton"] != combo["triton"] or got["numpy"] != combo["numpy"]:
                failures.append(f"{lab}: ran with triton {got['triton']}, numpy {got['numpy']}, not {combo}")
            for r in got["records"]:
                if r.get("graded") and r["status"] not in ("ok", "skipped"):
                    failures.append(f"{lab}/{r['grade_id']}: {r['status'][:300]}")
    seconds = time.monotonic() - t0
    if not failures and broken:
        return "FAIL", f"listed in versions.BROKEN, yet every visible check passes: remove it there ({broken[0][:80]}...)", seconds
    if not failures:
        return "pass", "every visible check passes", seconds
    if broken and all("not your kernel" in f or "only 0-dimensional arrays" in f for f in failures):
        return "known broken", f"{len(failures)} checks fail and name it: {broken[0][:120]}...", seconds
    return "FAIL", "; ".join(failures)[:2000], seconds


def chosen(ci: bool) -> list[dict[str, str]]:
    """The combinations to run: :data:`versions.CI` with ``--ci``, else :data:`versions.TESTED`, filtered by
    ``MLSYS_VERSIONS_TRITON`` / ``MLSYS_VERSIONS_NUMPY`` (one version each)."""
    combos = list(versions.CI if ci else versions.TESTED)
    for name in ("triton", "numpy"):
        want = os.environ.get(f"MLSYS_VERSIONS_{name.upper()}")
        combos = [c for c in combos if want in (None, "", c[name])]
    if not combos:
        raise SystemExit("no combination left to run: the MLSYS_VERSIONS_TRITON/NUMPY filters match none of "
                         f"{[dict(c) for c in (versions.CI if ci else versions.TESTED)]}")
    return combos


def main(argv: list[str]) -> int:
    ci = "--ci" in argv
    temporary = tempfile.mkdtemp(prefix="mlsys-versions-ci-") if ci else None
    root = Path(temporary or os.environ.get("MLSYS_VERSIONS_DIR", "/tmp/mlsys-versions"))
    root.mkdir(parents=True, exist_ok=True)
    rows, ok = [], True
    try:
        if ci:
            p = versions.PINNED
            rows.append(f"| {p['triton']} | {p['numpy']} | pass (covered by make test) | the pinned pair: the suite "
                        "runs every lab in the course's .venv | - |")
            print(rows[-1], flush=True)
        for combo in chosen(ci):
            verdict, detail, seconds = run(combo, root)
            ok &= verdict != "FAIL"
            rows.append(f"| {combo['triton']} | {combo['numpy']} | {verdict} | {detail} | {seconds:.0f} s |")
            print(rows[-1], flush=True)
    finally:
        if temporary:
            shutil.rmtree(temporary, ignore_errors=True)
    print(f"\nTested {time.strftime('%Y-%m-%d', time.gmtime())} (torch from .venv, CPU, labs 2, 3 and 5):\n")
    print("| Triton | NumPy | result | detail | time |\n|---|---|---|---|---|")
    print("\n".join(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
