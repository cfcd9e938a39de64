"""Launch overhead: an eager op, an empty Triton kernel, a kernel in a CUDA graph, an isolated kernel.

Each figure is time per launch (seconds) with its timing record; the CUDA-graph figure is skipped
on a CPU (it needs CUDA graphs), and says so in the record's notes.
"""

from __future__ import annotations

from typing import Any

SHOWN_IN = ("chapters/03_host_and_device", "chapters/20_measuring_a_gpu")
NEEDS = "any"


def run(ctx: Any) -> dict[str, Any]:
    from .. import micro

    sizes = micro.sizes_for(ctx.device, ctx.quick)
    results: dict[str, Any] = {}
    for name, bench in (("eager", micro.launch_eager), ("triton_empty", micro.launch_triton),
                        ("graph", micro.launch_graph), ("isolated_kernel", micro.kernel_latency)):
        try:
            results[name] = bench(ctx.device, sizes)
        except micro.Skip as why:
            ctx.note(f"{name}: {why}")
    return results
