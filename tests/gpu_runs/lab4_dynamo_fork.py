"""Lab 4's data-parallel check on a GPU machine, with Dynamo imported in the learner's process before the ranks fork
(``checks.worker_dp_runs``): ``python tests/gpu_runs/lab4_dynamo_fork.py OUT.json``.

Runs ``check_dp`` on 2, 3 and 4 gloo ranks with the instructor's ``data_parallel_step`` twice: first with CUDA
not yet initialised in this process, then after a CUDA operation here (a learner's kernel that used the GPU
before the check), and says whether the import initialised CUDA or started a thread.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def data_parallel_step(model: Any, x: Any, y: Any, bucket_mb: float) -> list[Any]:
    """The instructor's answer (labs/source/lab4_collectives)."""
    p, r = dist.get_world_size(), dist.get_rank()
    rows = x.shape[0] // p
    ddp = DDP(model, bucket_cap_mb=bucket_mb)
    xr, yr = x[r * rows:(r + 1) * rows], y[r * rows:(r + 1) * rows]
    loss = ((ddp(xr) - yr) ** 2).mean()
    loss.backward()
    return [param.grad for param in model.parameters()]


def main() -> dict[str, Any]:
    out: dict[str, Any] = {"cuda_available": torch.cuda.is_available(), "torch": torch.__version__,
                           "cuda_initialized_before": torch.cuda.is_initialized(),
                           "threads_before": threading.active_count()}
    t = time.perf_counter()
    import importlib

    importlib.import_module("torch._dynamo")  # what worker_dp_runs imports before forking

    out["dynamo_import_s"] = round(time.perf_counter() - t, 2)
    out["cuda_initialized_after_dynamo"] = torch.cuda.is_initialized()
    out["threads_after_dynamo"] = threading.active_count()
    from mlsys.labkit.checks import check_dp

    for label, touch in (("cuda not initialised", False), ("after a CUDA op in the parent", True)):
        if touch and torch.cuda.is_available():
            torch.ones(1, device="cuda").sum().item()
        t = time.perf_counter()
        try:
            check_dp(data_parallel_step, (2, 3, 4), batch=24)
            out[label] = {"ok": True, "s": round(time.perf_counter() - t, 2)}
        except Exception as exc:  # noqa: BLE001 - recorded, not raised
            out[label] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:400]}",
                          "s": round(time.perf_counter() - t, 2)}
    from mlsys.bench.provenance import provenance

    prov = provenance("cuda" if torch.cuda.is_available() else "cpu")  # initialises CUDA: asked last
    out["device"], out["date"], out["provenance"] = prov["device"]["name"], prov["date"], prov
    return out


if __name__ == "__main__":
    result = main()
    print(json.dumps(result, indent=1))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as fh:
            fh.write(json.dumps(result, indent=1) + "\n")
