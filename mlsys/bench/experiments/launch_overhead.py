"""Launch overhead beyond the roofs: a synchronising round trip, an idle sync, a graph replay's host cost, the profiler's split.

The per-launch costs themselves (an eager op, an empty Triton kernel, a kernel inside a CUDA
graph, an isolated kernel) are figures of the device roofs (``python -m mlsys measure``,
``roofs.json``: ``launch_eager``, ``launch_triton``, ``launch_graph``, ``kernel_latency``), one
value each for every page. This experiment adds what explains them, using the same op
(``torch.add(x, y, out=z)`` on one-element tensors), and repeats the roofs' eager issue cost
(:func:`mlsys.bench.micro.launch_eager`) in the same run, so that its second method (the GPU-side span
of a thousand eager ops in a row) is compared with an issue cost measured beside it: host-side costs
move by tens of percent between runs and machines.
"""

from __future__ import annotations

from typing import Any

SHOWN_IN = ("chapters/03_host_and_device",)
NEEDS = "cuda"

GRAPH_KERNELS = 1000


def run(ctx: Any) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from ..timing import time_cpu, time_cuda

    x, y = torch.ones(1, device="cuda"), torch.ones(1, device="cuda")
    z = torch.empty_like(x)

    def op() -> Any:
        return torch.add(x, y, out=z)

    def op_sync() -> Any:
        torch.add(x, y, out=z)
        torch.cuda.synchronize()
        return z

    reps = 200 if ctx.quick else 2000
    res: dict[str, Any] = {"op": "torch.add(x, y, out=z), 1-element fp32 tensors"}
    t = time_cpu(op_sync, what="op then torch.cuda.synchronize()", repeats=reps, warmup=50)
    res["sync_roundtrip"] = {"value": t.median, "unit": "s", "timing": t.to_json(),
                             "method": "perf_counter around one op and a synchronize: issue, run, wait"}
    t = time_cpu(torch.cuda.synchronize, what="torch.cuda.synchronize() with nothing queued", repeats=reps, warmup=50)
    res["idle_sync"] = {"value": t.median, "unit": "s", "timing": t.to_json(),
                        "method": "perf_counter around a synchronize with an empty queue"}
    # a CUDA graph of GRAPH_KERNELS ops: the host's cost of one replay call, and the GPU time per kernel
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            op()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_KERNELS):
            op()

    def replay_then_drain() -> None:
        graph.replay()

    t = time_cpu(replay_then_drain, what=f"graph.replay() of {GRAPH_KERNELS} kernels, host side", repeats=20, warmup=2)
    torch.cuda.synchronize()
    res["graph_kernels"] = GRAPH_KERNELS
    res["graph_replay_host"] = {"value": t.median, "unit": "s", "timing": t.to_json(),
                                "method": "perf_counter around graph.replay() (the call returns once submitted)"}
    t = time_cuda(lambda: [op() for _ in range(GRAPH_KERNELS)], what=f"{GRAPH_KERNELS} eager ops issued in a row",
                  repeats=10, warmup=2, per_call=GRAPH_KERNELS, flush_l2=False)
    res["eager_gpu_span"] = {"value": t.median, "unit": "s", "timing": t.to_json(),
                             "method": f"CUDA events around {GRAPH_KERNELS} eager ops / {GRAPH_KERNELS}: the GPU's "
                                       "time between kernels when the host issues them"}
    from ..micro import launch_eager, sizes_for

    issue = launch_eager("cuda", sizes_for("cuda", quick=ctx.quick))
    res["eager_issue"] = {"value": issue["value"], "unit": issue["unit"], "timing": issue["timing"],
                          "method": "mlsys.bench.micro.launch_eager (the roofs' launch_eager), in this run: "
                                    + issue["method"]}
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(1000):
            op()
        torch.cuda.synchronize()
    split: dict[str, Any] = {}
    kernels = []
    for e in prof.key_averages():
        if e.key in ("aten::add", "cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"):
            split[e.key] = {"calls": e.count, "cpu_mean": {"value": e.cpu_time_total / max(e.count, 1), "unit": "us"},
                            "self_cpu_mean": {"value": e.self_cpu_time_total / max(e.count, 1), "unit": "us"}}
        dev = getattr(e, "self_device_time_total", 0.0)
        if dev and e.cpu_time_total == 0:
            kernels.append({"name": e.key, "calls": e.count, "gpu_mean": {"value": dev / e.count, "unit": "us"}})
    res["profiler_split"] = split
    res["profiler_kernels"] = kernels
    res["profiler_note"] = "the profiler adds its own overhead to the host times"
    return res
