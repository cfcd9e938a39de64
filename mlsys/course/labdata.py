"""The recorded GPU figures a lab shows beside what the learner's machine measures.

One call per lab, :func:`reference`, so the labs never walk directories for a file: it loads the
named experiment's record (``lab2_matmul``, ``lab3_fusion``) with
:func:`mlsys.bench.records.load_experiment`, the one loader every page uses, and normalises it.

The returned dict keeps the labs' plain numbers with their units in the key names (``tflops``,
``seconds``). Lab 3's cost of one eager launch is not the lab's own measurement but the device's
roofs (``records.load(DEVICE).figure("launch_eager")``), the value chapters 3 and 20 quote, and the
fusion model's predicted speedup is worked out from it here, so one launch cost is used across the book.
"""

from __future__ import annotations

import json
from typing import Any

from .page import REFERENCE_DEVICE, SECOND_DEVICE

__all__ = ["reference", "EXPERIMENTS", "DEVICE", "DEVICES"]

#: the named experiment (``mlsys.bench.experiments``) that records each lab's reference run
EXPERIMENTS = {"lab2": "lab2_matmul", "lab3": "lab3_fusion"}
#: the device whose records the labs show first (the book's reference device)
DEVICE = REFERENCE_DEVICE
#: every device with recorded lab runs, in the order the labs show them (the H200: same SMs, 1.4x the bandwidth)
DEVICES = (REFERENCE_DEVICE, SECOND_DEVICE)
#: relu(x) * 0.5 + 1.0: each op reads one tensor (the chain Lab 3 fuses)
_RELU_CHAIN_ARITIES = (1, 1, 1)


def _experiment(lab: str, device: str = DEVICE) -> dict[str, Any] | None:
    from ..bench.records import load_experiment

    try:
        rec = load_experiment(EXPERIMENTS[lab], device=device)
    except FileNotFoundError:
        return None
    data = dict(rec.results)
    data["_device"] = rec.device
    data["_day"] = rec.day
    data["_reproduce"] = rec.reproduce
    return data


def _launch_eager(device: str = DEVICE) -> tuple[float, str] | None:
    """The device's eager launch cost from its roofs (seconds) and where it comes from, or None."""
    from ..bench import records

    try:
        roofs = records.load(device)
        launch = roofs.figure("launch_eager").to("s").magnitude
    except (FileNotFoundError, KeyError):
        return None
    return float(launch), f"launch_eager of {device}'s roofs ({str(roofs.data['date'])[:10]})"


_LOAD = _experiment  # the one data source; tests point it elsewhere


def _q(node: Any, unit: str | None = None) -> float:
    """A recorded ``{value, unit}`` (converted to ``unit`` if given) or a plain number, as a float."""
    if not isinstance(node, dict):
        return float(node)
    if unit is None:
        return float(node["value"])
    from .. import Q_

    return float(Q_(node["value"], node["unit"]).to(unit).magnitude)


def reference(lab: str, device: str = DEVICE) -> dict[str, Any] | None:
    """The recorded reference run of ``"lab2"`` or ``"lab3"`` on ``device`` (a slug), normalised, or None if
    this copy has none.

    lab2: ``{"device", "day", "reproduce", "tflops": {kernel: {size: TFLOP/s}}`` (cubes m = n = k),
    ``"shapes": {kernel: {"m x n x k": TFLOP/s}}`` (other shapes, where recorded), ``"headline": {"kernel",
    "size", "tflops", "cublas_tflops", "ratio"}, "lowest_share": {kernel: {"share", "at", "over"}}`` (where recorded: the lowest
    share of cuBLAS over the sizes ``over``), "library_kernels": {size: [kernel names cuBLAS ran]}`` (where
    recorded), ``"autotune": {kernel: {size: config}}`` and ``"grouped_loads": {size: {"async_copies",
    "two_byte_loads", "shared_memory", "config"}}`` (where recorded: how the grouped kernel's compiled code loads);
    lab3: ``{"device", "day", "reproduce", "copy_bandwidth" (byte/s), "launch" (s, the roofs'
    ``launch_eager``), "launch_source", "elementwise": [{"label", "seconds": {version: s},
    "share_of_copy": {version: fraction}, "predicted_speedup"}], "softmax": [{"label", "seconds":
    {"torch": s, "triton": s}, "share_of_copy"}], "softmax_spread": [{"label", "rounds": [(how it was
    timed, share of copy)]}]}`` (the spread is empty where the record has none). ``predicted_speedup`` is
    :func:`mlsys.fusion.fusion_time` at the row's copy bandwidth and the roofs' launch cost.
    """
    if lab not in EXPERIMENTS:
        raise ValueError(f"reference: expected one of {sorted(EXPERIMENTS)}, got {lab!r}")
    data = _LOAD(lab) if device == DEVICE else _experiment(lab, device)
    if data is None:
        return None
    out: dict[str, Any] = {"device": data["_device"], "day": str(data["_day"])[:10],
                           "reproduce": data["_reproduce"]}
    if lab == "lab2":
        out["tflops"] = {k: {int(s): _q(v, "TFLOP/s") for s, v in by.items() if s.isdigit()}
                         for k, by in data["throughput"].items()}
        out["shapes"] = {k: {s: _q(v, "TFLOP/s") for s, v in by.items() if not s.isdigit()}
                         for k, by in data["throughput"].items()}
        out["lowest_share"] = {k: {"share": float(v["share"]), "at": v["at"], "over": list(v["over"])}
                               for k, v in data.get("lowest_share_of_cublas", {}).items()}
        out["library_kernels"] = {size: list(names) for size, names in data.get("library_kernels", {}).items()}
        out["autotune"] = data.get("autotune", {})
        out["grouped_loads"] = data.get("grouped_loads", {})
        head = data["headline"]
        out["headline"] = {"kernel": head["kernel"], "size": int(head["size"]),
                           "tflops": _q(head["throughput"], "TFLOP/s"),
                           "cublas_tflops": _q(head["cublas_throughput"], "TFLOP/s"),
                           "ratio": float(head["ratio"])}
        return out
    from .. import Q_, fusion

    launch = _launch_eager(device)
    if launch is None:  # no roofs for the device: the lab's own launch measurement stands in
        launch = (_q(data["launch_overhead"], "s"), "launch_overhead of the lab3_fusion record")
    out["launch"], out["launch_source"] = launch
    out["copy_bandwidth"] = _q(data["copy_bandwidth"], "byte/s")
    names = {"eager": "eager", "compile": "torch.compile", "triton": "Triton"}

    def predicted(row: dict[str, Any]) -> float:
        t = fusion.fusion_time(int(row["numel"]), row["dtype"], _RELU_CHAIN_ARITIES,
                               Q_(_q(row["copy_bandwidth"], "byte/s"), "byte/s"), Q_(out["launch"], "s"))
        return t.speedup

    out["elementwise"] = [{
        "label": f"{row['dtype']} {'x'.join(str(s) for s in row['shape'])}",
        "seconds": {names[k]: _q(row[k]["time"], "s") for k in names if row.get(k)},
        "share_of_copy": {names[k]: float(row[k]["share_of_copy"]) for k in names if row.get(k)},
        "predicted_speedup": predicted(row),
    } for row in data["elementwise"]]
    out["softmax"] = [{
        "label": f"{row['dtype']} {'x'.join(str(s) for s in row['shape'])}",
        "seconds": {k: _q(row[k]["time"], "s") for k in ("torch", "triton")},
        "share_of_copy": float(row["triton"]["share_of_copy"]),
    } for row in data["softmax"]]
    out["softmax_spread"] = [{
        "label": f"{row['dtype']} {'x'.join(str(s) for s in row['shape'])}",
        "rounds": [(r["mode"], float(r["triton_share_of_copy"])) for r in row["rounds"]],
    } for row in data.get("softmax_spread", [])]
    return out


def _main() -> None:  # pragma: no cover - a quick look from the command line
    for lab in EXPERIMENTS:
        print(lab, json.dumps(reference(lab), indent=1)[:400])


if __name__ == "__main__":  # pragma: no cover
    _main()
