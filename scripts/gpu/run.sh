#!/usr/bin/env bash
# Record a CUDA GPU's roofs and named experiments on a machine where the package is not installed.
#
#   OUT=/some/dir bash scripts/gpu/run.sh                  # roofs + every experiment
#   OUT=/some/dir bash scripts/gpu/run.sh divergence ...   # roofs + the named experiments
#
# Writes $OUT/<device-slug>/roofs.json and $OUT/<device-slug>/<experiment>.json, the layout of
# data/measurements/. Runs from the repository root without `pip install -e .` (python -m puts the
# root on sys.path). mlsys needs pint: if it is missing, wheels are installed from $WHEELS.
# Everything else is python -m mlsys.bench measure / run: no measuring code here.
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the directory that receives the results}"
mkdir -p "$OUT"
if ! python3 -c "import pint" 2>/dev/null; then
  [ -n "${WHEELS:-}" ] && python3 -m pip install --quiet --no-index --find-links "$WHEELS" pint
fi
python3 -c "import pint" || { echo "run.sh: mlsys needs pint; set WHEELS to a directory holding its wheels" >&2; exit 3; }
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
python3 -m mlsys.bench measure --device cuda --no-progress --out "$OUT/"
if [ "$#" -gt 0 ]; then names=("$@"); else names=(all); fi
python3 -m mlsys.bench run "${names[@]}" --device cuda --out "$OUT"
