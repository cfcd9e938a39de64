"""``python -m mlsys.bench run NAME... | all | --list [--out DIR] [--quick]``: record experiments.

``python -m mlsys.bench measure [...]`` (or no sub-command) measures the device's roofs, the same
as ``python -m mlsys measure``.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from . import main as measure_main


def run_main(argv: list[str]) -> int:
    from .experiment import NeedsDevice, catalogue, record_path, run
    from .records import data_dir

    p = argparse.ArgumentParser(prog="python -m mlsys.bench run",
                                description="Run named experiments and write <out>/<device-slug>/<name>.json")
    p.add_argument("names", nargs="*", help="experiment names, or 'all'")
    p.add_argument("--list", action="store_true", help="list the experiments and the pages that show them")
    p.add_argument("--out", default=None, help="output folder (default data/measurements)")
    p.add_argument("--quick", action="store_true", help="small sizes, few repeats: a smoke test, never quoted")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    args = p.parse_args(argv)
    cat = catalogue()
    if args.list or not args.names:
        for e in cat.values():
            print(f"{e.name:24s} {e.needs:7s} {', '.join(e.shown_in):40s} {e.summary}")
        return 0
    names = list(cat) if args.names == ["all"] else args.names
    unknown = [n for n in names if n not in cat]
    if unknown:
        print(f"mlsys.bench: error: unknown experiment(s) {', '.join(unknown)}; known: {', '.join(cat)}",
              file=sys.stderr)
        return 2
    out = args.out or data_dir()
    try:
        from tqdm import tqdm
        progress = tqdm(names, unit="experiment", file=sys.stderr)
    except ImportError:  # the progress bar is a nicety
        progress = names
    failed = 0
    for name in progress:
        if hasattr(progress, "set_description"):
            progress.set_description(name)
        try:
            rec = run(name, quick=args.quick, device=args.device, out=out)
        except NeedsDevice as exc:
            print(f"skipped {name}: {exc}", file=sys.stderr)
            continue
        except Exception:  # one broken experiment must not lose the others' results
            failed += 1
            print(f"FAILED {name}:\n{traceback.format_exc()}", file=sys.stderr)
            continue
        print(f"wrote {record_path(out, rec['device']['slug'], name)}")
    return 1 if failed else 0


def cli(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "run":
        return run_main(argv[1:])
    if argv and argv[0] == "measure":
        argv = argv[1:]
    return measure_main(argv)


if __name__ == "__main__":
    raise SystemExit(cli())
