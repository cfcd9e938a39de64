"""Worker-side halves: where a lab's test cells run in the grader (:mod:`mlsys.grader.learnerside.testcells`), these run in
the learner's kernel on inputs the grader chose and return plain data; the grader's halves decide.

Moved out of :mod:`mlsys.labkit.checks` (issue 48, "a size it can keep"); ``checks`` re-exports its names,
the ones the labs' cells and the grader call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mlsys.labkit import guardrun, watchdog
from mlsys.labkit.grading import GradingError, run_isolated
from mlsys.labkit.guardbuffers import _torch
from mlsys.labkit.guardrun import (
    _call_to_bytes,
    _runs_here_on_gpu,
    _unpack,
    explain_exception,
    run_guarded,
)
from mlsys.labkit.proxy import RemoteFunction
from mlsys.runtime.device import has_cuda


def worker_call_checked(fn: Callable[..., Any], *inputs: Any, isolate: bool | None = None, label: str = "your function",
                        _raise: bool = False) -> dict[str, Any]:
    """``{"result": fn(*inputs)}`` (in a child process on a CPU), or ``{"error": message}`` when it raised or crashed."""
    if isolate is None:
        isolate = not has_cuda()
    try:
        if isolate:
            result = run_isolated(_call_to_bytes, fn, *inputs, timeout=guardrun.WALL_LIMIT,
                                  cpu_limit=guardrun.CPU_LIMIT, heartbeat=guardrun.HEARTBEAT, what=label)
            if isinstance(result, tuple) and len(result) == 3 and result[0] == "with_ops":
                fn.recorded_ops.update(result[2])
                result = result[1]
            result = _unpack(result)
        else:
            with watchdog.watch(label, active=_runs_here_on_gpu(fn)):
                result = fn(*inputs)
                if has_cuda():
                    _torch().cuda.synchronize()  # a hung kernel is waited for here, under the watchdog
    except GradingError as exc:
        msg = f"{label}: {exc}"
    except Exception as exc:  # the learner's code
        msg = explain_exception(label, exc)
    else:
        return {"result": result}
    if _raise:
        raise GradingError(msg) from None
    return {"error": msg}


def worker_run_guarded(fn: Callable[..., Any], inputs: Sequence[Any], **opts: Any) -> dict[str, Any]:
    """:func:`run_guarded` with its report as plain data (the grader rebuilds a :class:`GuardReport`)."""
    import dataclasses

    out = dict(run_guarded(fn, inputs, **opts))
    out["report"] = dataclasses.asdict(out["report"])
    out.pop("compiled", None)  # this process's compile cache: nothing the grader reads
    return out


def calls_of(fn: Callable[..., Any], name: str, *args: Any, **kwargs: Any) -> list[tuple]:
    """The positional arguments of every call of the global function ``name`` that ``fn(*args, **kwargs)`` makes.

    The global is wrapped for the duration of the call (in the learner's namespace, where ``fn`` looks it
    up) and restored after. In a test cell that runs in the grader, the call and the count run in the
    learner's kernel and the arguments come back as plain data.
    """
    if isinstance(fn, RemoteFunction):
        return fn.run_helper("calls_of", name, *args, **kwargs)
    ns = getattr(fn, "fn", fn).__globals__  # (through mlsys.grader.learnerside.worker.Recorded in the learner's kernel)
    if name not in ns or not callable(ns[name]):
        raise GradingError(f"{getattr(fn, '__name__', 'your function')}: expected a function {name} beside it")
    real, calls = ns[name], []

    def counting(*a: Any, **k: Any) -> Any:
        calls.append(a)
        return real(*a, **k)

    ns[name] = counting
    try:
        fn(*args, **kwargs)
    finally:
        ns[name] = real
    return calls


def with_shifted_argument(fn: Callable[..., Any], name: str, index: int, shift: float, *args: Any) -> Any:
    """``fn(*args)`` with every call of the global function ``name`` given its positional argument ``index`` plus
    ``shift``: whether ``fn``'s result is built from what ``name`` returns, not only from calls it makes.

    For Lab 5's ``streamed_attention``: shifting ``online_update``'s block of values by c shifts every row of
    an honest result by c (a row's weights sum to 1); a result computed another way, beside calls whose
    returns it drops, does not move. In a test cell run by the grader, it runs in the learner's kernel."""
    if isinstance(fn, RemoteFunction):
        return fn.run_helper("shifted_call", name, int(index), float(shift), *args)
    ns = getattr(fn, "fn", fn).__globals__
    if name not in ns or not callable(ns[name]):
        raise GradingError(f"{getattr(fn, '__name__', 'your function')}: expected a function {name} beside it")
    real = ns[name]

    def shifted(*a: Any, **k: Any) -> Any:
        a = tuple(x + shift if i == index else x for i, x in enumerate(a))
        return real(*a, **k)

    ns[name] = shifted
    try:
        return fn(*args)
    finally:
        ns[name] = real


_PROBE_SOURCE = """
@triton.jit
def attend_blocks_probe(K, V, OUT, start_value, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_m = tl.arange(0, 16)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.full([16, HEAD_DIM], 1.0, K.dtype.element_ty)
    acc = tl.zeros([16, HEAD_DIM], tl.float32) + start_value
    l_i = tl.zeros([16], tl.float32) + start_value
    m_i = tl.zeros([16], tl.float32)
    acc, l_i, m_i = attend_blocks(acc, l_i, m_i, q, K, V, 0, N_CTX, offs_m, N_CTX, 1.0, HEAD_DIM, BLOCK_N,
                                  False, False)
    tl.store(OUT + offs_m[:, None] * HEAD_DIM + offs_d[None, :], acc)
    tl.store(OUT + 16 * HEAD_DIM + offs_m, l_i)
"""


def running_sums_probe(attend_blocks: Any, *, device: str = "cpu", starts: Sequence[float] = (0.0, 2048.0)) -> list:
    """``[(acc, l), ...]``: Lab 5's ``attend_blocks`` run from running sums that start at each of ``starts``.

    fp16 accumulation shows only at thousands of keys (too slow under the interpreter), where the running
    sums are large. So this probe starts the sums there: acc = l = start, then four blocks of 16 keys with
    scores -4 (log2 units, p = 2^-4) and values 1 each add 16 * 2^-4 = 1 to both, as they do to sums
    starting at 0. Held in fp16 between blocks (spacing 2 at 2048), each 2048 + 1 rounds back to 2048.
    Judge the result with :func:`check_running_sums_fp32`.
    """
    if isinstance(attend_blocks, RemoteFunction):
        return attend_blocks.run_helper("running_sums_probe", device=device, starts=list(starts))
    import linecache

    import triton
    import triton.language as tl

    torch = _torch()
    filename = "<mlsys.labkit.checks: attend_blocks probe>"  # Triton reads a kernel's source through linecache
    linecache.cache[filename] = (len(_PROBE_SOURCE), None, _PROBE_SOURCE.splitlines(True), filename)
    ns: dict[str, Any] = {"triton": triton, "tl": tl, "attend_blocks": attend_blocks}
    exec(compile(_PROBE_SOURCE, filename, "exec"), ns)  # noqa: S102 - the course's own probe kernel
    probe_kernel = ns["attend_blocks_probe"]
    k16 = torch.full((64, 16), -0.25, dtype=torch.float16, device=device)  # q.k = 16 * 1 * -0.25 = -4
    v16 = torch.ones(64, 16, dtype=torch.float16, device=device)
    out = []
    for start in starts:
        probe = torch.zeros(16 * 16 + 16, device=device)
        probe_kernel[(1,)](k16, v16, probe, float(start), 64, HEAD_DIM=16, BLOCK_N=16)
        out.append((probe[:256].reshape(16, 16).cpu(), probe[256:].cpu()))
    return out
