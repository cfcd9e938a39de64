"""The L2 flush's bias, side by side: Part II's decode GEMV and LayerNorm timed after the old
write-flush and after the new read-flush, interleaved in one run on one GPU.

    python scripts/gpu/flush_bias.py --out $OUT/flush_bias.json

The layers are the ones of ``mlsys/bench/experiments/layer_roofline.py`` (``linear_t1``: 1x4096 by
4096x4096 bf16; ``layer_norm``: 16384x4096 bf16), built by its own ``_callable``. Each round times each
(layer, flush) pair once (CUDA events, one :func:`mlsys.bench.timing.l2_flusher` per mode), so both
flushes see the same clocks. A third column times with no flush at all (the L2-warm floor).
Prints and writes device, date, versions and the medians.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def _interleaved(torch, timing, fn, repeats: int) -> dict[str, list[float]]:
    """Per round, for each flush mode: flush, start event, ``fn()``, end event (one sync at the end)."""
    flushers = {mode: timing.l2_flusher(None, mode) for mode in timing.FLUSH_MODES}
    for _ in range(5):
        fn()
    ev = {m: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
          for m in flushers}
    torch.cuda.synchronize()
    for i in range(repeats):
        for mode, flush in flushers.items():
            flush()
            start, end = ev[mode][i]
            start.record()
            fn()
            end.record()
    torch.cuda.synchronize()
    return {m: [s.elapsed_time(e) * 1e-3 for s, e in pairs] for m, pairs in ev.items()}


def main() -> int:
    import torch

    from mlsys.bench import timing
    from mlsys.bench.experiments.layer_roofline import _callable, _cases
    from mlsys.bench.provenance import provenance

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="where to write the JSON record")
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("flush_bias needs a CUDA GPU", file=sys.stderr)
        return 2
    cases = {name: (kind, p) for name, kind, p in _cases("cuda", quick=False)}
    result: dict = {"script": "scripts/gpu/flush_bias.py", **provenance("cuda"), "repeats": args.repeats,
                    "layers": {}}
    for name in ("linear_t1", "gpt2_decode_mlp", "layer_norm", "softmax"):
        kind, p = cases[name]
        fn = _callable(kind, p, torch.bfloat16, "cuda")
        row: dict = {"params": p}
        for mode, ts in _interleaved(torch, timing, fn, args.repeats).items():
            row[mode] = timing.Timing(name, "CUDA events; write and read flushes interleaved round by round",
                                      tuple(ts), 5, timing.l2_flusher(None, mode).describe(),
                                      flush_mode=mode).to_json()
        row["none"] = timing.time_cuda(fn, what=name, repeats=args.repeats, warmup=5, flush_l2=False).to_json()
        row["write_over_read"] = row["write"]["median"] / row["read"]["median"]
        result["layers"][name] = row
        print(f"{name:16s} write-flush {row['write']['median'] * 1e6:8.2f} us  read-flush "
              f"{row['read']['median'] * 1e6:8.2f} us  no flush {row['none']['median'] * 1e6:8.2f} us  "
              f"write/read {row['write_over_read']:.3f}")
    print(json.dumps({k: result[k] for k in ("device", "software", "date")}, indent=1, default=str))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
