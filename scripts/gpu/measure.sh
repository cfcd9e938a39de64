#!/usr/bin/env bash
# Measure a CUDA GPU's roofs with mlsys.bench and write $OUT/<device-slug>.json.
#
#   OUT=/some/dir bash scripts/gpu/measure.sh
#
# Runs in the repository root without `pip install -e .` (python -m puts the root on sys.path).
# mlsys needs pint: if it is missing, wheels are installed from $WHEELS (pint, flexcache,
# flexparser, platformdirs, typing_extensions), else from shared/wheels or scripts/gpu/wheels.
# The full measurement runs twice (the second copy goes to $OUT/run2/) so the spread between
# runs can be compared; each run takes well under a minute on an H100.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the directory that receives the results}"
mkdir -p "$OUT/run2"

if ! python3 -c "import pint" 2>/dev/null; then
  for d in "${WHEELS:-}" shared/wheels scripts/gpu/wheels; do
    if [ -n "$d" ] && ls "$d"/pint-*.whl >/dev/null 2>&1; then
      python3 -m pip install --quiet --no-index --find-links "$d" pint && break
    fi
  done
fi
python3 -c "import pint" || {
  echo "measure.sh: mlsys needs pint; set WHEELS to a directory holding its wheels" >&2; exit 3; }
python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 4)" || {
  echo "measure.sh: torch sees no CUDA device" >&2; exit 4; }

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
start=$(date +%s)
python3 -m mlsys.bench --device cuda --out "$OUT/" 2> >(tee "$OUT/progress.log" >&2)
python3 -m mlsys.bench --device cuda --no-progress --out "$OUT/run2/" > "$OUT/run2/summary.txt"
echo "both runs took $(( $(date +%s) - start )) s"

python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
first = next(p for p in sorted(out.glob("*.json")) if (out / "run2" / p.name).is_file())
a, b = json.loads(first.read_text()), json.loads((out / "run2" / first.name).read_text())
print(f"run-to-run: {first.name}")
for name, fig in a["figures"].items():
    other = b["figures"].get(name)
    if other:
        print(f"  {name:15s} {fig['value']:.4g} vs {other['value']:.4g} {fig['unit']} "
              f"({100 * (other['value'] / fig['value'] - 1):+.1f}%)")
PY
