"""Grade the whole bad-submission corpus once and write the report: ``python tests/bad_submissions/grade_corpus.py OUT``.

Builds the tiny lab's course in a temporary folder, submits every ``*.nb.json`` here, grades them
with :func:`mlsys.course.teach.grade` and writes ``OUT/grades.csv`` and ``OUT/corpus_run.json``
(device, date, torch version, options, every row, and whether each row matches expected.json).
Options: ``--perf cuda|fake|off`` (default: cuda where present), ``--no-sandbox`` (machines without
bubblewrap, such as a rented GPU image: student code then runs unconfined, which is acceptable for
this corpus only because the corpus is ours).
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
REPO = HERE.parent.parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--perf", choices=["cuda", "fake", "off"])
    p.add_argument("--no-sandbox", action="store_true")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--only", help="comma-separated cases (default: all); e.g. the performance cases without a sandbox")
    a = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from mlsys.course import teach

    expected = json.loads((HERE / "expected.json").read_text())
    if a.only:
        unknown = set(a.only.split(",")) - set(expected)
        if unknown:
            p.error(f"unknown cases {sorted(unknown)}; expected some of {sorted(expected)}")
        expected = {k: v for k, v in expected.items() if k in a.only.split(",")}
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
    device = "cpu"
    try:
        import torch

        if torch.cuda.is_available():
            device = torch.cuda.get_device_name(0)
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
        want = expected.get(r.student, {})
        ok = all(matches(r, k, v) for k, v in want.items()
                 if not (k in ("performance_score", "performance") and r.performance != "graded"))
        verdicts[r.student] = {"row": {k: v for k, v in asdict(r).items() if k != "notes"}, "matches_expected": ok}
    report = {"device": device, "date": start.date().isoformat(), "started": start.isoformat(timespec="seconds"),
              "torch": torch_version, "perf": a.perf or "auto", "sandbox": not a.no_sandbox, "rows": verdicts,
              "all_match": all(v["matches_expected"] for v in verdicts.values())}
    (a.out / "corpus_run.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    print(f"{sum(v['matches_expected'] for v in verdicts.values())}/{len(verdicts)} rows as expected on {device}")
    return 0 if report["all_match"] else 1


if __name__ == "__main__":
    sys.exit(main())
