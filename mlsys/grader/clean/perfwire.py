"""The wire between the verdict process and a performance worker: JSON headers and raw tensor bytes.

A message is an 8-byte big-endian length, then that many bytes of UTF-8 JSON (a header). A header
may announce ``"tensors": [{"dtype": "float16", "shape": [64, 32], "nbytes": 4096}, ...]``; each
tensor's raw bytes (C order) follow, in order. The verdict process decodes a worker's tensors from
bytes alone (:func:`tensor_from_bytes`): nothing from a worker is ever unpickled, imported or called,
so a worker can send wrong numbers but never an object that runs code in the verdict's interpreter.

Limits: a header is at most :data:`MAX_HEADER` bytes and a tensor at most :data:`MAX_TENSOR` bytes;
anything larger, a short read or a dtype outside :data:`DTYPES` raises :class:`WireError`.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any

__all__ = ["WireError", "send", "recv", "tensor_bytes", "tensor_from_bytes", "tensors_to_shared", "tensor_from_shared",
           "DTYPES", "MAX_HEADER", "MAX_TENSOR"]

MAX_HEADER = 16 << 20
"""Largest JSON header accepted (bytes)."""

MAX_TENSOR = 8 << 30
"""Largest tensor accepted (bytes): a Lab 3 output of 16384 x 2048 float32 is 128 MiB."""

DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "uint8", "int8", "bool")
"""The dtypes a tensor on the wire may have (names of ``torch`` attributes)."""


class WireError(RuntimeError):
    """A message broke the wire format (truncated, too large, or of an unknown dtype)."""


def _read_exact(fd: int, n: int, deadline: float | None = None) -> bytearray:
    import select
    import time

    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise WireError(f"no answer within the time limit ({got} of {n} bytes read)")
        k = os.readv(fd, [view[got:got + (1 << 24)]])
        if not k:
            raise WireError(f"the other end closed the wire after {got} of {n} bytes")
        got += k
    return buf


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        n = os.write(fd, view[: 1 << 24])
        view = view[n:]


def send(fd: int, header: dict[str, Any], blobs: list[bytes | memoryview] = ()) -> None:
    """Write ``header`` (JSON) and then each blob; ``header["tensors"]`` must describe the blobs."""
    raw = json.dumps(header).encode("utf-8")
    _write_all(fd, struct.pack(">Q", len(raw)) + raw)
    for b in blobs:
        _write_all(fd, b)


def recv(fd: int, deadline: float | None = None) -> tuple[dict[str, Any], list[bytearray]]:
    """Read one message: (header, the raw bytes of each tensor it announces), by ``deadline``
    (``time.monotonic()`` seconds; None waits for ever)."""
    (n,) = struct.unpack(">Q", _read_exact(fd, 8, deadline))
    if n > MAX_HEADER:
        raise WireError(f"header of {n} bytes; at most {MAX_HEADER} expected")
    try:
        header = json.loads(_read_exact(fd, n, deadline).decode("utf-8"))
    except ValueError as exc:
        raise WireError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise WireError(f"expected a JSON object as header, got {type(header).__name__}")
    blobs = []
    for t in header.get("tensors", []) or []:
        if not isinstance(t, dict):
            raise WireError("each announced tensor must be an object with dtype, shape and nbytes")
        nbytes = t.get("nbytes")
        if type(nbytes) is not int or not 0 <= nbytes <= MAX_TENSOR:
            raise WireError(f"tensor of {nbytes!r} bytes; expected an int in [0, {MAX_TENSOR}]")
        blobs.append(_read_exact(fd, nbytes, deadline))
    return header, blobs


def tensor_bytes(t: Any) -> tuple[dict[str, Any], memoryview]:
    """(descriptor, raw bytes) of a torch tensor, copied to the host in C order."""
    import torch

    c = t.detach().contiguous().cpu()
    name = str(c.dtype).removeprefix("torch.")
    raw = c.reshape(-1).view(torch.uint8).numpy() if c.numel() else torch.empty(0, dtype=torch.uint8).numpy()
    return {"dtype": name, "shape": list(c.shape), "nbytes": int(raw.nbytes)}, memoryview(raw).cast("B")


def tensor_from_bytes(desc: dict[str, Any], raw: bytes | bytearray) -> Any:
    """A fresh ``torch.Tensor`` (exact type, CPU) holding ``raw`` as ``desc`` says; malformed raises WireError."""
    import math

    import torch

    name, shape = desc.get("dtype"), desc.get("shape")
    if name not in DTYPES:
        raise WireError(f"dtype {name!r} is not one of {DTYPES}")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise WireError(f"shape must be a list of non-negative ints, got {shape!r}")
    dtype = getattr(torch, name)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if math.prod(shape) * itemsize != len(raw):
        raise WireError(f"{len(raw)} bytes do not hold a {name} tensor of shape {shape}")
    buf = raw if isinstance(raw, bytearray) else bytearray(raw)  # our own copy: the tensor may keep it
    flat = torch.frombuffer(buf, dtype=torch.uint8) if buf else torch.empty(0, dtype=torch.uint8)
    return flat.view(dtype).reshape(shape)


def tensors_to_shared(tensors: list[Any], mm: Any) -> list[dict[str, Any]] | None:
    """Copy each tensor's bytes (C order) into the shared mapping ``mm``, one after another at 64-byte
    boundaries; their descriptors (with ``offset``), or None when they do not fit (then use the pipe).

    One copy (device to the shared pages) instead of three (device to host, into the pipe, out of it)."""
    import torch

    descs, off = [], 0
    flat = [t.detach().contiguous() for t in tensors]
    total = sum(-(-t.numel() * t.element_size() // 64) * 64 for t in flat)
    if total > len(mm):
        return None
    for t in flat:
        n = t.numel() * t.element_size()
        if n:
            dst = torch.frombuffer(mm, dtype=torch.uint8, count=n, offset=off)
            dst.copy_(t.reshape(-1).view(torch.uint8))
        descs.append({"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "nbytes": n, "offset": off})
        off += -(-n // 64) * 64
    return descs


def tensor_from_shared(desc: dict[str, Any], mm: Any, device: str) -> Any:
    """A tensor of the verdict's own (a copy on ``device``) from a descriptor of :func:`tensors_to_shared`;
    a malformed descriptor, or one pointing outside the mapping, raises WireError."""
    import math

    import torch

    name, shape, off, n = desc.get("dtype"), desc.get("shape"), desc.get("offset"), desc.get("nbytes")
    if name not in DTYPES:
        raise WireError(f"dtype {name!r} is not one of {DTYPES}")
    if not isinstance(shape, list) or not all(type(k) is int and k >= 0 for k in shape):
        raise WireError(f"shape must be a list of non-negative ints, got {shape!r}")
    if type(off) is not int or type(n) is not int or off < 0 or n < 0 or off + n > len(mm):
        raise WireError(f"{n!r} bytes at offset {off!r} do not lie in the {len(mm)}-byte shared region")
    dtype = getattr(torch, name)
    if math.prod(shape) * torch.empty(0, dtype=dtype).element_size() != n:
        raise WireError(f"{n} bytes do not hold a {name} tensor of shape {shape}")
    if not n:
        return torch.empty(shape, dtype=dtype, device=device)
    view = torch.frombuffer(mm, dtype=torch.uint8, count=n, offset=off)
    # copied out before anything reads it: the worker can write to the region at any time
    return view.to(device, copy=True).view(dtype).reshape(shape)
