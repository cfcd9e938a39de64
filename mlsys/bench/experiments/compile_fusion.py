"""Eager vs torch.compile for an element-wise chain (x + b, GELU, * 0.5 + 1): kernels launched and time per call.

Both are timed back to back: one timed call runs the function ``REPEAT`` times with nothing else
in between, so the GPU never waits for the host to issue the next kernel (timing one call between
two events would measure the host's launch path, not the kernels). The L2 is flushed before each
timed batch. The record also keeps the compulsory traffic of both versions from
:func:`mlsys.fusion.chain_traffic`, the model the measured speed-up is compared with.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

SHOWN_IN = ("chapters/02_journey_of_a_matmul",)
NEEDS = "cuda"

REPEAT = 50


def chain(x: Any, b: Any) -> Any:
    import torch

    y = x + b
    y = torch.nn.functional.gelu(y)
    return y * 0.5 + 1.0


def run(ctx: Any) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from ...fusion import chain_traffic
    from ..timing import time_fn

    n = 4096 if ctx.quick else 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    compiled = torch.compile(chain)
    compiled(x, bias)
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    torch.testing.assert_close(compiled(x, bias), chain(x, bias), rtol=2e-2, atol=2e-2)

    def kernels(fn: Any) -> list[str]:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return [e.key for e in prof.key_averages()
                if getattr(e, "self_device_time_total", 0) > 0 and e.cpu_time_total == 0]

    def batch(fn: Any) -> Any:
        def go() -> Any:
            out = None
            for _ in range(REPEAT):
                out = fn(x, bias)
            return out
        return go

    ref = chain(x, bias)

    def ok(out: Any) -> bool:
        torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
        return True

    res: dict[str, Any] = {"function": inspect.getsource(chain), "shape": [n, n], "dtype": "bf16",
                           "repeat": REPEAT, "first_call_with_compile": {"value": compile_s, "unit": "s"}}
    for name, fn in (("eager", chain), ("compiled", compiled)):
        t = time_fn(batch(fn), "cuda", what=f"{REPEAT} back-to-back calls of the {name} chain", repeats=10,
                    warmup=2, per_call=REPEAT, check=ok)
        res[name] = {"value": t.median, "unit": "s", "timing": t.to_json(), "kernels": kernels(lambda f=fn: f(x, bias)),
                     "method": f"CUDA events around {REPEAT} back-to-back calls / {REPEAT}, L2 flushed before each "
                               "batch, median of 10 batches"}
    # the model: unfused, 4 kernels (add, gelu, mul, add) each read and write n^2 bf16; the bias is n elements
    # and counts as an outside read of ~n^2 / n of a tensor, negligible, so the chain is modelled as arities 1,1,1,1
    unfused = chain_traffic(n * n, "bf16", [1, 1, 1, 1], fused=False)
    fused = chain_traffic(n * n, "bf16", [1, 1, 1, 1], fused=True)
    res["model"] = {"unfused": {"value": unfused.to("byte").m, "unit": "byte"},
                    "fused": {"value": fused.to("byte").m, "unit": "byte"},
                    "method": "mlsys.fusion.chain_traffic(n*n, 'bf16', [1, 1, 1, 1]); the n-element bias is left out"}
    return res
