"""The verdict's decisions on performance evidence: pure functions of what the clean workers and the
kernel trace report (which ops and kernels ran, how much of the time the trace covers, the credit of a
share of the baseline), tested on their own. The verdict process (:mod:`mlsys.grader.decide.trusted`) applies them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mlsys.labkit import policy
from mlsys.runtime import pysource

if TYPE_CHECKING:
    from mlsys.grader.decide.perfspec import PerfCase


# ----------------------------------------------------------------------------------------------
# the decisions (pure functions of evidence: tested on their own)

VENDOR_KERNEL_MARKS = ("cublas", "cutlass", "gemm", "gemv", "xmma", "cudnn", "flash", "fmha", "nccl", "cusparse",
                       "sm90_", "sm80_", "sm100_", "ampere_", "hopper_", "volta_", "turing_", "magma", "mma_")
"""Substrings (lower case) of vendor-library kernel names: cuBLAS/cuBLASLt, CUTLASS, cuDNN,
FlashAttention, NCCL, cuSPARSELt. A kernel whose name holds one earns nothing, whoever launched it."""

TRACE_SLACK_S = 50e-6
"""Per-call time the kernel trace need not account for (launches, the wire): below it, tiny kernels
are all overhead and the trace-time cross-check says nothing."""

LIBRARY_ONLY_MARKS = ("cublas", "cutlass", "xmma", "cudnn", "nccl", "cusparse", "sm90_", "sm80_", "sm100_",
                      "ampere_", "hopper_", "volta_", "turing_", "magma")
"""Marks no hand-written kernel's name needs: a Triton kernel named with one is refused (it would pass
a library kernel of that name off as the learner's). ``gemm`` or ``flash`` are fine names for your own."""

ALWAYS_ALLOWED_KERNELS = ("memcpy", "memset")
"""Trace entries that are data movement, not compute (CUPTI names them "Memcpy HtoD", "Memset")."""


def forbidden_ops(forbid: str, ops: set[str] | list[str]) -> list[str]:
    """Ops of ``ops`` that a case forbidding ``"matmul"``, ``"compute"`` or ``"collectives"`` refuses, in the one
    spelling (``aten::mm``, ``c10d::allreduce_``): :func:`mlsys.labkit.policy.forbidden`."""
    return policy.forbidden("step" if forbid == "none" else forbid, ops)


def exchanged_point_to_point(ops: set[str] | list[str]) -> bool:
    """True when a rank's record holds a send or a receive of torch.distributed."""
    return any(policy.qualified(op) in policy.POINT_TO_POINT for op in ops)


def triton_kernel_names(cells: list[str]) -> set[str]:
    """Names of the functions the answer cells decorate with ``triton.jit`` (or ``jit``, or under
    ``triton.autotune``/``heuristics``), read from their source with ``ast``: nothing is executed."""
    import ast

    try:
        from IPython.core.inputtransformer2 import TransformerManager

        transform = TransformerManager().transform_cell
    except Exception:
        def transform(src: str) -> str:
            return src
    names: set[str] = set()
    for src in cells:
        try:
            tree = pysource.parse(transform(src))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for dec in node.decorator_list:
                    text = ast.unparse(dec)
                    if text in ("jit", "triton.jit") or text.startswith(("triton.jit(", "jit(", "triton.autotune",
                                                                          "triton.heuristics")):
                        names.add(node.name)
    return names


def kernel_refusal(forbid: str, kernels: dict[str, list[float]], harness: set[str], triton_names: set[str],
                   require_triton: bool, calls: int, measured_s: float) -> str:
    """The GPU decision from a kernel trace of one timed round ("" when it may stand).

    ``kernels``: {name: [count, microseconds]} of the round; ``harness``: names the trusted baseline
    worker's empty round traced (input generation, fingerprints); ``measured_s``: the verdict's time
    per call. Refused: a vendor-library kernel (with ``forbid="collectives"``, NCCL's send/receive kernel
    is the learner's own exchange, every other NCCL kernel a library collective); with ``forbid="compute"`` any kernel that is not the
    learner's Triton kernel or a copy; no kernel of the learner at all; a trace whose kernels account
    for under a quarter of the measured time beyond :data:`TRACE_SLACK_S` (work the trace did not see).
    """
    import re

    imitating = sorted(t for t in triton_names if any(m in t.lower() for m in LIBRARY_ONLY_MARKS))
    if imitating:
        return f"your Triton kernels are named like library kernels ({', '.join(imitating[:3])}): rename them"
    grader_named = sorted(t for t in triton_names if t.lower().startswith(GRADER_KERNEL_PREFIX))
    if grader_named:
        return f"your Triton kernels are named like the grader's own ({', '.join(grader_named[:3])}): rename them"
    own = {n: c for n, c in kernels.items() if n not in harness}
    mine = {n for n in own if any(re.fullmatch(re.escape(t) + r"(_[0-9A-Za-z]+)?", n) for t in triton_names)}
    vendor = sorted(n for n in own if forbid != "none" and n not in mine and any(m in n.lower() for m in VENDOR_KERNEL_MARKS)
                    and not (forbid == "collectives" and "sendrecv" in n.lower()))  # NCCL's point-to-point kernel
    if vendor:
        return f"vendor library kernels ran in the timed calls: {', '.join(v[:80] for v in vendor[:3])}"
    others = sorted(n for n in own if n not in mine and not n.lower().startswith(ALWAYS_ALLOWED_KERNELS))
    if forbid == "compute" and others:
        return f"kernels other than your Triton kernels ran in the timed calls: {', '.join(o[:80] for o in others[:3])}"
    if not own or (require_triton and not mine):
        return ("no kernel of yours ran in the timed calls (the trace holds "
                f"{', '.join(sorted(own)[:3]) or 'nothing but the grader'})")
    return coverage_refusal(traced_per_call(kernels, harness, calls), measured_s)


def traced_per_call(kernels: dict[str, list[float]], harness: set[str], calls: int) -> float:
    """Seconds of device time per call that a round's trace saw in kernels other than the harness's."""
    return sum(c[1] for n, c in kernels.items() if n not in harness) * 1e-6 / max(calls, 1)


GRADER_KERNEL_PREFIX = "_grader_"
"""Names of the grader's own Triton kernels (input fill, fingerprint: :mod:`mlsys.grader.clean.harnesskernels`)."""


def harness_refusal(kernels: dict[str, list[float]], harness: set[str], harness_us: float) -> str:
    """Refused when a learner's round shows less of the grader's own kernels (``harness``: the names the clean
    worker's overhead round traced: input generation, fingerprints) than that overhead round of the same calls
    (``harness_us``, its fewest microseconds): their time is subtracted from every round as the grader's, so a
    learner's process that skipped or shrank that work (a cheaper fingerprint, outputs computed from the
    seed) would gain it. Kernel durations come from the device, so a busy GPU makes them no shorter; half
    is the margin."""
    if harness_us <= 0:
        return ""
    mine = sum(c[1] for n, c in kernels.items() if n in harness)
    if mine < 0.5 * harness_us:
        return (f"the grader's own kernels (fresh inputs, fingerprints) took {mine:.4g} us in your round against "
                f"{harness_us:.4g} us in the clean worker's: the grader's work was skipped in your process")
    return ""


def coverage_refusal(traced_s: float, measured_s: float, noise_s: float = 0.0, untraced_base_s: float = 0.0) -> str:
    """Refused when the traced kernels account for under a quarter of the measured time per call beyond
    :data:`TRACE_SLACK_S` (work ran that the trace did not see). Decide it on the fastest round: hidden
    work costs time in every round, while noise (another process on the GPU, the host) only ever adds it,
    so one slow round must not refuse honest work (on an H200, 5 of 10 gradings of Lab 3's instructor
    element-wise kernel, 33 us on the device, were refused on a round measured at 190-250 us per call).
    ``noise_s``: how much the grader's own per-call overhead, subtracted from the measured time, varied
    between its rounds (60 us per call in that run, more than the kernel took): the slack grows by it.
    ``untraced_base_s``: per call, how much of the baseline's own measured time (its fastest round) its
    trace did not account for, in the clean worker that never ran learner code: time the machine adds
    to any work (other processes sharing the GPU, the host), not hidden work; the slack grows by it
    (three gradings sharing an H200 put a 33 us copy at 500 us per call on both sides)."""
    if traced_s < 0.25 * (measured_s - TRACE_SLACK_S - noise_s - max(untraced_base_s, 0.0)):
        return (f"the kernel trace accounts for {traced_s * 1e6:.3g} us of the {measured_s * 1e6:.3g} us measured per call: "
                "work ran that the trace did not see")
    return ""


def roofline_floor(flops: float, nbytes: float, roof: Any) -> float:
    """Seconds no call can beat: ``max(flops / peak, bytes / bandwidth)`` of a :class:`mlsys.roofline.Roof`."""
    from mlsys.roofline import time_lower_bound

    return float(time_lower_bound(flops, nbytes, roof).to("s").magnitude)


def credit_of(share: float, case: PerfCase) -> float:
    """Linear credit: 0 at ``zero_at``, 1 at ``full_at`` and above."""
    return min(1.0, max(0.0, (share - case.zero_at) / (case.full_at - case.zero_at)))


FULL_CREDIT_MARGIN = 1.25
"""How far past ``full_at`` the slowest learner round's share must be to stop after two rounds."""


def sure_of_full_credit(baseline_s: float, slowest_s: float, case: PerfCase) -> bool:
    """True when even the slowest learner round (``slowest_s`` per call) earns full credit against the
    fastest baseline with :data:`FULL_CREDIT_MARGIN` to spare: more rounds could not change the verdict
    unless the baseline itself ran that much faster, so grading stops early."""
    return slowest_s > 0 and baseline_s > 0 and baseline_s / slowest_s >= FULL_CREDIT_MARGIN * case.full_at


def spread(times: list[float]) -> float:
    """(max - min) / min of a list of round times: how far rounds of the same work fell apart."""
    return (max(times) - min(times)) / min(times) if times and min(times) > 0 else 0.0




RAN_SHARE = 0.5
"""Least share of a clean worker's round (from reading the request to its "done", by its own clock) that its threads must
have been runnable (running, or waiting for a core: :func:`mlsys.grader.clean.perfworker.runnable_s`). A round below
it was not run by the worker for most of its time (stopped, frozen): it is measured again. Waiting for a core
counts, so a busy machine never fails this check; on a GPU a synchronize spins or yields (CUDA's default
schedule for a few contexts), which counts as runnable too. With the fake timer it is recorded, not applied.
The worker measures it itself (the verdict's own clock would count the pipe's and its own wake-ups):
a clean worker's word is the grader's."""

STOPPED_S = 5e-3
"""...and the least time a round must have lost (not runnable) to count as not run: an honest cold round of a few
milliseconds can sleep on a page fault for a good share of itself (0.41 of a 6 ms round measured here, loaded),
while a stop long enough to matter (round 4: 8 ms in every 10) loses more than this in every round it hits."""


def did_not_run(share: float | None, wall_s: float) -> bool:
    """Whether a clean worker's round was not run by it (see :data:`RAN_SHARE` and :data:`STOPPED_S`)."""
    return share is not None and share < RAN_SHARE and (1.0 - share) * wall_s > STOPPED_S
