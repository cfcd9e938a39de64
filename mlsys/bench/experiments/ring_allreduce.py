"""Lab 4's reference ring all-reduce against the library's (NCCL on GPUs, gloo on CPUs), and a DDP overlap step.

Per world size: the ring (reduce-scatter then all-gather with ``batch_isend_irecv``, each
message pipelined in 1 to 8 segments spread over 1, 2 or 4 process groups) and ``dist.all_reduce``
are timed one after the other in the same run over a size sweep; the ring's *share* is its bus
bandwidth over the library's at the reference size (256 MiB on GPUs) with its best variant. One
ring exchange without the add (``p2p``) gives the point-to-point ceiling of a ring step. Before timing,
the ring is checked against ``dist.all_reduce`` on lengths that are not multiples of the world
size. The overlap part times a data-parallel MLP step (compute only, all-reduce only, the two in
series, and DDP with gradient buckets reduced during backward) and sets it beside
``mlsys.comm.step_time`` and ``sync_overhead``.
"""

from __future__ import annotations

from typing import Any

SHOWN_IN = ("labs/release/lab4_collectives/lab4_collectives",)
NEEDS = "any"

VARIANTS = ((1, 1), (2, 1), (4, 1), (8, 1), (2, 2), (4, 2), (8, 2), (8, 4))  # (segments, process groups)
LAUNCH_TIMEOUT = 200.0


def plan(device: str, quick: bool) -> dict[str, Any]:
    """Sizes, world sizes, repeats and the MLP of a run on ``device``."""
    if device == "cuda":
        import torch

        worlds = list(range(2, torch.cuda.device_count() + 1))
        sizes = [4**k for k in range(6, 15)] if not quick else [4**k for k in (6, 10)]  # 4 KiB .. 256 MiB
        mlp = dict(width=4096, depth=8, batch=128, bucket_mb=25.0)
        reps = (5, 2) if quick else (20, 5)
    else:
        worlds = [2, 4] if not quick else [2]
        sizes = [4**k for k in range(5, 13)] if not quick else [4**k for k in (5, 8)]  # 1 KiB .. 16 MiB
        mlp = dict(width=256, depth=4, batch=64, bucket_mb=0.25)
        reps = (3, 1) if quick else (10, 2)
    return {"worlds": worlds, "sizes": sizes, "mlp": mlp, "repeats": reps[0], "warmup": reps[1]}


def worker(sizes: list[int], repeats: int, warmup: int, mlp: dict[str, Any]) -> dict[str, Any]:
    """Inside each rank: check the ring, time the sweep, time the overlap step."""
    import torch.distributed as dist

    from ._collectives import check_ring, ddp_overlap, time_allreduce

    p = dist.get_world_size()
    odd = [1, p - 1 if p > 1 else 1, 7 * p + 3, 1000 * p + 1]
    extra = [None, dist.new_group(), dist.new_group(), dist.new_group()]
    for s, g in VARIANTS:
        check_ring(odd, s, extra[:g])
    impls = [("library",), ("p2p",)] + [("ring", s, g) for s, g in VARIANTS]
    return {"sweep": time_allreduce(sizes, impls, repeats, warmup),
            "overlap": ddp_overlap(repeats=repeats, warmup=warmup, **mlp)}


def _overlap(per_rank: list[dict[str, Any]], p: int, mlp: dict[str, Any]) -> dict[str, Any]:
    from ... import comm
    from ...units import Q_

    def slowest(name: str) -> float:
        return max(r["overlap"][name]["median"] for r in per_rank)

    t = {k: slowest(k) for k in ("compute", "comm", "serial", "ddp")}
    compute, comm_t = Q_(t["compute"], "s"), Q_(t["comm"], "s")
    hidden = min(1.0, max(0.0, (t["serial"] - t["ddp"]) / t["comm"]))
    res: dict[str, Any] = {
        "method": "DDP(bucket_cap_mb) step vs the same step under no_sync, one flat all-reduce of every gradient, "
                  "and the two in series; slowest rank's median of each",
        "mlp": {"width": mlp["width"], "depth": mlp["depth"], "batch": mlp["batch"],
                "bucket": {"value": mlp["bucket_mb"], "unit": "MiB"}},
        "gradient": {"value": per_rank[0]["overlap"]["gradient_bytes"], "unit": "B"},
    }
    for k, v in t.items():
        res[k] = {"value": v, "unit": "s", "timing": per_rank[0]["overlap"][k]}
    res["hidden_fraction"] = {"value": hidden, "unit": "dimensionless",
                              "method": "(serial - ddp) / comm, clipped to [0, 1]: the share of the all-reduce hidden"}
    res["predicted_serial"] = {"value": comm.step_time(compute, comm_t, 0.0).to("s").magnitude, "unit": "s",
                               "method": "mlsys.comm.step_time(compute, comm, overlap=0)"}
    res["predicted_overlapped"] = {"value": comm.step_time(compute, comm_t, 1.0).to("s").magnitude, "unit": "s",
                                   "method": "mlsys.comm.step_time(compute, comm, overlap=1)"}
    res["sync_overhead_measured"] = {"value": max(0.0, (t["ddp"] - t["compute"]) / t["ddp"]), "unit": "dimensionless",
                                     "method": "(ddp - compute) / ddp"}
    res["sync_overhead_no_overlap"] = {"value": comm.sync_overhead(compute, comm_t, 0.0), "unit": "dimensionless",
                                       "method": "mlsys.comm.sync_overhead(compute, comm, overlap=0)"}
    return res


def run(ctx: Any) -> dict[str, Any]:
    from ...runtime.launch import launch
    from ._collectives import label
    from .nccl_allreduce import summarise

    pl = plan(ctx.device, ctx.quick)
    backend = "nccl" if ctx.device == "cuda" else "gloo"
    out: dict[str, Any] = {"dtype": "float32", "backend": backend, "world_sizes": {}}
    for p in pl["worlds"]:
        per_rank = launch(worker, p, pl["sizes"], pl["repeats"], pl["warmup"], pl["mlp"], backend=backend,
                          timeout=LAUNCH_TIMEOUT, start_method="spawn" if backend == "nccl" else None)
        labels = ["library"] + [label("ring", s, g) for s, g in VARIANTS]
        sweeps = {name: summarise(pl["sizes"], [r["sweep"] for r in per_rank], name, p) for name in labels}
        ref = len(pl["sizes"]) - 1  # the largest size: 256 MiB on GPUs
        size = pl["sizes"][ref]

        def busbw(name: str, i: int = ref, sweeps: dict[str, Any] = sweeps) -> float:
            return sweeps[name]["sweep"][i]["busbw"]["value"]

        best = max(VARIANTS, key=lambda v: busbw(label("ring", *v)))
        p2p = max(r["sweep"]["p2p"][ref]["median"] for r in per_rank)
        chunk = size // p
        out["world_sizes"][str(p)] = {
            "checked": "the ring equals dist.all_reduce on lengths 1, p-1, 7p+3 and 1000p+1 for every variant",
            "reference_size": {"value": size, "unit": "B"},
            "best": {"segments": best[0], "groups": best[1]},
            "share": {"value": busbw(label("ring", *best)) / busbw("library"), "unit": "dimensionless",
                      "method": "ring busbw / library busbw at the reference size, best variant, same run"},
            "share_by_variant": {label("ring", *v): {"value": busbw(label("ring", *v)) / busbw("library"),
                                                     "unit": "dimensionless"} for v in VARIANTS},
            "p2p_bandwidth": {"value": chunk / p2p / 1e9, "unit": "GB/s",
                              "method": "one ring exchange of a 1/p chunk (send right, receive left, no add): "
                                        "chunk bytes / time, per direction; slowest rank's median"},
            "library": sweeps["library"],
            "ring": sweeps[label("ring", *best)],
            "overlap": _overlap(per_rank, p, pl["mlp"]),
        }
    return out
