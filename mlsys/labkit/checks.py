"""Kernel checks for the labs that turn a learner's mistake into feedback instead of a dead notebook.

A Triton kernel with a missing mask does not fail politely: under the interpreter an out-of-bounds
store can kill the Python process, and a read past the end returns whatever lies there. The checks
here run a learner's launcher on tensors placed inside larger **guard buffers** and report what the
kernel did outside them, with index ranges:

* inputs sit in the middle of a buffer filled with NaN (and, for matrices, with a few NaN columns
  between rows, so a wrong row stride lands in the gaps): a read of the guard turns into NaN in the
  output, and under the interpreter every load is also checked address by address;
* outputs allocated by the launcher (``torch.empty``, ``torch.empty_like``, ...) are intercepted and
  placed in a buffer filled with :data:`MAGIC`: a store into the guard is found by comparing the
  guard with the sentinel afterwards ("your kernel wrote 17 elements past the end of C: check the
  store mask"), and an output element still holding :data:`MAGIC` was never written (dropped edge
  tiles, a grid too small);
* on a CPU the call runs in a child process (:func:`mlsys.labkit.grading.run_isolated`), so a crash
  costs this check only, and an endless loop is stopped after :data:`CPU_LIMIT` seconds of
  computation (CPU time: a busy laptop slows honest work without using it up) or :data:`WALL_LIMIT`
  seconds of waiting, with a "still running" line every :data:`HEARTBEAT` seconds; on a GPU a fork
  would lose the CUDA context, so the call runs in place and an illegal memory access is reported as
  such (the CUDA context is then lost for the rest of the run), and a kernel that never finishes
  ends the process after :data:`mlsys.labkit.watchdog.GPU_LIMIT` seconds with a message naming the
  check (:mod:`mlsys.labkit.watchdog`; at grading the kernel is restarted and only that cell is lost).

Warnings raised while a check runs are printed on stdout: nbgrader scores a test cell that writes
to stderr as failed, and the course's own warnings must never cost points.

Under the interpreter the checks also count the elements each kernel loads from each input
(:class:`Tracker`), which catches a fused kernel that reads its input twice. Further helpers cover
the silent mistakes: :func:`accumulation_probe` (a product that fp16 accumulation gets wrong),
:func:`check_rate_arithmetic` (an achieved FLOP/s that is not the learner's FLOPs over the learner's
own measured time: ms taken as seconds, MACs for FLOPs; nothing is timed again),
:func:`check_chain_arities` (the structure of an element-wise chain), Lab 4's collectives
(:func:`check_ring`, which refuses a library collective recorded in any rank and names a dtype slip, an
invalid rank, a step count, chunk indices or an unfinished request through :func:`diagnose_ring`;
:func:`check_dp`; each with a worker-side half, ``worker_*_runs``, that starts the ranks where the
learner's function lives) and Lab 5's online softmax
(:func:`check_scores_far_below_zero` for the initial max, :func:`check_running_sums_fp32` for fp16
accumulation in the inner loop, :func:`check_attention_sums_fp32` for it anywhere in the kernel,
:func:`in_zero_padding` so one mistake is charged to one check).
:func:`assert_plausible_rate` (a rate against a fresh timing) is kept for callers outside the labs.

Every check raises :class:`mlsys.labkit.grading.GradingError` with a message that names the mistake.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from mlsys.labkit.grading import GradingError, assert_close, run_isolated  # noqa: F401 - checks.run_isolated too

# What moved out of this module (issue 48, "a size it can keep"), importable from here as before.
from mlsys.labkit.guardbuffers import (  # noqa: F401
    _OUTPUT_FACTORIES,
    MAGIC,
    Guarded,
    Tracker,
    _alloc,
    _CaptureOutputs,
    _harness,
    _torch,
    guard_input,
)
from mlsys.labkit.guardrun import (  # noqa: F401
    CPU_LIMIT,
    HEARTBEAT,
    WALL_LIMIT,
    GuardReport,
    _call_to_bytes,
    _guarded_call,
    _guarded_reply,
    _inspect,
    _launch_record,
    _packed_call,
    _positions,
    _quiet_call,
    _ranges,
    _runs_here_on_gpu,
    _show_warnings,
    _unpack,
    _where,
    check_kernel,
    explain_exception,
    run_guarded,
)
from mlsys.labkit.proxy import HARNESS, RemoteFunction, zero_padded  # noqa: F401 - as before the split
from mlsys.labkit.ringworker import (  # noqa: F401
    _RECORD,
    _TAG_BASE,
    C10D_NAMESPACES,
    COLLECTIVES,
    FORBIDDEN_COLLECTIVES,
    POINT_TO_POINT_OPS,
    PROCESS_GROUP_COLLECTIVES,
    RING_ALLOWED_OPS,
    _check_sends,
    _decode,
    _diagnose_ring,
    _held_irecv,
    _HeldReceive,
    _launched,
    _learner,
    _rank_traffic,
    _ring_rank,
    _shares,
    _tagged_run,
    _tagged_runs,
    _traffic,
    _trap_collectives,
    _worker_half,
    check_ring_traffic,
    diagnose_ring,
    dispatch_recorder,
    library_collectives,
    torch_equal,
    worker_ring_runs,
    worker_tagged_runs,
)
from mlsys.labkit.silentchecks import (  # noqa: F401
    _roof_slip,
    accumulation_probe,
    assert_plausible_rate,
    check_accumulation,
    check_chain_arities,
    check_rate_arithmetic,
    check_roof_measured_here,
)
from mlsys.labkit.softmaxchecks import (  # noqa: F401
    FP16_MAX,
    _mismatch,
    _plain_call,
    check_attention_sums_fp32,
    check_running_sums_fp32,
    check_scores_far_below_zero,
    in_zero_padding,
)
from mlsys.labkit.workerhalves import (  # noqa: F401
    _PROBE_SOURCE,
    calls_of,
    running_sums_probe,
    with_shifted_argument,
    worker_call_checked,
    worker_run_guarded,
)
from mlsys.runtime.device import has_cuda  # noqa: F401 - checks.has_cuda, as before the split

__all__ = [
    "MAGIC",
    "Guarded",
    "Tracker",
    "GuardReport",
    "guard_input",
    "run_guarded",
    "check_kernel",
    "accumulation_probe",
    "check_accumulation",
    "assert_plausible_rate",
    "check_roof_measured_here",
    "check_chain_arities",
    "explain_exception",
    "check_rate_arithmetic",
    "COLLECTIVES",
    "FORBIDDEN_COLLECTIVES",
    "PROCESS_GROUP_COLLECTIVES",
    "C10D_NAMESPACES",
    "POINT_TO_POINT_OPS",
    "RING_ALLOWED_OPS",
    "dispatch_recorder",
    "library_collectives",
    "diagnose_ring",
    "check_ring",
    "make_mlp",
    "check_dp",
    "check_scores_far_below_zero",
    "check_running_sums_fp32",
    "check_attention_sums_fp32",
    "FP16_MAX",
    "in_zero_padding",
    "calls_of",
    "running_sums_probe",
    "worker_run_guarded",
    "worker_call_checked",
    "worker_ring_runs",
    "worker_tagged_runs",
    "worker_dp_runs",
]


# ----------------------------------------------------------------------------------------------
# collectives (Lab 4), the grader's side (the ranks' side is mlsys.labkit.ringworker): a ring all-reduce and a
# data-parallel step, run in every rank on inputs the grader chose
#
# Where a test cell runs in the grader (mlsys.grader.learnerside.testcells), the learner's function stays in the learner's
# kernel: the worker-side halves (worker_ring_runs, worker_tagged_runs, worker_dp_runs) start the ranks from
# there, run the function on the tensors the grader sent, and return, per rank, the tensors afterwards and the
# operations (c10d collectives included) each rank's call dispatched. The grader-side halves (check_ring,
# diagnose_ring, check_dp) draw the inputs, compute every expected value themselves and decide. In the
# learner's own notebook (a self-check) the same halves run one after the other in one process.


def _grader_generator() -> Any:
    """A generator seeded from the OS: inputs no answer cell can know in advance."""
    return _torch().Generator().manual_seed(int.from_bytes(os.urandom(6), "little"))


def _ring_input(n: int, dtype: str, gen: Any) -> Any:
    torch = _torch()
    if dtype.startswith("int"):
        return torch.randint(-1000, 1000, (n,), generator=gen, dtype=getattr(torch, dtype))
    return torch.randn(n, generator=gen, dtype=torch.float64).to(getattr(torch, dtype))


def _ranks_reply(reply: Any, p: int, what: str) -> list[Any]:
    """The per-rank list of a worker-side half's reply, or the :class:`GradingError` its error means."""
    if not isinstance(reply, dict):
        raise GradingError(f"{what}: the notebook's kernel sent back a malformed reply")
    if reply.get("error") in ("timeout", "failed"):
        raise GradingError(str(reply.get("message", ""))[:3000] or what)
    ranks = reply.get("ranks")
    if not isinstance(ranks, list) or len(ranks) != p:
        raise GradingError(f"{what}: the notebook's kernel sent back a malformed reply (expected {p} ranks)")
    return ranks


def _rank_ops(rows: Any) -> set[str]:
    ops: set[str] = set()
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and isinstance(row.get("ops"), list):
            ops |= {str(op) for op in row["ops"]}
    return ops


def check_ring(fn: Callable[..., Any], world_sizes: Sequence[int], lengths: Sequence[int],
               dtypes: Sequence[str] = ("float32",), timeout: float = 30.0, what: str = "ring_allreduce") -> None:
    """Run ``fn`` as an all-reduce on ``world_sizes`` processes for each length and dtype; fail with a cause.

    Every rank gets inputs drawn here (from the OS's randomness) and its result and its input afterwards
    are compared with the sum computed here. Every rank's call records the operations it dispatched: a
    library collective (``c10d::allreduce_`` and the like, however it was reached: ``dist.all_reduce``,
    ``dist.group.WORLD.allreduce``, a process group's method) fails, and so does a rank of several that
    sent and received nothing through torch.distributed. float32 runs first; a ring right in float32 and
    wrong (or dying) in another dtype is reported as a dtype slip. Wrong sums are explained by
    :func:`diagnose_ring`.
    """
    from mlsys.labkit.grading import assert_no_library_calls

    assert_no_library_calls(fn, forbidden=FORBIDDEN_COLLECTIVES, name=what)
    torch = _torch()
    gen = _grader_generator()
    lengths = [int(n) for n in lengths]
    order = sorted(dtypes, key=lambda d: d != "float32")
    for p in world_sizes:
        passed: list[str] = []
        for dtype in order:
            slip = (f" It is right in {passed[0]} but not in {dtype}: a buffer of a fixed dtype? (torch.empty(n) or "
                    "dtype=torch.float32 is float32 whatever the input: allocate scratch buffers with "
                    "dtype=flat.dtype, device=flat.device)") if passed else ""
            inputs = [[_ring_input(n, dtype, gen) for n in lengths] for _ in range(p)]
            wide = torch.int64 if dtype.startswith("int") else torch.float64
            want = [torch.stack([inputs[r][i].to(wide) for r in range(p)]).sum(0).to(getattr(torch, dtype))
                    for i in range(len(lengths))]
            reply = _worker_half(fn, "ring_runs", worker_ring_runs, p, inputs, timeout=timeout)
            try:
                ranks = _ranks_reply(reply, p, f"{what} with {p} processes on {dtype}")
            except GradingError as exc:
                did = "did not finish" if isinstance(reply, dict) and reply.get("error") == "timeout" else "failed"
                raise GradingError(f"{what} with {p} processes on {dtype} {did}: {exc}{slip}") from None
            _check_rank_records(what, p, ranks, lengths, dtype)
            _check_rank_results(fn, what, p, ranks, lengths, dtype, want, slip, timeout)
            passed.append(dtype)
    print(f"{what}: correct for {len(lengths)} lengths x {len(dtypes)} dtypes on {list(world_sizes)} processes")


def _check_rank_records(what: str, p: int, ranks: list[Any], lengths: list[int], dtype: str) -> None:
    """What each rank's calls dispatched: no library collective, some send/recv where there are several ranks,
    and each rank's traffic what a ring moves (:func:`check_ring_traffic`)."""
    torch = _torch()
    for r, rows in enumerate(ranks):
        ops = _rank_ops(rows)
        library = library_collectives(sorted(ops))
        if library:
            raise GradingError(
                f"{what}, {p} processes, rank {r}: running it dispatched {', '.join(library)}, a collective "
                "of torch.distributed's library (however it was reached: dist.all_reduce, "
                "dist.group.WORLD.allreduce, a process group's method); this exercise asks you to build the "
                "ring yourself from send/recv (isend/irecv)")
        if p > 1 and not ops & POINT_TO_POINT_OPS:
            raise GradingError(
                f"{what}, {p} processes, rank {r}: it sent and received nothing through torch.distributed's "
                "send/recv (none was recorded), so the ranks' data moved some other way or not at all; "
                "build the ring from send/recv (isend/irecv)")
        if p > 1 and isinstance(rows, list):
            for n, row in zip(lengths, rows, strict=False):
                check_ring_traffic(what, p, r, n, _rank_traffic([row]),
                                   itemsize=getattr(torch, dtype).itemsize)


def _check_rank_results(fn: Callable[..., Any], what: str, p: int, ranks: list[Any], lengths: list[int], dtype: str,
                        want: list[Any], slip: str, timeout: float) -> None:
    """Each rank's returned tensor and its input afterwards (in place) against the sum computed here, a wrong
    one explained by the dtype slip or by :func:`diagnose_ring`."""
    torch = _torch()
    for r, rows in enumerate(ranks):
        if not isinstance(rows, list) or len(rows) != len(lengths):
            raise GradingError(f"{what}, rank {r}: the notebook's kernel sent back a malformed reply")
        for i, (n, row) in enumerate(zip(lengths, rows, strict=True)):
            where = f"{what}, {p} processes, rank {r}, {n} elements of {dtype}"
            try:
                out = row.get("out") if isinstance(row, dict) else None
                inplace = row.get("x") if isinstance(row, dict) else None
                if type(out) is not torch.Tensor:
                    found = str(row.get("type", "?"))[:60] if isinstance(row, dict) else "?"
                    raise GradingError(f"{where}: expected the summed tensor to be returned, found "
                                       f"{found} (return tensor)")
                if out.dtype != want[i].dtype:
                    raise GradingError(f"{where}: expected a result of dtype {want[i].dtype}, found {out.dtype}"
                                       f".{slip}")
                if type(inplace) is not torch.Tensor:
                    raise GradingError(f"{where}: the notebook's kernel sent back a malformed reply")
                tol = dict(rtol=1e-5, atol=1e-5) if dtype != "float16" else dict(rtol=1e-2, atol=1e-2)
                assert_close(out, want[i], **tol, name=f"{where}, returned tensor")
                assert_close(inplace, want[i], **tol, name=f"{where}, in place (the input tensor itself)")
            except GradingError as exc:
                cause = slip.strip() if slip else diagnose_ring(fn, p, n, timeout=timeout)
                raise GradingError(f"{exc}" + (f"\nLikely cause: {cause}" if cause else "")) from None


def make_mlp(width: int = 32, depth: int = 3, seed: int = 0) -> Any:
    """A small MLP (Linear, Tanh) x depth with reproducible weights."""
    torch = _torch()
    from torch import nn

    torch.manual_seed(seed)
    layers: list[Any] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*layers)


def _dp_rank(step_fn: Callable[..., Any], x: Any, y: Any, seed: int) -> dict[str, Any]:
    """In each rank: step_fn's gradients, the rows of the batch its model saw and the ops the step dispatched."""
    torch = _torch()
    model = make_mlp(seed=seed)
    # the rows this rank's loss depends on, read from the gradient of its input: however the forward pass was
    # computed (model(x), model.forward(x), F.linear on the weights), a row the loss used gets a gradient
    xx = x.clone().requires_grad_(True)
    rec = dispatch_recorder()
    with rec:
        grads = _learner(step_fn)(model, xx, y.clone(), 0.001)  # tiny buckets: several all-reduces per step
    grads = [t.detach().clone() if type(t) is torch.Tensor else None for t in grads] if isinstance(grads, (list, tuple)) \
        else None
    rows = int((xx.grad != 0).any(dim=1).sum()) if xx.grad is not None else 0
    return {"grads": grads, "rows": rows, "ops": sorted(rec.ops), "traffic": rec.traffic}


def worker_dp_runs(step_fn: Callable[..., Any], p: int, x: Any, y: Any, seed: int, *, timeout: float = 60.0) -> dict[str, Any]:
    """Worker-side half of :func:`check_dp`: ``step_fn`` on ``p`` ranks, each given the whole batch ``x, y``.

    Dynamo is imported here, once, before the ranks fork: DDP's constructor reads a Dynamo setting, and
    that import cost 2-3 s of CPU in every rank (9 ranks for the lab's three world sizes, about 20 CPU-s per
    graded notebook; the import starts no thread, so the ranks still fork cleanly)."""
    import torch._dynamo  # noqa: F401 - inherited by the forked ranks

    return _launched(_dp_rank, int(p), step_fn, x, y, int(seed), timeout=float(timeout))


def _full_batch_grads(x: Any, y: Any, seed: int) -> list[Any]:
    model = make_mlp(seed=seed)
    ((model(x) - y) ** 2).mean().backward()
    return [param.grad for param in model.parameters()]


def check_dp(step_fn: Callable[..., Any], world_sizes: Sequence[int], batch: int, timeout: float = 60.0) -> None:
    """Every rank of a data-parallel step must end with the whole batch's gradient, having seen its share and
    exchanged something through torch.distributed (a rank that computed the whole batch alone did not)."""
    from mlsys.runtime.launch import launch

    torch = _torch()
    gen = _grader_generator()
    for p in world_sizes:
        x, y = torch.randn(batch, 32, generator=gen), torch.randn(batch, 32, generator=gen)
        seed = int(torch.randint(0, 1000, (), generator=gen))
        if isinstance(step_fn, RemoteFunction):
            reply = step_fn.run_helper("dp_runs", p, x, y, seed, timeout=timeout)
            want = _full_batch_grads(x, y, seed)  # here: the grader forks no ranks after this
        else:
            reply = worker_dp_runs(step_fn, p, x, y, seed, timeout=timeout)
            # the reference runs in a child too: autograd in this process would start its device threads,
            # after which forked ranks can no longer use autograd or CUDA
            want = launch(_full_batch_grads, 1, x, y, seed, timeout=timeout)[0]
        try:
            ranks = _ranks_reply(reply, p, f"data_parallel_step on {p} processes")
        except GradingError as exc:
            raise GradingError(f"data_parallel_step on {p} processes failed: {exc}") from None
        for r, rank in enumerate(ranks):
            grads, rows = (rank.get("grads"), rank.get("rows")) if isinstance(rank, dict) else (None, None)
            if rows != batch // p:
                raise GradingError(f"rank {r} of {p}: expected the model to see its share of {batch // p} rows, "
                                   f"it saw {rows} (the rows of the batch whose input got a gradient: those its loss "
                                   "used)")
            if p > 1 and not any(op.split("::")[0] in C10D_NAMESPACES for op in _rank_ops([rank])):
                raise GradingError(f"rank {r} of {p}: its step exchanged nothing through torch.distributed (no "
                                   "collective or message was recorded), so it cannot hold the whole batch's gradient "
                                   "honestly; average the gradients across processes (DDP, or an all-reduce)")
            moved = sum(k for _, _, k in _rank_traffic([rank]))
            needed = sum(int(t.numel()) * t.element_size() for t in want)
            if p > 1 and moved < needed:
                raise GradingError(f"rank {r} of {p}: its step exchanged {moved:,} bytes through torch.distributed, "
                                   f"fewer than the {needed:,} bytes of gradients it must average with the other "
                                   "processes (a barrier or a token message is not an all-reduce of the gradients)")
            if not isinstance(grads, list) or len(grads) != len(want):
                raise GradingError(f"rank {r}: expected a list of {len(want)} gradients, found {type(grads).__name__}")
            for i, (got, exp) in enumerate(zip(grads, want, strict=True)):
                assert_close(got, exp, rtol=1e-4, atol=1e-6,
                             name=f"gradient {i} on rank {r} of {p} (the whole batch's gradient)")
    print(f"data_parallel_step: correct on {list(world_sizes)} processes")
