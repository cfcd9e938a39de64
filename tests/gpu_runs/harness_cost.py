"""Issue 25: where the performance grader's own per-call work goes on a GPU.

``python tests/gpu_runs/harness_cost.py OUT.json``: for each lab's timed shapes, the device time per call
(CUDA events, median of rounds of 20 calls, after a warm-up) of the worker's harness as it is
(:func:`mlsys.grader.clean.perfworker.make_inputs`, :func:`mlsys.grader.clean.perfworker.fingerprint`) and of each
variant in :mod:`mlsys.grader.clean.harnesskernels` when that module exists, with and without the torch profiler
running (the timed rounds are traced), and the host time per call to launch it.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

CASES = {  # the timed shapes and dtypes of labs/source/*/perf.toml (inputs, output)
    "lab2_matmul": ([[4096, 4096], [4096, 4096]], "float16", [4096, 4096]),
    "lab3_elementwise": ([[4096, 4096]], "float32", [4096, 4096]),
    "lab3_softmax": ([[16384, 2048]], "float32", [16384, 2048]),
    "lab5_attention": ([[4, 32, 4096, 64]] * 3, "float16", [4, 32, 4096, 64]),
}


def per_call(torch, fn, calls=20, rounds=5):  # noqa: ANN001, ANN201
    """(device seconds per call, host seconds per call) of ``fn(i)``."""
    fn(0)
    torch.cuda.synchronize()
    dev, host = [], []
    for _ in range(rounds):
        keep = []
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        for i in range(calls):
            keep.append(fn(i))
        t1 = time.perf_counter()
        b.record()
        torch.cuda.synchronize()
        dev.append(a.elapsed_time(b) * 1e-3 / calls)
        host.append((t1 - t0) / calls)
        del keep
    return statistics.median(dev), statistics.median(host)


def main() -> int:
    import torch

    from mlsys.bench.provenance import provenance
    from mlsys.grader.clean import perfworker

    try:
        from mlsys.grader.clean import harnesskernels as hk
    except ImportError:
        hk = None
    out = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "provenance": provenance("cuda"), "cases": {}}
    for name, (shapes, dt_name, oshape) in CASES.items():
        dtype = getattr(torch, dt_name)
        o = torch.randn(*oshape, device="cuda").to(dtype)
        variants = {
            "inputs_torch_normal": lambda i, s=shapes, d=dtype: perfworker.make_inputs(torch, s, d, 1000 + i, "cuda"),
            "fingerprint_now": lambda i, o=o: perfworker.fingerprint(torch, o),
        }
        if hk is not None:
            variants["inputs_hash_uniform"] = lambda i, s=shapes, d=dtype: hk.fresh_inputs(torch, s, d, 1000 + i)
            variants["fingerprint_triton"] = lambda i, o=o: hk.fingerprint(torch, o)
        row = {}
        for prof in (False, True):
            p = None
            if prof:
                from torch.profiler import ProfilerActivity, profile

                p = profile(activities=[ProfilerActivity.CUDA])
                p.__enter__()
            for vname, fn in variants.items():
                d, h = per_call(torch, fn)
                row[f"{vname}{'_traced' if prof else ''}"] = {"device_us": round(d * 1e6, 1), "host_us": round(h * 1e6, 1)}
            if p is not None:
                p.__exit__(None, None, None)
        if hk is not None:  # agreement with the float64 reference
            ref = perfworker.fingerprint(torch, o).tolist()
            got = hk.fingerprint(torch, o).tolist()
            row["fingerprint_rel_err"] = [abs(a - b) / max(abs(b), 1e-30) for a, b in zip(got, ref, strict=True)]
            x = hk.fresh_inputs(torch, shapes, dtype, 7)[0].float()
            row["hash_inputs_mean_std"] = [float(x.mean()), float(x.std())]
        out["cases"][name] = row
        print(name, json.dumps(row), flush=True)
    Path(sys.argv[1]).write_text(json.dumps(out, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
