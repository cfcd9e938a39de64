"""``python -m mlsys measure``: run every microbenchmark and the roofline check, write the JSON."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..roofline import Roof
from ..runtime.device import pick_device
from ..units import Q_
from .micro import MICROBENCHMARKS, Skip, sizes_for
from .records import REQUIRED_FIGURES, ROOFS, SCHEMA_VERSION, Measurement, path_for, validate
from .roofcheck import fixed_cost, kernels_for, run_check

__all__ = ["main", "measure", "pick_device", "output_path"]


def measure(device: str, quick: bool = False, progress: bool = True) -> dict[str, Any]:
    """Measure everything on ``device`` and return the validated measurements dict."""
    from tqdm.auto import tqdm

    from .provenance import provenance

    start = time.perf_counter()
    data = {"schema": SCHEMA_VERSION, **provenance(device)}
    sizes = sizes_for(device, quick)
    check_dtype, kernels = kernels_for(device, quick)
    figures: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    steps = len(MICROBENCHMARKS) + len(kernels)
    bar = tqdm(total=steps, desc=f"measuring {data['device']['name']}", unit="step", disable=not progress,
               file=sys.stderr)
    for name, bench in MICROBENCHMARKS.items():
        bar.set_postfix_str(name)
        try:
            figures[name] = bench(device, sizes)
        except Skip as why:
            skipped[name] = str(why)
        except Exception as exc:  # a figure that fails is recorded, not silently dropped
            if name in REQUIRED_FIGURES or name == f"matmul_{check_dtype}":
                bar.close()
                raise
            skipped[name] = f"failed: {type(exc).__name__}: {exc}"
            print(f"warning: {name} failed: {exc}", file=sys.stderr)
        bar.update(1)
    roof = Roof(Q_(figures[f"matmul_{check_dtype}"]["value"], "FLOP/s"),
                Q_(figures["copy_bandwidth"]["value"], "byte/s"), f"measured {check_dtype}")
    fixed_s, how = fixed_cost(figures, device)

    def step(name: str) -> None:
        bar.set_postfix_str(name)
        bar.update(1)

    data["roofline_check"] = run_check(device, roof, check_dtype, kernels, fixed_s, how, sizes.budget_s / 2,
                                       sizes.min_repeats, progress=step)
    bar.close()
    if device == "cuda":
        from .provenance import nvidia_smi

        after = nvidia_smi(0)
        after.pop("driver", None)
        data["device"]["clocks_after"] = after or None
    data["figures"] = figures
    data["skipped"] = skipped
    data["run"] = {"quick": quick, "duration": {"value": round(time.perf_counter() - start, 1), "unit": "s"},
                   "command": "python -m mlsys measure" + (" --quick" if quick else "")}
    return Measurement(validate(data, "measured data")).with_datasheet_fractions()


def output_path(out: str | None, slug: str) -> Path:
    """``--out``: a ``.json`` file path, or a directory (existing, or ending in ``/``) to hold
    ``<slug>/roofs.json`` (the layout of ``data/measurements``)."""
    if out is None:
        return path_for(slug)
    p = Path(out)
    if out.endswith(("/", "\\")) or p.is_dir():
        return p / slug / ROOFS
    if p.suffix != ".json":
        raise ValueError(f"--out must be a .json file or a directory, got {out!r}")
    return p


def summary(m: Measurement) -> str:
    """A short plain-text table of the figures, with datasheet fractions where known."""
    acc = m.accelerator()
    lines = [f"{m.name} ({m.slug}), {m.date}"]
    units = {"byte/s": "GB/s", "FLOP/s": "TFLOP/s", "s": "us"}
    for name in m.data["figures"]:
        q = m.figure(name)
        unit = units[m.data["figures"][name]["unit"]]
        line = f"  {name:15s} {f'{q.to(unit).m:,.4g} {unit}':>16s}"
        spec = m.datasheet_figure(name)
        if spec is not None:
            line += f"  ({(q / spec).to('').m:.0%} of datasheet, {acc.name})"
        lines.append(line)
    for name, why in m.data.get("skipped", {}).items():
        lines.append(f"  {name:15s} skipped: {why}")
    lines.append(f"  roofline check ({m.check_dtype}): kernel, predicted/measured, with overhead")
    for k in m.kernels():
        flag = "  launch-dominated" if k["launch_dominated"] else ""
        lines.append(f"    {k['kernel']:24s} {k['ratio']:8.3f} {k['ratio_with_overhead']:8.3f}{flag}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m mlsys measure [--out PATH] [--quick] [--device auto|cpu|cuda]``; returns the exit status."""
    p = argparse.ArgumentParser(prog="python -m mlsys measure",
                                description="Measure this machine's roofs and write data/measurements/<device>/roofs.json")
    p.add_argument("--out", help="output .json file, or a directory for <device-slug>/roofs.json "
                   "(default data/measurements/<device-slug>/roofs.json)")
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    device = pick_device(args.device)
    data = measure(device, quick=args.quick, progress=not args.no_progress)
    path = output_path(args.out, data["device"]["slug"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(summary(Measurement(data, str(path))))
    print(f"wrote {path}")
    failed = [k for k, v in data["skipped"].items() if v.startswith("failed")]
    return 1 if failed else 0
