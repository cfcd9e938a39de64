"""Shared code of the all-reduce experiments: the reference ring, sweeps and the DDP overlap step.

Everything here runs *inside* a rank started by :func:`mlsys.runtime.launch.launch` (a process
group is already initialised). Functions are module-level so that ``spawn`` can import them.

The reference ring is Lab 4's answer. It lives here, in the package learners install, because the
recorded GPU figures must come from a named experiment; the lab's hidden-solution concern is the
teacher's notebook, not this module (a learner who reads it has read a textbook ring).
"""

from __future__ import annotations

from typing import Any

FLOAT_BYTES = 4  # the sweeps all-reduce float32 tensors


def bounds(n: int, parts: int) -> list[int]:
    """Boundaries of ``parts`` near-equal pieces of ``n`` items: piece ``i`` is ``[b[i], b[i+1])``.

    ``b[i] = i * n // parts``; pieces differ in length by at most one, and some are empty when
    ``n < parts``.
    """
    return [i * n // parts for i in range(parts + 1)]


def _exchange(send: Any, recv: Any, right: int, left: int, buf: Any, reduce: bool, segments: int,
              groups: list[Any] | None = None) -> None:
    """Send ``send`` to ``right`` while receiving ``recv``'s worth from ``left``; add it in if ``reduce``.

    With ``segments > 1`` the pair of messages is cut into pieces and the next piece is in
    flight while the previous one is added (a two-stage pipeline). Piece ``k`` travels on
    process group ``groups[k % len(groups)]`` (default: the world group); on GPUs each NCCL
    communicator has its own stream, so pieces on different groups move concurrently.
    """
    import torch.distributed as dist

    sb, rb = bounds(send.numel(), segments), bounds(recv.numel(), segments)
    groups = groups or [None]

    def post(k: int) -> list[Any]:
        ops, group = [], groups[k % len(groups)]
        if sb[k + 1] > sb[k]:
            ops.append(dist.P2POp(dist.isend, send[sb[k]:sb[k + 1]], right, group))
        if rb[k + 1] > rb[k]:
            target = buf[rb[k]:rb[k + 1]] if reduce else recv[rb[k]:rb[k + 1]]
            ops.append(dist.P2POp(dist.irecv, target, left, group))
        return dist.batch_isend_irecv(ops) if ops else []

    pending = post(0)
    for k in range(segments):
        following = post(k + 1) if k + 1 < segments else []
        for req in pending:
            req.wait()
        if reduce and rb[k + 1] > rb[k]:
            recv[rb[k]:rb[k + 1]].add_(buf[rb[k]:rb[k + 1]])
        pending = following


def ring_allreduce(tensor: Any, segments: int = 1, groups: list[Any] | None = None) -> Any:
    """Sum ``tensor`` over all ranks in place: ring reduce-scatter, then ring all-gather.

    The flat tensor is cut into ``p`` chunks (:func:`bounds`). Reduce-scatter step ``s``
    (``s = 0 .. p-2``): send chunk ``(r - s) mod p`` to the right neighbour, receive chunk
    ``(r - s - 1) mod p`` from the left and add it in; rank ``r`` then holds the full sum of
    chunk ``(r + 1) mod p``. All-gather step ``s``: send chunk ``(r + 1 - s) mod p``, receive
    chunk ``(r - s) mod p`` in place. Each rank sends ``2 (p - 1) / p`` of the tensor.
    ``segments`` and ``groups`` pipeline each message (:func:`_exchange`).
    """
    import torch
    import torch.distributed as dist

    p, r = dist.get_world_size(), dist.get_rank()
    if p == 1:
        return tensor
    if not tensor.is_contiguous():
        raise ValueError("ring_allreduce: expected a contiguous tensor")
    flat = tensor.view(-1)
    b = bounds(flat.numel(), p)

    def chunk(i: int) -> Any:
        i %= p
        return flat[b[i]:b[i + 1]]

    right, left = (r + 1) % p, (r - 1) % p
    buf = torch.empty(max(b[i + 1] - b[i] for i in range(p)), dtype=flat.dtype, device=flat.device)
    for s in range(p - 1):
        _exchange(chunk(r - s), chunk(r - s - 1), right, left, buf, True, segments, groups)
    for s in range(p - 1):
        _exchange(chunk(r + 1 - s), chunk(r - s), right, left, buf, False, segments, groups)
    return tensor


def _device() -> str:
    import torch.distributed as dist

    return "cuda" if dist.get_backend() == "nccl" else "cpu"


def _tensor(numel: int) -> Any:
    """Random float32 data (never zeros, which some hardware moves or adds faster) on this rank's device."""
    import torch

    dev = f"cuda:{torch.cuda.current_device()}" if _device() == "cuda" else "cpu"
    return torch.randn(numel, dtype=torch.float32, device=dev)


def check_ring(numels: list[int], segments: int = 1, groups: list[Any] | None = None) -> bool:
    """The reference ring equals ``dist.all_reduce`` on random tensors of these lengths (every rank)."""
    import torch
    import torch.distributed as dist

    for n in numels:
        g = torch.Generator().manual_seed(1000 * n + dist.get_rank())
        x = torch.randn(n, generator=g).to(_tensor(1).device)
        want = x.clone()
        dist.all_reduce(want)
        ring_allreduce(x, segments, groups)
        if not torch.allclose(x, want, rtol=1e-5, atol=1e-5):
            raise AssertionError(f"reference ring differs from dist.all_reduce at {n} elements")
    return True


def label(kind: str, segments: int = 1, ngroups: int = 1) -> str:
    """Name of an implementation in a sweep: ``library``, ``p2p``, ``ring4`` or ``ring4x2`` (4 segments, 2 groups)."""
    if kind in ("library", "p2p"):
        return kind
    return f"ring{segments}" + (f"x{ngroups}" if ngroups > 1 else "")


def _impl(impl: tuple, x: Any, b: list[int], buf: Any, groups: list[Any]) -> Any:
    """The call to time for one implementation of :func:`time_allreduce` on tensor ``x``."""
    import torch.distributed as dist

    p, r = dist.get_world_size(), dist.get_rank()
    if impl[0] == "library":
        return lambda: dist.all_reduce(x)
    if impl[0] == "p2p":
        left = (r - 1) % p
        return lambda: _exchange(x[b[r]:b[r + 1]], x[b[left]:b[left + 1]], (r + 1) % p, left, buf, False, 1)
    return lambda: ring_allreduce(x, impl[1], groups[:impl[2]])


def time_allreduce(sizes: list[int], impls: list[tuple], repeats: int, warmup: int) -> dict[str, Any]:
    """Median time of each implementation at each size (bytes of float32), on this rank.

    ``impls``: ``("library",)`` for ``dist.all_reduce``; ``("ring", segments, ngroups)`` for the
    reference ring; ``("p2p",)`` for one ring exchange of a ``1/p`` chunk without the add (the
    point-to-point ceiling of one ring step). For each size the implementations run one after
    the other in the same process groups, each after a barrier. Returns ``{label: [Timing.to_json(), ...]}``.
    """
    import torch.distributed as dist

    from ..timing import time_fn

    dev = _device()
    p = dist.get_world_size()
    most = max([i[2] for i in impls if i[0] == "ring"] + [1])
    groups = [None] + [dist.new_group() for _ in range(most - 1)]
    out: dict[str, list[dict[str, Any]]] = {}
    for nbytes in sizes:
        x = _tensor(max(1, nbytes // FLOAT_BYTES))
        b = bounds(x.numel(), p)
        buf = _tensor(b[1] - b[0] + 1)
        for impl in impls:
            fn = _impl(impl, x, b, buf, groups)
            name = label(*impl)
            dist.barrier()
            t = time_fn(fn, dev, what=f"{name} at {nbytes} B", repeats=repeats, warmup=warmup, flush_l2=dev == "cuda")
            out.setdefault(name, []).append(t.to_json())
        del x
    return out


def ddp_overlap(width: int, depth: int, batch: int, bucket_mb: float, repeats: int, warmup: int) -> dict[str, Any]:
    """Time a data-parallel step of an MLP four ways, on this rank.

    ``compute``: forward + backward under ``DDP.no_sync`` (no communication); ``comm``: one
    all-reduce of a flat tensor as large as all gradients; ``serial``: the compute step followed
    by that all-reduce (no overlap); ``ddp``: DDP's step, gradient buckets of ``bucket_mb`` MiB
    all-reduced while the backward pass continues. Returns each Timing as JSON and the
    gradient bytes.
    """
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ..timing import time_fn

    dev = _device()
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers).to(_tensor(1).device)
    ddp = DDP(model, bucket_cap_mb=bucket_mb, device_ids=[torch.cuda.current_device()] if dev == "cuda" else None)
    x = torch.randn(batch, width, device=_tensor(1).device)
    nparams = sum(p.numel() for p in model.parameters())
    flat = _tensor(nparams)

    def compute() -> None:
        with ddp.no_sync():
            ddp(x).square().mean().backward()

    def comm() -> None:
        dist.all_reduce(flat)

    def serial() -> None:
        compute()
        comm()

    def step() -> None:
        ddp(x).square().mean().backward()

    out: dict[str, Any] = {"gradient_bytes": nparams * FLOAT_BYTES, "parameters": nparams}
    for name, fn in (("compute", compute), ("comm", comm), ("serial", serial), ("ddp", step)):
        dist.barrier()
        out[name] = time_fn(fn, dev, what=f"{name} step", repeats=repeats, warmup=warmup, flush_l2=False).to_json()
    return out
