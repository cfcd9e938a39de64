"""What limits a kernel, measured: Nsight Compute's throughput breakdown, occupancy and stall reasons.

A roofline *label* (left or right of the ridge) is not a *limiter*. The limiter is the unit a profile
of that kernel, on that GPU, shows busiest. This module builds the ``ncu`` command that profiles one
call of a Part II layer, parses its CSV, and names the limiter by one rule:

* each unit's throughput as a percentage of its peak (:data:`UNITS`: DRAM, L2, L1/shared memory,
  instruction issue, the tensor pipe, the FP32 pipe);
* the limiter is the busiest unit if it is at or above ``busy`` percent (default 60, Nsight
  Compute's own "high utilisation" line in its Speed-of-Light section);
* except that DRAM's bytes also cross the L2 (and usually L1): when the busiest unit is a memory level and
  DRAM too is at or above ``busy``, the limiter is ``"dram"``. A streaming add with DRAM at 90% and the L2
  at 93% of their peaks is DRAM-bound: the L2's figure counts the same bytes on their way in. The L2 (or
  L1) is named only when it is busy while DRAM is not, i.e. when the bytes are re-read from that level;
* otherwise no unit is near its peak: the kernel is ``"latency"``-bound (too few bytes or
  instructions in flight: Little's law), and the record shows the achieved occupancy and the top
  stall reasons beside it.

The child side (:func:`child`) builds the layer with the experiment's own code, warms it up, and
brackets exactly one call with ``cudaProfilerStart``/``Stop``, so ``ncu --profile-from-start off``
sees that call's kernels and nothing else (no flush, no warm-up).
"""

from __future__ import annotations

import csv
import io
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["UNITS", "OCCUPANCY", "STALLS", "DURATION", "metric_names", "ncu_argv", "parse_ncu_csv",
           "classify", "classify_units", "case_limiter", "MEMORY_LEVELS", "kernel_limiters", "named_limiter_holds",
           "split_cases", "child"]

UNITS: dict[str, str] = {
    "dram": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "l2": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1": "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "issue": "sm__inst_issued.avg.pct_of_peak_sustained_active",
    "tensor": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "fp32": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
}
"""Limiter name -> Nsight Compute metric (percent of that unit's peak)."""

OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
"""Achieved occupancy, percent of the SM's warp slots."""

DURATION = "gpu__time_duration.sum"
"""The kernel's duration (ns in ncu's raw page)."""

STALLS: dict[str, str] = {
    reason: f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"
    for reason in ("long_scoreboard", "short_scoreboard", "barrier", "not_selected", "math_pipe_throttle",
                   "mio_throttle", "lg_throttle", "wait", "membar", "dispatch_stall")
}
"""Stall reason -> warps stalled for that reason per issued instruction."""

LATENCY = "latency"
MEMORY_LEVELS = ("dram", "l2", "l1")
"""The memory units, outermost first: a byte read from DRAM also passes through the levels after it."""


def metric_names() -> list[str]:
    """Every metric the capture asks for, in a fixed order."""
    return [*UNITS.values(), OCCUPANCY, DURATION, *STALLS.values()]


def ncu_argv(experiment: str, case: str, out_csv: str | None = None, ncu: str | None = None) -> list[str]:
    """The command that profiles one call of ``case`` of ``experiment`` (``--profile-from-start off``:
    only the call :func:`child` brackets). ``--clock-control none`` keeps the GPU's own clocks, as the
    timed runs have them. Raises ``FileNotFoundError`` when ``ncu`` is not on the PATH."""
    exe = ncu or shutil.which("ncu")
    if exe is None:
        raise FileNotFoundError("ncu (Nsight Compute) is not on the PATH; install it or pass ncu=...")
    argv = [exe, "--csv", "--page", "raw", "--profile-from-start", "off", "--clock-control", "none",
            "--metrics", ",".join(metric_names())]
    if out_csv:
        argv += ["--log-file", out_csv]
    return [*argv, sys.executable, "-m", "mlsys.bench.limiters", experiment, case]


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[dict[str, Any]]:
    """Rows of ``ncu --csv --page raw``: one dict per kernel, ``{"name", "metrics": {metric: float}}``.

    ncu prints its own log lines (``==PROF==``) before the table, and a units row after the header;
    both are skipped. A row without the kernel's name column is an error.
    """
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        raise ValueError("no CSV table in the ncu output (was the call bracketed by cudaProfilerStart/Stop?)")
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header = rows[0]
    if "Kernel Name" not in header:
        raise ValueError(f"ncu CSV has no 'Kernel Name' column; header: {header[:8]}")
    out = []
    for row in rows[1:]:
        rec = dict(zip(header, row, strict=False))
        if not rec.get("ID", "").strip().isdigit():  # the units row
            continue
        metrics = {m: v for m in metric_names() if (v := _number(rec.get(m, ""))) is not None}
        out.append({"name": rec["Kernel Name"], "metrics": metrics})
    return out


def classify_units(units: Mapping[str, float], busy: float = 60.0) -> str:
    """The limiter from each unit's throughput (percent of its peak, keyed by :data:`UNITS`' names).

    The busiest unit if at or above ``busy`` percent, else ``"latency"``; a busiest memory level gives way to
    ``"dram"`` when DRAM is at or above ``busy`` too (the same bytes, counted at each level they cross). A unit
    missing from ``units`` raises ``KeyError`` naming it (a missing input is a failure)."""
    if not 0 < busy <= 100:
        raise ValueError(f"busy must be a percentage in (0, 100], got {busy}")
    missing = [u for u in UNITS if u not in units]
    if missing:
        raise KeyError(f"the profile lacks {missing}; cannot name a limiter")
    unit = max(UNITS, key=lambda u: units[u])
    if units[unit] < busy:
        return LATENCY
    if unit in MEMORY_LEVELS and units["dram"] >= busy:
        return "dram"
    return unit


def classify(metrics: Mapping[str, float], busy: float = 60.0) -> str:
    """:func:`classify_units` of Nsight Compute's metrics (:data:`UNITS`' metric names as keys).

    A metric missing from ``metrics`` raises ``KeyError`` naming it (a missing input is a failure); a ``busy``
    outside (0, 100] raises ``ValueError`` (in :func:`classify_units`).
    """
    missing = [m for m in UNITS.values() if m not in metrics]
    if missing:
        raise KeyError(f"the profile lacks {missing}; cannot name a limiter")
    return classify_units({u: metrics[m] for u, m in UNITS.items()}, busy)


def case_limiter(record_case: Mapping[str, Any]) -> str:
    """The limiter of a recorded case (a :func:`kernel_limiters` result) by today's rule: that of its longest
    kernel, classified from the throughputs the record keeps. A record made under an older rule is judged by
    this one; its stored label is not read."""
    kernels = record_case.get("kernels")
    if not kernels:
        raise KeyError("the recorded case has no profiled kernels; cannot name a limiter")
    longest = max(kernels, key=lambda k: k["duration"]["value"])
    return classify_units(longest["units"], record_case.get("busy_threshold", 60.0))


def kernel_limiters(kernels: Sequence[Mapping[str, Any]], busy: float = 60.0) -> dict[str, Any]:
    """The record of one case: each kernel with its limiter and top stalls, and the case's limiter,
    that of its longest kernel (by :data:`DURATION`)."""
    if not kernels:
        raise ValueError("no kernels were profiled")
    rows = []
    for k in kernels:
        m = k["metrics"]
        stalls = sorted(((r, m[name]) for r, name in STALLS.items() if name in m), key=lambda p: -p[1])[:3]
        duration = {"value": m.get(DURATION, 0.0) * 1e-9, "unit": "s", "method": f"ncu {DURATION}"}
        rows.append({"name": k["name"], "limiter": classify(m, busy), "units": {u: m[n] for u, n in UNITS.items()},
                     "occupancy": m.get(OCCUPANCY), "duration": duration, "top_stalls": stalls})
    longest = max(rows, key=lambda r: r["duration"]["value"])
    return {"kernels": rows, "limiter": longest["limiter"], "busy_threshold": busy,
            "rule": "busiest unit at or above the threshold, DRAM when a memory level is busiest and DRAM is at or "
                    "above it too, else latency (see mlsys.bench.limiters)"}


def split_cases(kernels: Sequence[Mapping[str, Any]], boundary: str, n: int) -> list[list[Mapping[str, Any]]]:
    """ncu's kernels of one profiled run, in launch order, split into ``n`` cases at each kernel whose name
    contains ``boundary`` (run once after every case; the boundary rows themselves are dropped).

    Raises ValueError unless exactly ``n`` boundaries are found, naming the kernels seen: a split that
    does not match the cases would attach one case's profile to another.
    """
    out: list[list[Mapping[str, Any]]] = [[]]
    for k in kernels:
        if boundary in k["name"]:
            out.append([])
        else:
            out[-1].append(k)
    if len(out) != n + 1 or out[-1]:
        raise ValueError(f"expected {n} cases each closed by a {boundary!r} kernel; found {len(out) - 1} boundaries "
                         f"in {[k['name'][:40] for k in kernels]}")
    return out[:-1]


def named_limiter_holds(record_case: Mapping[str, Any], named: str) -> bool:
    """Whether a page may say ``named`` limits this case: :func:`case_limiter` must give that name."""
    if named not in (*UNITS, LATENCY):
        raise ValueError(f"unknown limiter {named!r}; expected one of {[*UNITS, LATENCY]}")
    return case_limiter(record_case) == named


def child(experiment: str, case: str) -> None:
    """Build ``case`` with ``experiment``'s own code, warm it up, and profile exactly one call (an experiment
    other than ``layer_roofline`` profiles through its own ``profile_child(case)``)."""
    import importlib

    import torch

    if experiment != "layer_roofline":
        module = importlib.import_module(f"mlsys.bench.experiments.{experiment}")
        if not hasattr(module, "profile_child"):
            raise ValueError(f"limiter capture knows layer_roofline and experiments with a profile_child; "
                             f"{experiment!r} has none")
        module.profile_child(case)
        return
    from .experiments import layer_roofline

    cases = {name: (kind, p) for name, kind, p in layer_roofline._cases("cuda", quick=False)}
    if case not in cases:
        raise KeyError(f"unknown case {case!r}; layer_roofline has {sorted(cases)}")
    kind, params = cases[case]
    fn = layer_roofline._callable(kind, params, torch.bfloat16, "cuda")
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    child(*sys.argv[1:3])
