"""What torch.compile makes of a small chain of element-wise ops and of a softmax: the kernels
Inductor generates (Triton on a GPU, C++ on a CPU), how many there are, and the time against eager.

``bias_gelu_scale(x, b, s) = gelu(x + b) * s`` is three element-wise ops (eager: three kernels,
each reading its input from and writing its output to memory); ``softmax_rows(x)`` is a row
softmax written out by hand (max, subtract, exp, sum, divide). Times are medians of back-to-back
calls of the eager and of the compiled function; the generated source is kept (trimmed to the
kernels) so the chapter can show and read it. A third function with a ``print`` shows a graph break
through ``torch._dynamo.explain``.

Both versions also keep a per-kernel profile (:func:`._part2.kernel_profile`): the kernels one call
runs, by name (which of PyTorch's element-wise templates each eager op fell on), with their device
times from ``torch.profiler``; the page's explanation of the eager-vs-compiled gap rests on them.
"""

from __future__ import annotations

import re
from typing import Any

from ._part2 import figure, kernel_profile, rel_error, timed, torch_dtype

SHOWN_IN = ("chapters/10_fusion_and_compilers",)
NEEDS = "any"

_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.(?:triton|cpp|cpp_pybinding)\(", re.M)


def bias_gelu_scale(x: Any, b: Any, s: Any) -> Any:
    import torch.nn.functional as F

    return F.gelu(x + b) * s


def softmax_rows(x: Any) -> Any:
    m = x.amax(dim=-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(dim=-1, keepdim=True)


def with_print(x: Any) -> Any:
    y = x.sin()
    print("a print() inside a compiled function")  # Dynamo cannot trace this: a graph break
    return y.cos()


def kernels_in(code: str) -> list[str]:
    """Names of the generated kernels (Triton ``def triton_...`` or C++ ``cpp_fused_...``) in ``code``."""
    names = [m.group(1) for m in _KERNEL_DEF.finditer(code)]
    return list(dict.fromkeys(names))


def kernel_sources(code: str, limit: int = 6000) -> str:
    """The generated kernels' source, without the module's wrapper boilerplate (at most ``limit`` chars)."""
    blocks = re.findall(r"(@triton\.jit\ndef triton_.*?)(?=\n'''|\n\"\"\"|\Z)", code, flags=re.S)
    if not blocks:  # C++ kernels on a CPU
        blocks = re.findall(r"(extern \"C\".*?\n})", code, flags=re.S)
    text = "\n\n".join(b.strip() for b in blocks)
    return text[:limit]


def run(ctx: Any) -> dict[str, Any]:
    import torch
    import torch._dynamo
    from torch._inductor.utils import run_and_get_code

    dt, dname = torch_dtype(ctx.device)
    rows, cols = (8192, 8192) if ctx.device == "cuda" and not ctx.quick else (512, 1024)
    g = torch.Generator(device=ctx.device).manual_seed(0)
    x = torch.randn(rows, cols, device=ctx.device, generator=g).to(dt)
    b = torch.randn(cols, device=ctx.device, generator=g).to(dt)
    s = torch.randn(cols, device=ctx.device, generator=g).to(dt)
    out: dict[str, Any] = {"dtype": dname, "shape": [rows, cols],
                           "backend": "inductor, Triton kernels" if ctx.device == "cuda" else "inductor, C++ kernels"}
    cases = {"bias_gelu_scale": (bias_gelu_scale, (x, b, s)), "softmax_rows": (softmax_rows, (x,))}
    for name, (fn, args) in cases.items():
        torch._dynamo.reset()
        compiled = torch.compile(fn)
        result, codes = run_and_get_code(compiled, *args)
        code = "\n".join(codes)
        ref = fn(*(a.double() for a in args))
        err = rel_error(result, ref)
        t_eager = timed(lambda fn=fn, args=args: fn(*args), ctx.device, f"{name} eager", ctx.quick)
        t_comp = timed(lambda c=compiled, args=args: c(*args), ctx.device, f"{name} compiled", ctx.quick,
                       check=lambda y, ref=ref: rel_error(y, ref) < 2e-2)
        out[name] = {
            "kernels": kernels_in(code),
            "kernel_source": kernel_sources(code),
            "relative_error": {"value": err, "unit": "", "method": "||compiled - float64 eager|| / ||float64 eager||"},
            "eager": figure(t_eager.median, "s", "median time of the eager function", t_eager),
            "compiled": figure(t_comp.median, "s", "median time of the torch.compile'd function", t_comp),
            "speedup": {"value": t_eager.median / t_comp.median, "unit": "", "method": "eager / compiled medians"},
            "eager_profile": kernel_profile(lambda fn=fn, args=args: fn(*args), ctx.device,
                                            calls=3 if ctx.quick else 5),
            "compiled_profile": kernel_profile(lambda c=compiled, args=args: c(*args), ctx.device,
                                               calls=3 if ctx.quick else 5),
        }
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(with_print)(x[:4])
    out["graph_break"] = {
        "graph_count": explanation.graph_count,
        "graph_break_count": explanation.graph_break_count,
        "reasons": [str(getattr(r, "reason", r))[:300] for r in explanation.break_reasons],
    }
    torch._dynamo.reset()
    return out
