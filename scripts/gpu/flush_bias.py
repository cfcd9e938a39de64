"""The L2 flush's bias, side by side: run the ``flush_bias`` experiment on this GPU and write its record.

    python scripts/gpu/flush_bias.py --out $OUT/flush_bias.json

The experiment (``mlsys/bench/experiments/flush_bias.py``) times Part II's decode GEMV, decode MLP,
LayerNorm and softmax after the old write-flush, the new read-flush and no flush, interleaved call by
call. This prints device, date, versions and the medians, and writes the whole record (also writable
to data/measurements/ with ``python -m mlsys.bench run flush_bias --device cuda``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    from mlsys.bench.experiment import run

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", required=True, help="the JSON file to write")
    args = ap.parse_args()
    rec = run("flush_bias", device="cuda")
    print(json.dumps({k: rec[k] for k in ("device", "software", "date", "l2_flush")}, indent=1, default=str))
    for name, row in rec["results"].items():
        if isinstance(row, dict) and "read" in row:
            print(f"{name:16s} write-flush {row['write']['value'] * 1e6:8.2f} us  read-flush "
                  f"{row['read']['value'] * 1e6:8.2f} us  no flush {row['none']['value'] * 1e6:8.2f} us  "
                  f"write/read {row['write_over_read']:.3f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rec, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
