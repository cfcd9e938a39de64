"""Property test: every public model function refuses infinities, NaNs, zeros (where a positive
value is required), negatives, non-integers for counts and wrong units, with a ValueError or
TypeError (DimensionError is a ValueError; KeyError for a string read as an unknown name), and returns only finite results for valid inputs.

Each entry of SIGNATURES lists a function's arguments with their kind:
  ("q", unit, allow_zero[, max])  a quantity in ``unit``      ("n", minimum)  an integer count
  ("f",)                   a fraction in [0, 1]         ("x",)          a positive plain number
  ("c", value)             a fixed argument (accelerator, dtype, ...), never corrupted
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pint
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlsys import (
    Q_,
    comm,
    fusion,
    memory_access,
    occupancy,
    overhead,
    roofline,
    serving,
    tiling,
    training_memory,
    transformer,
)

Sig = tuple[Callable[..., Any], dict[str, tuple]]

SIGNATURES: list[Sig] = [
    (roofline.arithmetic_intensity, {"flops": ("q", "FLOP", True), "bytes_moved": ("q", "byte", False)}),
    (roofline.attainable_flops, {"intensity": ("q", "FLOP/byte", True), "accel": ("c", "H100")}),
    (roofline.bound, {"intensity": ("q", "FLOP/byte", True), "accel": ("c", "H100")}),
    (roofline.time_lower_bound, {"flops": ("q", "FLOP", True), "bytes_moved": ("q", "byte", False), "accel": ("c", "H100")}),
    (roofline.Roof, {"peak": ("q", "FLOP/s", False), "bandwidth": ("q", "byte/s", False)}),
    (roofline.matmul_bytes, {"m": ("n", 1), "n": ("n", 1), "k": ("n", 1)}),
    (comm.allreduce_time, {"nbytes": ("q", "byte", False), "world_size": ("n", 1), "bandwidth": ("q", "byte/s", False),
                           "latency": ("q", "s", True)}),
    (comm.reduce_scatter_time, {"nbytes": ("q", "byte", False), "world_size": ("n", 1), "bandwidth": ("q", "byte/s", False),
                                "latency": ("q", "s", True)}),
    (comm.allgather_time, {"nbytes": ("q", "byte", False), "world_size": ("n", 1), "bandwidth": ("q", "byte/s", False),
                           "latency": ("q", "s", True)}),
    (comm.step_time, {"compute_time": ("q", "s", True), "comm_time": ("q", "s", True), "overlap": ("f",)}),
    (comm.sync_overhead, {"compute_time": ("q", "s", True), "comm_time": ("q", "s", True), "overlap": ("f",)}),
    (comm.scaling_efficiency, {"compute_time": ("q", "s", False), "gradient_bytes": ("q", "byte", False),
                               "world_size": ("n", 1), "bandwidth": ("q", "byte/s", False), "latency": ("q", "s", True),
                               "overlap": ("f",)}),
    (comm.hierarchical_allreduce_time, {"nbytes": ("q", "byte", False), "nodes": ("n", 1), "gpus_per_node": ("n", 1),
                                        "intra_bandwidth": ("q", "byte/s", False), "inter_bandwidth": ("q", "byte/s", False),
                                        "intra_latency": ("q", "s", True), "inter_latency": ("q", "s", True)}),
    (comm.alltoall_time, {"nbytes": ("q", "byte", False), "world_size": ("n", 1), "bandwidth": ("q", "byte/s", False),
                          "latency": ("q", "s", True)}),
    (comm.tree_ring_crossover, {"world_size": ("n", 1), "bandwidth": ("q", "byte/s", False), "latency": ("q", "s", True)}),
    (overhead.amdahl_speedup, {"parallel_fraction": ("f",), "speedup": ("x",)}),
    (overhead.launch_time, {"n_kernels": ("n", 1), "launch": ("q", "s", True), "kernel": ("q", "s", True)}),
    (overhead.graph_time, {"n_kernels": ("n", 1), "kernel": ("q", "s", True), "graph_launch": ("q", "s", True),
                           "per_node": ("q", "s", True)}),
    (occupancy.occupancy, {"threads_per_block": ("c", 256), "registers_per_thread": ("c", 32),
                           "shared_memory_per_block": ("q", "byte", True, 227 * 1024)}),
    (memory_access.bytes_in_flight, {"bandwidth": ("q", "byte/s", False), "latency": ("q", "s", False)}),
    (memory_access.sectors_per_warp, {"stride": ("n", 1), "itemsize": ("n", 1)}),
    (tiling.tiled_matmul_traffic, {"m": ("n", 1), "n": ("n", 1), "k": ("n", 1), "block_m": ("n", 1), "block_n": ("n", 1)}),
    (tiling.shared_memory_bytes, {"block_m": ("n", 1), "block_n": ("n", 1), "block_k": ("n", 1), "stages": ("n", 1)}),
    (fusion.fusion_time, {"numel": ("n", 1), "dtype": ("c", "bf16"), "arities": ("c", [2, 2, 1]),
                          "where": ("q", "byte/s", False), "launch": ("q", "s", True)}),
    (transformer.forward_flops, {"model": ("c", "gpt2"), "tokens": ("n", 1), "past": ("n", 0)}),
    (serving.kv_cache_bytes, {"model": ("c", "gpt2"), "tokens": ("n", 1), "batch": ("n", 1)}),
    (serving.decode_step_time, {"model": ("c", "gpt2"), "context": ("n", 0), "accel": ("c", "H100"), "batch": ("n", 1)}),
    (serving.prefill_time, {"model": ("c", "gpt2"), "prompt_tokens": ("n", 1), "accel": ("c", "H100"), "batch": ("n", 1)}),
    (serving.max_batch_in_memory, {"model": ("c", "gpt2"), "accel": ("c", "H100"), "tokens": ("n", 1)}),
    (serving.decode_critical_batch, {"model": ("c", "gpt2"), "accel": ("c", "H100"), "context": ("n", 0)}),
    (training_memory.model_state_bytes, {"params": ("n", 1), "dp": ("n", 1)}),
    (training_memory.activation_bytes_per_layer, {"seq_len": ("n", 1), "micro_batch": ("n", 1), "hidden": ("n", 1),
                                                   "heads": ("n", 1), "tensor_parallel": ("n", 1)}),
]

#: a refusal: ValueError (DimensionError and SpecError are ValueErrors), TypeError, or KeyError for
#: a string taken as a name (``model_state_bytes("3")``: no model is called "3")
REFUSED = (ValueError, TypeError, KeyError)

WRONG_UNIT = {"FLOP": "byte", "byte": "s", "FLOP/byte": "byte/s", "byte/s": "FLOP/s", "FLOP/s": "byte/s", "s": "Hz"}


def bad_values(spec: tuple) -> list[Any]:
    """Every value that must be refused for an argument of this kind."""
    kind = spec[0]
    if kind == "q":
        unit, allow_zero = spec[1], spec[2]
        out = [Q_(math.inf, unit), Q_(-math.inf, unit), Q_(math.nan, unit), Q_(-1.0, unit), Q_(1, WRONG_UNIT[unit]),
               f"inf {unit}", math.nan, math.inf, -3, "1 mB" if unit == "byte" else Q_(-0.5, unit)]
        if not allow_zero:
            out.append(Q_(0, unit))
        return out
    if kind == "n":
        out = [-1, 1.5, 2.0, True, math.nan, math.inf, "3"]
        return out + ([0] if spec[1] >= 1 else [])
    if kind == "f":
        return [-0.1, 1.5, math.nan, math.inf, "0.5"]
    if kind == "x":
        return [0, -2.0, math.nan, math.inf, True]
    return []


def valid_value(spec: tuple, draw: Callable[[Any], Any]) -> Any:
    kind = spec[0]
    if kind == "q":
        top = spec[3] if len(spec) > 3 else 1e6  # an optional upper end of the valid range
        return Q_(draw(st.floats(min_value=1e-3, max_value=top)), spec[1])
    if kind == "n":
        return draw(st.integers(min_value=max(spec[1], 1), max_value=64))
    if kind == "f":
        return draw(st.floats(min_value=0, max_value=1))
    if kind == "x":
        return draw(st.floats(min_value=1e-3, max_value=1e6))
    return spec[1]


def finite(result: Any) -> bool:
    if result is None or isinstance(result, (str, bool)):
        return True
    if isinstance(result, pint.Quantity):
        return math.isfinite(result.magnitude)
    if isinstance(result, (int, float)):
        return math.isfinite(result)
    if isinstance(result, tuple):
        return all(finite(r) for r in result)
    if isinstance(result, roofline.Roof):
        return finite((result.peak, result.bandwidth))
    return True


CASES = [(fn, name, bad) for fn, sig in SIGNATURES for name, spec in sig.items() for bad in bad_values(spec)]


@pytest.mark.slow  # 300 examples: ~2.5 s of CPU
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_public_function_refuses_bad_inputs(data):
    fn, name, bad = data.draw(st.sampled_from(CASES))
    sig = dict(SIGNATURES)[fn]
    kwargs = {k: valid_value(spec, data.draw) for k, spec in sig.items()}
    kwargs[name] = bad
    with pytest.raises(REFUSED):
        fn(**kwargs)


@pytest.mark.parametrize(("fn", "name", "bad"), CASES, ids=lambda v: getattr(v, "__name__", None) or repr(v)[:20])
def test_each_bad_input_once(fn, name, bad):
    kwargs = {k: valid_value(spec, _fixed) for k, spec in dict(SIGNATURES)[fn].items()}
    kwargs[name] = bad
    with pytest.raises(REFUSED):
        fn(**kwargs)


def _fixed(strategy: Any) -> Any:
    """A deterministic valid value: 4 for integer strategies, 0.5 for floats."""
    return 4 if "integers" in repr(strategy) else 0.5


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_valid_inputs_give_finite_results(data):
    fn, sig = data.draw(st.sampled_from(SIGNATURES))
    kwargs = {k: valid_value(spec, data.draw) for k, spec in sig.items()}
    assert finite(fn(**kwargs)), (fn.__name__, kwargs)


BAD_CLI = ["inf", "-inf", "nan", "0", "-1", "inf GB", "nan GB/s", "-3 GB", "1 mB", "2 J", "1e400", "x"]


@settings(max_examples=120, deadline=None)
@given(flag=st.sampled_from(["--flops", "--bytes", "--size", "--bandwidth", "--latency"]), bad=st.sampled_from(BAD_CLI))
def test_cli_refuses_bad_numbers_with_one_line(flag, bad):
    import contextlib
    import io

    from mlsys import cli

    if flag in ("--flops", "--bytes"):
        argv = ["bound", "H100", "--flops", "1 GFLOP", "--bytes", "1 GB"]
    else:
        argv = ["allreduce", "--size", "1 GB", "--world", "8", "--bandwidth", "450 GB/s", "--latency", "5 us"]
    if flag == "--flops" and bad == "0":
        return  # zero FLOPs is a valid kernel (a pure copy); everything else here must be refused
    i = argv.index(flag)
    argv[i:i + 2] = [f"{flag}={bad}"]  # "--flops=-inf": argparse would read a bare "-inf" as an option
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    assert code == 2, (argv, out.getvalue(), err.getvalue())
    assert out.getvalue() == ""
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlsys: error: ")
