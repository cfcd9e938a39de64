"""NCCL all-reduce over a size sweep (4 B to 1 GiB), per world size: bus bandwidth, latency floor, alpha-beta fit.

For every world size from 2 to the number of visible GPUs, ``dist.all_reduce`` of a float32
tensor is timed with CUDA events on every rank (the figure is the slowest rank's median). Each
size gets its algorithm bandwidth ``n / t`` and bus bandwidth ``n / t * 2 (p - 1) / p``
(:func:`mlsys.comm.bus_bandwidth`); the latency floor is the fastest time in the sweep, and
``latency`` (alpha, per ring step) and ``bandwidth`` (per GPU per direction) are fitted to the
ring model ``2 (p - 1) alpha + 2 (p - 1) / p * n / bandwidth`` by least squares on relative
error (:func:`mlsys.comm.fit_latency_bandwidth`).
"""

from __future__ import annotations

from typing import Any

SHOWN_IN = ("labs/release/lab4_collectives/lab4_collectives",)
NEEDS = "cuda:2"

LAUNCH_TIMEOUT = 150.0


def sizes(quick: bool) -> list[int]:
    """Message sizes in bytes: powers of 4 from 4 B to 1 GiB (to 1 MiB when quick)."""
    top = 10 if quick else 15
    return [4**k for k in range(1, top + 1)]


def summarise(nbytes: list[int], per_rank: list[dict[str, Any]], label: str, p: int) -> dict[str, Any]:
    """The sweep of implementation ``label``: per size, the slowest rank's median and its bandwidths."""
    from ...comm import algorithm_bandwidth, bus_bandwidth
    from ...units import Q_

    rows = []
    for i, n in enumerate(nbytes):
        timings = [rank[label][i] for rank in per_rank]
        slowest = max(timings, key=lambda t: t["median"])
        t = Q_(slowest["median"], "s")
        rows.append({
            "size": {"value": n, "unit": "B"},
            "time": {"value": t.magnitude, "unit": "s"},
            "algbw": {"value": algorithm_bandwidth(n, t).to("GB/s").magnitude, "unit": "GB/s"},
            "busbw": {"value": bus_bandwidth(n, t, p).to("GB/s").magnitude, "unit": "GB/s"},
            "timing": slowest,
        })
    return {"method": "median of repeated calls on each rank; the slowest rank's median is the time", "sweep": rows}


def fit(sweep: list[dict[str, Any]], p: int) -> dict[str, Any]:
    """Alpha-beta fit of a sweep and the largest relative deviation of the fitted model from it."""
    from ...comm import allreduce_time, fit_latency_bandwidth
    from ...units import Q_

    n = [row["size"]["value"] for row in sweep]
    t = [Q_(row["time"]["value"], "s") for row in sweep]
    alpha, bw = fit_latency_bandwidth(n, t, p)
    dev = [abs(float(allreduce_time(ni, p, bw, alpha) / ti) - 1) for ni, ti in zip(n, t, strict=True)]
    big = [d for ni, d in zip(n, dev, strict=True) if ni >= 2**20]
    return {
        "latency": {"value": alpha.to("s").magnitude, "unit": "s"},
        "bandwidth": {"value": bw.to("GB/s").magnitude, "unit": "GB/s"},
        "max_deviation": {"value": max(dev), "unit": "dimensionless"},
        "max_deviation_from_1MiB": {"value": max(big) if big else max(dev), "unit": "dimensionless"},
        "method": "least squares of the ring model 2(p-1) latency + 2(p-1)/p n / bandwidth on relative error, "
                  "over every size of the sweep (mlsys.comm.fit_latency_bandwidth); deviation = |model / measured - 1|",
    }


def run(ctx: Any) -> dict[str, Any]:
    import torch

    from ...runtime.launch import launch
    from ._collectives import time_allreduce

    nbytes = sizes(ctx.quick)
    repeats, warmup = (5, 2) if ctx.quick else (25, 5)
    out: dict[str, Any] = {"dtype": "float32", "backend": "nccl", "world_sizes": {}}
    for p in range(2, torch.cuda.device_count() + 1):
        per_rank = launch(time_allreduce, p, nbytes, [("library",)], repeats, warmup, backend="nccl",
                          timeout=LAUNCH_TIMEOUT, start_method="spawn")
        res = summarise(nbytes, per_rank, "library", p)
        floor = min(res["sweep"], key=lambda row: row["time"]["value"])
        res["latency_floor"] = {"value": floor["time"]["value"], "unit": "s",
                                "method": "the fastest all-reduce of the sweep (slowest rank's median)"}
        res["fit"] = fit(res["sweep"], p)
        out["world_sizes"][str(p)] = res
    return out
