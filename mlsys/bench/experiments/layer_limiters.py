"""What limits each Part II layer, measured: the layer timed and, in the same run on the same GPU, one
call profiled with Nsight Compute (:mod:`mlsys.bench.limiters`).

For every layer of ``layer_roofline`` the record holds the median time (:func:`._part2.timed`, L2
cleared by a read sweep before each call) and the ncu throughput breakdown of each kernel of one call:
DRAM, L2, L1/shared memory, instruction issue, tensor and FP32 pipes as percentages of their peaks,
achieved occupancy, the top three stall reasons, and the limiter by the rule of
:func:`mlsys.bench.limiters.classify`. Needs a CUDA GPU and ``ncu`` on the PATH.

    python -m mlsys.bench run layer_limiters --device cuda
"""

from __future__ import annotations

import subprocess
from typing import Any

from .. import limiters
from ._part2 import figure, timed, torch_dtype
from .layer_roofline import _callable, _cases

SHOWN_IN = ("chapters/06_roofline", "chapters/10_fusion_and_compilers")
NEEDS = "cuda"


def _profile(case: str) -> dict[str, Any]:
    argv = limiters.ncu_argv("layer_roofline", case)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ncu failed on {case} (rc {done.returncode}): {done.stderr[-2000:]}")
    return limiters.kernel_limiters(limiters.parse_ncu_csv(done.stdout))


def run(ctx: Any) -> dict[str, Any]:
    dt, dname = torch_dtype(ctx.device)
    out: dict[str, Any] = {"dtype": dname, "metrics": limiters.metric_names()}
    for name, kind, params in _cases(ctx.device, ctx.quick):
        t = timed(_callable(kind, params, dt, ctx.device), ctx.device, f"{name} {params}", ctx.quick)
        out[name] = {"params": params, "time": figure(t.median, "s", "median of the timed calls", t),
                     "limiters": _profile(name)}
    return out
