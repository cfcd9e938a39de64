"""``python -m mlsys``: the course's figures and models at a terminal.

Subcommands: ``list``, ``show NAME``, ``ridge NAME``, ``bound NAME --flops F --bytes B``,
``allreduce --size S --world P --bandwidth BW``, ``format FMT`` and ``measure`` (which hands
over to ``mlsys.bench``). Quantities are given as strings with units (``"2 GFLOP"``,
``"1 GB"``, ``"450 GB/s"``, ``"5 us"``). A bare number is read in the base unit only for
counts (``--flops``, ``--bytes``, ``--size``: FLOP, byte), with a warning on stderr; a bare
bandwidth or latency is refused. Infinite and NaN values are refused, and so are sub-unit
prefixes on data (``"1 mB"``). Bad input, including a missing ``$MLSYS_ACCELERATORS`` file,
prints one line, ``mlsys: error: ...``, and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import pint

from mlsys.book.claims import fmt

from . import comm, hardware, numerics, roofline
from .units import BARE_UNITS, DimensionError, as_amount, as_quantity

__all__ = ["main", "build_parser"]


class CLIError(Exception):
    """A user error the CLI reports in one line."""


def _quantity(text: str, unit: str, name: str) -> pint.Quantity:
    """Parse ``text`` as a finite quantity in ``unit`` (the policy of :mod:`mlsys.units`).

    A bare number is taken in the base unit only for counts (FLOP, byte), with a warning on
    stderr; for times and rates (``--bandwidth 450``, ``--latency 5``) it is refused, because
    the reader cannot tell B/s from GB/s.
    """
    try:
        number = float(text)
    except ValueError:
        return as_quantity(text, unit, name)
    if unit not in BARE_UNITS:
        raise CLIError(f"{name} {text}: give a unit, e.g. '{text} {_EXAMPLE_UNIT.get(unit, unit)}' "
                       f"(a bare number would be read as {unit})")
    q = as_amount(number, unit, name)
    _WARNINGS.append(f"mlsys: warning: {name} {text} read as {fmt(q)}; write the unit to silence this")
    return q


_WARNINGS: list[str] = []  # printed to stderr after a command succeeds (an error prints one line only)


_EXAMPLE_UNIT = {"byte/s": "GB/s", "s": "us", "FLOP/s": "TFLOP/s"}


def _auto(q: pint.Quantity, units: Sequence[str]) -> str:
    """Format ``q`` in the largest of ``units`` (smallest first) in which it is at least 1."""
    chosen = units[0]
    for unit in units:
        if abs(q.to(unit).magnitude) >= 1:
            chosen = unit
    return fmt(q, chosen)


_TIME = ("ns", "us", "ms", "s")
_BYTES = ("byte", "kB", "MB", "GB", "TB")


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip(), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(out)


def _cmd_list(args: argparse.Namespace) -> str:
    rows = []
    dtype = numerics.canonical_dtype(args.dtype)  # an unknown dtype is an error, not a column of "-"
    for acc in hardware.all_accelerators():
        try:
            peak = fmt(acc.peak(dtype), "TFLOP/s")
            ridge = fmt(acc.ridge_point(dtype), "FLOP/byte")
        except ValueError:
            peak = ridge = "-"
        rows.append([acc.name, acc.vendor, acc.architecture, str(acc.year), peak,
                     fmt(acc.memory_bandwidth, "TB/s"), fmt(acc.memory_capacity, "GiB"), ridge])
    header = ["name", "vendor", "architecture", "year", f"{args.dtype} peak (dense)", "memory bw", "memory",
              "ridge point"]
    return _table(rows, header)


def _figure(acc: hardware.Accelerator, key: str) -> object:
    if "." in key:
        table, dtype = key.split(".", 1)
        return getattr(acc, table)[dtype]
    return getattr(acc, key)


def _cmd_show(args: argparse.Namespace) -> str:
    acc = hardware.get(args.name)
    lines = [str(acc)]
    if acc.aliases:
        lines.append(f"aliases: {', '.join(acc.aliases)}")
    if acc.memory_type:
        lines.append(f"memory type: {acc.memory_type}")
    rows = []
    labels: dict[object, str] = {}
    for key, source in acc.sources.items():
        value = _figure(acc, key)
        if key.endswith(".int8"):  # integer throughput: OP/s, not FLOP/s
            text = f"{fmt(value.to('TFLOP/s').magnitude)} TOP/s"
        else:
            text = fmt(value) if isinstance(value, (int, pint.Quantity)) else str(value)
        tag = labels.setdefault(source, f"[{len(labels) + 1}]")
        note = acc.notes.get(key, "")
        rows.append([key, text, tag + (f" {note}" if note else "")])
    lines.append(_table(rows, ["figure", "value", "source / note"]))
    for ridge_dtype in acc.dtypes:
        ridge = fmt(acc.ridge_point(ridge_dtype).to("FLOP/byte").magnitude)
        lines.append(f"ridge point {ridge_dtype}: {ridge} {'OP' if ridge_dtype == 'int8' else 'FLOP'}/byte")
    lines.append("sources:")
    lines += [f"  {tag} {src}" for src, tag in labels.items()]
    return "\n".join(lines)


def _cmd_ridge(args: argparse.Namespace) -> str:
    acc = hardware.get(args.name)
    peak, bw = acc.peak(args.dtype), acc.memory_bandwidth
    return (f"{acc.name} {args.dtype}: peak {fmt(peak, 'TFLOP/s')} / memory bandwidth {fmt(bw, 'TB/s')} "
            f"= ridge point {fmt(acc.ridge_point(args.dtype), 'FLOP/byte')}")


def _cmd_bound(args: argparse.Namespace) -> str:
    acc = hardware.get(args.name)
    flops = _quantity(args.flops, "FLOP", "--flops")
    nbytes = _quantity(args.bytes, "byte", "--bytes")
    intensity = roofline.arithmetic_intensity(flops, nbytes)
    roof = roofline.roof_of(acc, args.dtype)
    t = roofline.time_lower_bound(flops, nbytes, roof)
    return "\n".join([
        f"{acc.name}, {args.dtype}: {_auto(flops, ('FLOP', 'kFLOP', 'MFLOP', 'GFLOP', 'TFLOP', 'PFLOP'))} "
        f"moving {_auto(nbytes, _BYTES)}",
        f"arithmetic intensity  {fmt(intensity, 'FLOP/byte')}",
        f"ridge point           {fmt(roof.ridge_point, 'FLOP/byte')}",
        f"bound                 {roofline.bound(intensity, roof)}",
        f"attainable            {fmt(roofline.attainable_flops(intensity, roof), 'TFLOP/s')}",
        f"time lower bound      {_auto(t, _TIME)}",
    ])


def _cmd_allreduce(args: argparse.Namespace) -> str:
    size = _quantity(args.size, "byte", "--size")
    try:  # a bare number is refused by _quantity; anything else is a quantity or an accelerator name
        float(args.bandwidth)
        bw: object = _quantity(args.bandwidth, "byte/s", "--bandwidth")
    except ValueError:
        bw = args.bandwidth
    latency = _quantity(args.latency, "s", "--latency")
    bw_q = comm.link_bandwidth(bw)
    sent = comm.allreduce_bytes_per_gpu(size, args.world, args.algorithm)
    t = comm.allreduce_time(size, args.world, bw_q, latency, args.algorithm)
    return "\n".join([
        f"{args.algorithm} all-reduce of {_auto(size, _BYTES)} over {args.world} GPU{'' if args.world == 1 else 's'} "
        f"at {fmt(bw_q, 'GB/s')} per GPU per direction, latency {fmt(latency, 'us')} per step",
        f"bytes sent per GPU  {_auto(sent, _BYTES) if sent.magnitude else '0 B'}",
        f"time                {_auto(t, _TIME) if t.magnitude else '0 s'}",
    ])


def _cmd_format(args: argparse.Namespace) -> str:
    return numerics.bit_table(args.fmt, markdown=args.markdown)


def _cmd_measure(args: argparse.Namespace) -> int:
    try:
        from . import bench
        run = bench.main
    except (ImportError, AttributeError) as exc:
        raise CLIError(f"measure needs mlsys.bench.main, which is not available: {exc}") from None
    argv: list[str] = []
    if args.out:
        argv += ["--out", args.out]
    if args.quick:
        argv.append("--quick")
    return int(run(argv) or 0)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m mlsys``."""
    p = argparse.ArgumentParser(prog="python -m mlsys", description="Accelerator figures and performance models "
                                "from the course 'GPUs for ML, from Python to silicon'.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("list", help="table of all accelerators")
    s.add_argument("--dtype", default="bf16", help="dtype of the peak and ridge columns (default bf16)")
    s.set_defaults(func=_cmd_list)
    s = sub.add_parser("show", help="every figure of one accelerator, with its source")
    s.add_argument("name", help="accelerator name or alias, e.g. H100")
    s.set_defaults(func=_cmd_show)
    s = sub.add_parser("ridge", help="ridge point (peak / memory bandwidth) of an accelerator")
    s.add_argument("name")
    s.add_argument("--dtype", default="bf16")
    s.set_defaults(func=_cmd_ridge)
    s = sub.add_parser("bound", help="roofline bound of a kernel with given FLOPs and bytes")
    s.add_argument("name")
    s.add_argument("--flops", required=True, help='work, e.g. "2 GFLOP" (a bare number is FLOPs)')
    s.add_argument("--bytes", required=True, help='memory traffic, e.g. "1 GB" (a bare number is bytes)')
    s.add_argument("--dtype", default="bf16")
    s.set_defaults(func=_cmd_bound)
    s = sub.add_parser("allreduce", help="all-reduce bytes per GPU and time (latency-bandwidth model)")
    s.add_argument("--size", required=True, help='bytes to all-reduce per GPU, e.g. "1 GB"')
    s.add_argument("--world", required=True, type=int, help="number of GPUs")
    s.add_argument("--bandwidth", required=True,
                   help='per GPU per direction, e.g. "450 GB/s" (half a bidirectional NVLink figure), '
                        'or an accelerator name to use its interconnect figure')
    s.add_argument("--latency", default="0 us", help='per step, e.g. "5 us" (default 0)')
    s.add_argument("--algorithm", default="ring", choices=comm.ALGORITHMS)
    s.set_defaults(func=_cmd_allreduce)
    s = sub.add_parser("format", help="bit layout and key values of a number format (fp8_e4m3, bf16, ...)")
    s.add_argument("fmt", help=", ".join(numerics.FORMATS))
    s.add_argument("--markdown", action="store_true", help="print a Markdown table")
    s.set_defaults(func=_cmd_format)
    s = sub.add_parser("measure", help="measure this machine's roofs (runs mlsys.bench)")
    s.add_argument("--out", help="output JSON path (default data/measurements/<device>.json)")
    s.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    s.set_defaults(func=_cmd_measure)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI on ``argv`` (default ``sys.argv[1:]``); return the exit status (2 on bad input)."""
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    _WARNINGS.clear()
    try:
        result = args.func(args)
    except (CLIError, DimensionError, KeyError, ValueError, TypeError, pint.errors.PintError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"mlsys: error: {message}", file=sys.stderr)
        return 2
    for warning in _WARNINGS:
        print(warning, file=sys.stderr)
    if isinstance(result, int):
        return result
    try:
        print(result, flush=True)
    except BrokenPipeError:  # e.g. `python -m mlsys list | head`: the reader went away, not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
