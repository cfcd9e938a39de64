"""Online softmax (Lab 5): scores far below zero, sums kept in fp32, running sums from a large start, and
the zero padding a block may read.

Moved out of :mod:`mlsys.labkit.checks` (issue 48, "a size it can keep"); ``checks`` re-exports its names,
the ones the labs' cells and the grader call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from mlsys.labkit.grading import GradingError, assert_close
from mlsys.labkit.guardbuffers import _torch
from mlsys.labkit.proxy import RemoteFunction, zero_padded
from mlsys.labkit.workerhalves import worker_call_checked


def _plain_call(fn: Callable[..., Any], inputs: Sequence[Any], label: str, isolate: bool | None) -> Any:
    """``fn(*inputs)`` on copies in zero-filled memory (:func:`in_zero_padding`), in a child process on a CPU
    (a crash or an endless loop costs this check only; on a GPU under :mod:`.watchdog`); a learner's
    exception becomes a :class:`GradingError`. A function of the learner's kernel (a test cell run in the
    grader) is called there through :func:`worker_call_checked`, and only its plain result comes back."""
    torch = _torch()
    inputs = [in_zero_padding(t) if isinstance(t, torch.Tensor) else t for t in inputs]
    if isinstance(fn, RemoteFunction):
        reply = fn.run_helper("call_checked", *inputs, isolate=isolate, label=label)
        if not isinstance(reply, dict) or not isinstance(reply.get("error", ""), str):
            raise GradingError(f"{label}: the notebook's kernel sent back a malformed reply")
        if reply.get("error"):
            raise GradingError(reply["error"])
        return reply.get("result")
    return worker_call_checked(fn, *inputs, isolate=isolate, label=label, _raise=True)["result"]


def _mismatch(result: Any, expected: Any, *, rtol: float, atol: float, label: str) -> str | None:
    """What is wrong with ``result`` ("12 of 640 outputs NaN/Inf", "max abs error ..."), or None if it is right."""
    torch = _torch()
    if type(result) is not torch.Tensor:  # exactly: a subclass or a look-alike could answer the checks' reads
        raise GradingError(f"{label}: expected a tensor, found {type(result).__name__}")
    nonfinite = int((~torch.isfinite(result.float())).sum())
    if nonfinite:
        return f"{nonfinite} of {result.numel()} outputs NaN/Inf"
    try:
        assert_close(result, expected, rtol=rtol, atol=atol, name=label)
    except GradingError as exc:
        return str(exc).split(": ", 1)[-1]
    return None


def check_scores_far_below_zero(fn: Callable[..., Any], inputs: Sequence[Any], expected: Any, *,
                                lowest_score: float, rtol: float, atol: float, label: str,
                                isolate: bool | None = None) -> Any:
    """Run ``fn`` on inputs whose every score is far below zero; fail naming the initial max.

    Softmax is unchanged by any shift, so an online softmax whose running max starts at 0 instead of
    -inf is right whenever some score is near or above 0, and wrong only here: every exp(s - 0)
    underflows to 0, the running sum stays 0 and the output is 0 / 0 (NaN) or garbage. The inputs
    are copied into zero-filled memory (:func:`in_zero_padding`), so a read past their end (charged by
    the guarded checks) does not cost this check too; on a CPU the call runs in a child process.

    Scores of size ``|lowest_score|`` carry fp32 rounding of a few units in the last place, about
    ``|lowest_score| x 2^-22`` (the kernel's and the reference's differently), and exp turns that
    absolute error into a relative error of each weight. So the check allows at least
    ``|lowest_score| x 2^-20 x max|expected|`` of absolute error (4e-4 at a score of -204 and outputs
    of 2): honest kernels differ from the reference by about 1e-5 here, while a running max that starts
    at 0 gives NaN or outputs off by their own size.
    """
    torch = _torch()
    if isinstance(expected, torch.Tensor) and expected.numel():
        atol = max(atol, abs(lowest_score) * 2.0 ** -20 * float(expected.abs().max()))
    result = _plain_call(fn, inputs, label, isolate)
    found = _mismatch(result, expected, rtol=rtol, atol=atol, label=label)  # refuses a non-tensor, by exact type
    if found is None:
        return result
    raise GradingError(
        f"{label}: every score is far below zero (down to about {lowest_score:.0f}); expected the softmax-weighted "
        f"average of V as usual, found {found}. Likely cause: the running max starts at 0 instead of -inf (or "
        "the scores are not shifted by it). With m = 0, exp(s - m) underflows to 0 for every key, the running sum "
        "l stays 0 and the output is 0 / 0. Start it at -inf (tl.full([BLOCK_M], float(\"-inf\"), tl.float32)): "
        "the first block then sets it to its own max")


FP16_MAX = 65504.0
"""The largest finite fp16 value, (2 - 2^-10) x 2^15."""


def check_attention_sums_fp32(fn: Callable[..., Any], q: Any, k: Any, v: Any, expected: Any, *, rtol: float,
                              atol: float, label: str, isolate: bool | None = None) -> Any:
    """Run ``fn(q, k, v)`` on fp16 inputs whose running sum acc passes fp16's range; fail naming fp16 accumulation.

    Before the final division, acc = sum_j exp(s_j - max_j s_j) v_j per query row and column (s =
    q k^T / sqrt(D)). The check first works that sum out in float64 from the inputs and refuses
    inputs where it stays below :data:`FP16_MAX`. A kernel that keeps acc in fp32 from its
    ``tl.zeros`` in the program through every block is right here. One that holds acc in fp16
    anywhere (its initial dtype in the kernel, a cast back to the input dtype in the loop, an fp16
    ``out_dtype`` of ``tl.dot``) overflows to inf: every key adds to the sum, which cannot be
    rescaled below its final value. Inputs sit in zero-filled memory; on a CPU the call runs in a child
    process (:func:`_plain_call`).
    """
    torch = _torch()
    s = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    sums = torch.exp(s - s.amax(-1, keepdim=True)) @ v.double()
    largest = float(sums.abs().max())
    if largest <= FP16_MAX:
        raise ValueError(f"{label}: the inputs' largest unnormalised sum is {largest:.4g}, within fp16's range; "
                         f"choose values or a length that take it past {FP16_MAX:g}")
    result = _plain_call(fn, (q, k, v), label, isolate)
    found = _mismatch(result, expected, rtol=rtol, atol=atol, label=label)
    if found is None:
        return result
    raise GradingError(
        f"{label}: expected the softmax-weighted average of V (values up to {float(v.abs().max()):g}, so outputs "
        f"of that size), found {found}. Before the division by l, acc = sum of p * v reaches {largest:.3g} here, "
        f"more than fp16's largest value, {FP16_MAX:g}: acc is held in fp16 somewhere (fp16 accumulation), in "
        "attention_kernel's tl.zeros, in a cast back to the input dtype inside the loop, or in tl.dot's out_dtype. "
        "Keep acc, l and m in fp32 (tl.float32) from attention_kernel through attend_blocks, convert only the block "
        "of probabilities p to V's dtype for tl.dot, and convert the output to O's dtype only when you store it")


def check_running_sums_fp32(acc_from_0: Any, l_from_0: Any, acc_from_big: Any, l_from_big: Any, *, big: float,
                            label: str = "attend_blocks") -> None:
    """Fail if the same key blocks add less to running sums that start at ``big`` than to sums starting at 0.

    In fp32 both increments are equal (to rounding); held in fp16 between blocks, a sum of 2048
    (spacing 2) absorbs each block's contribution of about 1, so the increment from ``big`` is ~0.
    """
    torch = _torch()
    for name, small, large in (("acc", acc_from_0, acc_from_big), ("l", l_from_0, l_from_big)):
        inc_small = small.double()
        inc_large = large.double() - big
        bad = (inc_large - inc_small).abs() > 1e-3 * inc_small.abs().clamp_min(1e-6)
        if bool(bad.any()):
            i = tuple(int(x) for x in torch.nonzero(bad)[0])
            raise GradingError(
                f"{label}: the same four key blocks add {float(inc_small[i]):.6g} to the running {name} when it starts "
                f"at 0, but {float(inc_large[i]):.6g} when it starts at {big:g} (at index {i}); in fp32 both add the "
                f"same. The running {name} is rounded to fp16 between blocks (fp16 accumulation: the spacing of fp16 "
                f"at {big:g} is {2.0 ** (math.floor(math.log2(big)) - 10):g}, so a long sequence's later keys are "
                "lost). Keep acc, l and m in fp32 (tl.float32) and convert only the block of probabilities p to "
                "V's dtype for tl.dot")


def in_zero_padding(t: Any, pad: int = 4096) -> Any:
    """A contiguous copy of ``t`` at the start of a zero-filled buffer ``pad`` elements longer.

    For checks of one property (a causal mask, fp16 stability) whose inputs would otherwise be followed
    by arbitrary memory: a read past the end (a missing load mask, charged by the check that uses guard
    buffers) then reads zeros, which a masked score ignores, instead of NaN that would cost this check too.
    """
    return zero_padded(t, pad)  # sent to the learner's kernel, it is rebuilt in zero-filled memory there too
