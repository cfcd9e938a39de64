"""Silent mistakes: an accumulator in too narrow a type, a rate that no device reaches, a roof not measured
here, rate arithmetic that does not follow from its own timing, a chain's arities miscounted.

Moved out of :mod:`mlsys.labkit.checks` (issue 48, "a size it can keep"); ``checks`` re-exports its names,
the ones the labs' cells and the grader call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from mlsys.labkit.grading import GradingError
from mlsys.labkit.guardbuffers import _torch
from mlsys.labkit.guardrun import run_guarded


def accumulation_probe(k: int = 4096, big: float = 2048.0, small: float = 1.0, dtype: Any = None,
                       device: str = "cpu") -> tuple[Any, Any, Any]:
    """``(A, B, expected)`` for a 1 x k by k x 1 fp16 product that fp16 accumulation gets wrong.

    ``A`` is all ones; ``B`` holds ``big`` first and ``small`` after it. In fp32 the dot product is
    ``big + (k - 1) * small``. A partial sum held in fp16 stops growing once it reaches ``big``
    whenever ``small`` is at most half the fp16 spacing there (the spacing at 2048 is 2), so the
    fp16 answer falls short by about ``small`` for every term that follows in the same partial sum.
    ``expected`` is computed in float64 and rounded to fp16.
    """
    torch = _torch()
    dtype = dtype or torch.float16
    a = torch.ones(1, k, dtype=dtype, device=device)
    b = torch.full((k, 1), small, dtype=dtype, device=device)
    b[0, 0] = big
    expected = torch.matmul(a.double(), b.double()).to(dtype)
    return a, b, expected


def check_accumulation(fn: Callable[..., Any], *, device: str = "cpu", probes: Sequence[tuple[float, float]] = (
        (2048.0, 1.0), (2048.0, 1.0 / 32)), k: int = 4096, isolate: bool | None = None, **kwargs: Any) -> None:
    """Fail if ``fn(A, B)`` loses long sums of fp16 products: the sign of an fp16 accumulator.

    Each probe ``(big, small)`` is :func:`accumulation_probe`; the result must be within 0.5% of
    the float64 answer (fp16 output rounding is below 0.05%; an fp16 accumulator is off by 2-6%).
    """
    label = getattr(fn, "__name__", "your function")
    for big, small in probes:
        a, b, expected = accumulation_probe(k, big, small, device=device)
        out = run_guarded(fn, (a, b), names=("A", "B"), output_names=("C",), isolate=isolate,
                          label=f"{label} on a long fp16 dot product", **kwargs)
        if out["error"]:
            raise GradingError(out["error"])
        result = out["result"]
        want = float(expected.double().item())
        got = float(result.double().reshape(-1)[0].item()) if result is not None and result.numel() else math.nan
        if not math.isfinite(got) or abs(got - want) > 0.005 * abs(want):
            raise GradingError(
                f"{label}: a 1 x {k} by {k} x 1 fp16 product whose terms are {big:g} then {k - 1} times {small:g} "
                f"should give {want:g}, found {got:g}: your partial sums are rounded to fp16 (fp16 accumulation). "
                "Accumulate in fp32 (tl.zeros(..., dtype=tl.float32) and convert the loaded blocks or let tl.dot "
                "accumulate into an fp32 acc), and convert to the output dtype only at the store")


def assert_plausible_rate(label: str, claimed: Any, flops: Any, seconds_now: float, *, factor: float = 100.0) -> None:
    """Fail if ``claimed`` FLOP/s is off by more than ``factor`` from ``flops / seconds_now``.

    ``seconds_now`` is a fresh, independent timing of the same operation (pass its best time: a busy
    machine slows a timing, never speeds it up). A slip of ms for s (or us for s) is a factor of 1000;
    the default factor of 100 leaves room for a loaded 2-core machine (an honest Lab 1 point was seen
    36 times off its re-timing there, 2026-11-23); a MAC-for-FLOP slip changes the FLOPs, not this ratio.
    """
    value = claimed.to("FLOP/s").magnitude if hasattr(claimed, "to") else float(claimed)
    f = flops.to("FLOP").magnitude if hasattr(flops, "to") else float(flops)
    if not (seconds_now > 0 and math.isfinite(seconds_now)):
        raise ValueError(f"assert_plausible_rate: expected a positive time in seconds, got {seconds_now!r}")
    now = f / seconds_now
    ratio = value / now if now else math.inf
    if not (1 / factor <= ratio <= factor):
        hint = ""
        # around 1000, widened because the fresh time is a best time and the learner's a median
        if 200 <= 1 / ratio <= 20000:
            hint = " (about 1000 times too low: a time in ms used as seconds?)"
        elif 200 <= ratio <= 20000:
            hint = " (about 1000 times too high: a time in s used as ms?)"
        raise GradingError(
            f"{label}: your achieved rate is {value:.4g} FLOP/s but timing it again here gives {now:.4g} FLOP/s, "
            f"{ratio:.3g} times that{hint}; divide the FLOPs by the median time in seconds (t.median)")


def _roof_slip(ratio: float, i: int) -> str:
    """The slip a roof ``ratio`` times this machine's points to (``i``: 0 peak, 1 bandwidth), or ""."""
    if i == 1 and 3 <= ratio <= 30:  # 8 on an idle machine; a busy one moves either measurement
        return " (bits counted as bytes? that is 8 times too much)"
    if 300 <= ratio <= 3000 or 1 / 3000 <= ratio <= 1 / 300:
        return " (about 1000 times off: ms against s, or GB against MB?)"
    if ratio > 30:
        return " (far beyond this machine: a datasheet figure, or another machine's?)"
    return ""


ROOF_SLOWER = 300.0
"""How many times slower than this machine's re-measurement a learner's roof may be: as far as a busy machine can
push an honest measurement, short of a unit slip. The learner's figure is measured in its own kernel, maybe while the
machine was busiest; nothing the grader measures later can undo that. Measured (``data/grading/lab1_busy_cores.json``,
2026-12-02, the 2-core grading machine with two busy loops and other work, load 5-8): an honest fp32 matmul peak
came out 20.3 times slower than the grader's figure, and the old bound of 20 took the point. Slips stay refused:
MB for GB or s for ms is 1000 times (:func:`_roof_slip`)."""


def check_roof_measured_here(roof: Any, *, faster: float = 3.0, slower: float = ROOF_SLOWER, tries: int = 3,
                             where: str = "on the grading machine") -> None:
    """Fail unless ``roof`` (a :class:`mlsys.roofline.Roof`) is this machine's, measured.

    The grader measures the same two figures again, here, with :func:`mlsys.bench.micro.quick_roof` (copy
    bandwidth; matmul throughput in :func:`mlsys.bench.micro.roof_dtype`), on this process's device, each
    from its fastest timed call. A roof more than ``faster`` times faster than that measurement is not this
    machine's (typed in, taken from a datasheet or another machine); one more than ``slower`` times slower
    (:data:`ROOF_SLOWER`: a unit slip, beyond what load does to an honest figure) is refused too. A busy machine
    slows a measurement and never speeds it up (the learner's ran at another
    moment than the grader's, maybe while other submissions were graded beside it), so the grader compares
    with its fastest calls and, while the roof looks too fast, measures again (up to ``tries`` times in all),
    keeping the fastest figure; the error names every figure that is still off, and the slip its ratio points
    to (8 for bandwidth: bits for bytes; 1000: ms for s; far beyond: a datasheet). ``where`` names the machine in
    the message: the grading machine for the hidden test, "on this machine" for the notebook's visible check.
    """
    from mlsys.bench.micro import quick_roof, roof_dtype
    from mlsys.runtime.device import default_device

    if tries < 1:
        raise ValueError(f"check_roof_measured_here: tries must be at least 1, got {tries!r}")
    device = default_device()
    claimed = (roof.peak.to("FLOP/s").magnitude, roof.bandwidth.to("byte/s").magnitude)
    names = (f"peak ({roof_dtype(device)} matmul)", "memory bandwidth (copy)")
    units = (("TFLOP/s", 1e12), ("GB/s", 1e9))

    def too_fast(here: tuple[float, ...]) -> list[int]:  # the only refusal that a slowed measurement can cause
        return [i for i in range(2) if claimed[i] > here[i] * faster]

    here: tuple[float, ...] = quick_roof(device)
    for _ in range(tries - 1):
        if not too_fast(here):
            break
        here = tuple(max(a, b) for a, b in zip(here, quick_roof(device), strict=True))
    bad = sorted(too_fast(here) + [i for i in range(2) if claimed[i] < here[i] / slower])
    if bad:
        parts = [f"your roof's {names[i]} is {claimed[i] / units[i][1]:.4g} {units[i][0]}, this machine's "
                 f"{here[i] / units[i][1]:.4g} {units[i][0]} ({claimed[i] / here[i]:.3g} times that)"
                 f"{_roof_slip(claimed[i] / here[i], i)}" for i in bad]
        raise GradingError(
            f"measured again here, {where} ({device}): " + "; ".join(parts) +
            f" (accepted: up to {faster:g} times faster or {slower:g} times slower than this machine): build my_roof "
            "from what mlsys.bench.micro measures in this notebook, not from typed numbers, a datasheet or "
            "another machine")


def check_rate_arithmetic(label: str, claimed: Any, flops: Any, timing: Any) -> None:
    """Fail unless ``claimed`` FLOP/s is ``flops`` over one of the learner's own measured times.

    ``timing`` is the :class:`mlsys.bench.Timing` the learner's code measured (``times`` in seconds).
    Any time between its fastest and slowest call is accepted (median, mean or best: all honest), with
    0.5% for rounding. Nothing is timed again, so the check does not depend on the machine being idle:
    it checks the arithmetic, and names the slip from the ratio found (1000: ms for s; 10^6: us for s;
    2: MACs for FLOPs; 8: bits for bytes).
    """
    value = claimed.to("FLOP/s").magnitude if hasattr(claimed, "to") else float(claimed)
    f = flops.to("FLOP").magnitude if hasattr(flops, "to") else float(flops)
    times = [float(t) for t in getattr(timing, "times", ())]
    if not times or not all(t > 0 and math.isfinite(t) for t in times):
        raise GradingError(f"{label}: expected the Timing your code measured (positive times in seconds), "
                           f"found {timing!r:.120}")
    per_call = getattr(timing, "per_call", 1) or 1
    fast, slow = min(times) / per_call, max(times) / per_call
    median = float(getattr(timing, "median", sorted(times)[len(times) // 2] / per_call))
    lo, hi = f / slow * 0.995, f / fast * 1.005
    if lo <= value <= hi:
        return
    want = f / median
    ratio = value / want if want else math.inf
    hints = [(1e-3, "a time in ms used as seconds (the times of time_fn are in seconds)"),
             (1e3, "a time in seconds divided by 1000, or taken as ms"),
             (1e-6, "a time in us used as seconds"), (1e6, "a time in seconds taken as us"),
             (0.5, "MACs counted instead of FLOPs? (use the FLOPs your counts give, 2mnk for a matmul)"),
             (2.0, "FLOPs counted twice?"), (1 / 8, "bits instead of bytes somewhere?"), (8.0, "bits instead of bytes?")]
    cause = next((h for r, h in hints if 0.7 * r <= ratio <= 1.4 * r), None)
    if cause is None and not math.isfinite(value):
        cause = "a time of zero?"
    raise GradingError(
        f"{label}: expected your FLOPs ({f:.4g}) over your own measured median time ({median:.4g} s) = {want:.4g} "
        f"FLOP/s (any time between your fastest and slowest call is accepted), found {value:.4g} FLOP/s, "
        f"{ratio:.3g} times that" + (f": likely {cause}" if cause else
                                     ": is the point made from the FLOPs of this operation and its own time?"))


def check_chain_arities(arities: Any, *, ops: int, outside_tensors: int, label: str = "arities") -> None:
    """Check the structure of an element-wise chain's arities without giving the answer away.

    ``ops`` operators in the chain read ``outside_tensors`` distinct tensors from outside it; op 0
    reads only outside tensors, op ``i > 0`` reads the previous result plus ``arities[i] - 1``
    outside ones, so ``sum(arities) - (ops - 1)`` must equal ``outside_tensors``.
    """
    if not isinstance(arities, (list, tuple)) or not all(isinstance(a, int) and not isinstance(a, bool)
                                                         for a in arities):
        raise GradingError(f"{label}: expected a list of integers (one per op), found {arities!r:.80}")
    if len(arities) != ops:
        raise GradingError(f"{label}: the chain has {ops} operators, so expected {ops} arities, found {len(arities)}")
    if any(a < 1 for a in arities):
        raise GradingError(f"{label}: every op reads at least one tensor, found {list(arities)}")
    reads_outside = arities[0] + sum(a - 1 for a in arities[1:])
    if reads_outside != outside_tensors:
        raise GradingError(
            f"{label}: this chain reads {outside_tensors} tensor{'s' if outside_tensors != 1 else ''} from outside it, "
            f"but your arities count {reads_outside} (op 0 reads only outside tensors; op i > 0 reads the previous "
            "result, which counts as one of its inputs, plus arities[i] - 1 outside tensors)")
