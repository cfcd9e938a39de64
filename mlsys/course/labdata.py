"""The recorded GPU figures a lab shows beside what the learner's machine measures.

One call per lab, :func:`reference`, so the labs never walk directories for a file and the data
source can be switched in one place: today it reads the labs' recorded runs from
:func:`mlsys.datapaths.measurements_dir` (a checkout's ``data/measurements`` or the copy shipped in
the installed package); when the named experiments ``lab2_matmul`` / ``lab3_fusion`` are recorded,
:data:`_LOAD` switches to :func:`mlsys.bench.records.load_experiment` (one line).

The returned dict is the same for both sources: ``device``, ``day``, ``reproduce`` (how to
re-measure) and the lab's figures with their units in the key names (``tflops``, ``seconds``).
"""

from __future__ import annotations

import json
from typing import Any

from ..datapaths import measurements_dir

__all__ = ["reference", "LEGACY_FILES", "EXPERIMENTS"]

#: the recorded run each lab shows (file name under the measurements directory), until the experiments land
LEGACY_FILES = {"lab2": "lab2_h100.json", "lab3": "lab3_h100.json"}
#: the named experiment (``mlsys.bench.experiments``) that will record the same figures
EXPERIMENTS = {"lab2": "lab2_matmul", "lab3": "lab3_fusion"}
DEVICE = "nvidia-h100-80gb-hbm3"


def _legacy(lab: str) -> dict[str, Any] | None:
    root = measurements_dir()
    for path in (root / LEGACY_FILES[lab], root / "labs" / LEGACY_FILES[lab]):
        if path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("tiny") or data.get("tiny_cpu_test"):
                return None  # a CPU smoke test never stands in for a GPU run
            data["_reproduce"] = f"python {data.get('script', 'scripts/gpu/' + lab + '_bench.py')} on a CUDA GPU"
            return data
    return None


def _experiment(lab: str) -> dict[str, Any] | None:
    from ..bench.records import load_experiment

    try:
        rec = load_experiment(EXPERIMENTS[lab], device=DEVICE)
    except FileNotFoundError:
        return None
    data = dict(rec.results)
    data.setdefault("device", {"name": rec.device})
    data.setdefault("date", rec.data["date"])
    data["_reproduce"] = rec.reproduce
    return data


_LOAD = _legacy  # switch to _experiment once data/measurements/<device>/lab*_*.json are recorded


def _q(node: Any) -> float:
    return float(node["value"]) if isinstance(node, dict) else float(node)


def reference(lab: str) -> dict[str, Any] | None:
    """The recorded reference run of ``"lab2"`` or ``"lab3"``, normalised, or None if this copy has none.

    lab2: ``{"device", "day", "reproduce", "tflops": {kernel: {size: TFLOP/s}}, "headline": {...}}``;
    lab3: ``{"device", "day", "reproduce", "copy_bandwidth" (byte/s), "elementwise": [{"label",
    "seconds": {version: s}, "share_of_copy": {version: fraction}, "predicted_speedup"}], "softmax":
    [{"label", "seconds": {"torch": s, "triton": s}, "share_of_copy"}]}``.
    """
    if lab not in LEGACY_FILES:
        raise ValueError(f"reference: expected one of {sorted(LEGACY_FILES)}, got {lab!r}")
    data = _LOAD(lab)
    if data is None:
        return None
    out: dict[str, Any] = {"device": data["device"]["name"], "day": str(data["date"])[:10],
                           "reproduce": data["_reproduce"]}
    if lab == "lab2":
        out["tflops"] = {k: {int(s): float(v) for s, v in by.items()} for k, by in data["tflops"].items()}
        out["headline"] = dict(data["headline"])
        return out
    out["copy_bandwidth"] = _q(data["copy_bandwidth"])
    names = {"eager": "eager", "compile": "torch.compile", "triton": "Triton"}
    out["elementwise"] = [{
        "label": f"{row['dtype']} {'x'.join(str(s) for s in row['shape'])}",
        "seconds": {names[k]: _q(row[k]["time"]) for k in names if row.get(k)},
        "share_of_copy": {names[k]: float(row[k]["share_of_copy"]) for k in names if row.get(k)},
        "predicted_speedup": float(row["predicted_speedup"]),
    } for row in data["elementwise"]]
    out["softmax"] = [{
        "label": f"{row['dtype']} {'x'.join(str(s) for s in row['shape'])}",
        "seconds": {k: _q(row[k]["time"]) for k in ("torch", "triton")},
        "share_of_copy": float(row["triton"]["share_of_copy"]),
    } for row in data["softmax"]]
    return out


def _main() -> None:  # pragma: no cover - a quick look from the command line
    for lab in LEGACY_FILES:
        print(lab, json.dumps(reference(lab), indent=1)[:400])


if __name__ == "__main__":  # pragma: no cover
    _main()
