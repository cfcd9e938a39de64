"""Issue 29: Lab 2's persistent TMA matmul against cuBLAS, with candidate fixes for ragged shapes, one GPU run.

    python tests/gpu_runs/i29_matmul_sweep.py OUT.json [--budget S]     # a Hopper GPU, about S seconds
    python tests/gpu_runs/i29_matmul_sweep.py --cpu-check               # every kernel under TRITON_INTERPRET=1
    python tests/gpu_runs/compile_sm90.py                               # no GPU: sm_90a regs, spills, shared

Development tool, not a course figure. The control is the lab's own code: the cells tagged ``lab2-kernel`` of
the instructor notebook (``notebook``: ``matmul_tma`` autotuned as the lab runs it; ``nb#i``: its kernel with
the i-th of ``TMA_CANDIDATES`` forced, to see what the autotuner leaves on the table). Candidates, each a
small :class:`Variant` (a tile and a few switches) of three kernels defined here:

* ``persistent_kernel``: the notebook's persistent TMA kernel with the ragged edge handled either way round.
  ``rows`` is the notebook's HALF (a last row of tiles at most half full runs as short tiles, dealt to the
  programs with one whole tile fewer); ``cols`` does the same for a last column at most half full (5000 in
  256 x 128 tiles: 39 whole columns and one of 8, run as 256 x 16 tiles), which lets a 256-row tile keep the
  tail in the last wave, and halves how often B (the operand with the 10,000-byte row pitch) is re-read.
  ``tight``: the edge tile is the smallest power of two that holds the remainder (not half a tile).
  ``copy_b=False``: B used as it is (skips the notebook's ``line_aligned`` copy, ~25-33 us at 5000^3).
* ``streamk_kernel``: data-parallel whole waves, then the last partial wave plus one full wave split by k-steps
  over all programs; partial sums in an fp32 workspace, the last program to finish a tile adds them
  (docs/KERNEL_NOTES.md, 2026-11-25, with the notebook's B copy and split C store).
* ``twodot_kernel``: the persistent kernel on a tile whose width is not a power of two (Triton's blocks must
  be), built as two dots that share the A block: BLOCK_M x (WA + WB), e.g. 256 x (128 + 32). The point is
  wave quantization at 5000^3 on 132 SMs: 128 x 256 tiles are 40 x 20 = 800 = 6.06 waves (7 waves, the last
  one 6% full); 256 x 160 and 128 x 320 are 640 tiles = 4.85 waves (5 waves, 97% full; with the padding
  past 5000, 92.5% of the issued work is useful against 82.6%). cuBLAS runs 256 x 152 there (660 tiles,
  exactly 5 waves). B (the notebook's ``line_aligned`` copy) and C each get two descriptors, one per width.

Per shape (5000^3 first), every variant's output is checked against ``torch.matmul`` (a wrong one is
reported, never timed); the others are timed with cuBLAS by :func:`mlsys.bench.timing.time_interleaved`
(L2 flushed, CUDA events, one call of each per round, a 150 us GPU spin before each, median). OUT.json is
rewritten after every shape. Compilation runs first in parallel worker processes (``--compile-worker``) that
fill Triton's on-disk cache, so the timed process mostly loads kernels; whatever does not fit ``--budget`` is
recorded as skipped.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

if "--cpu-check" in sys.argv or "--dry-run" in sys.argv:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # torch on the CPU, Triton's interpreter (set by the notebook's setup)
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

import mlsys  # noqa: E402

DEVICE = mlsys.labkit.device.setup()  # before triton: TRITON_INTERPRET=1 where there is no CUDA

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

GPU_SHAPES = [(5000, 5000, 5000), (8192, 8192, 512), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
              (3000, 5000, 7000)]
# M x N x K, dtype: ragged in M, N, K and both (fp32 where fp16 rows would not be 16-byte aligned for TMA);
# the last two: N below the twodot variants' first width (32 or 64 at the interpreter's 1/4 scale)
CPU_SHAPES = [(40, 72, 100, torch.float32), (72, 40, 100, torch.float32), (100, 68, 52, torch.float32),
              (24, 48, 40, torch.float32), (50, 68, 36, torch.float32), (60, 136, 48, torch.float16),
              (36, 12, 52, torch.float32), (70, 8, 56, torch.float16)]
DRY_SHAPES = [(40, 72, 96), (60, 136, 48), (64, 64, 64)]  # --dry-run: the GPU run's code path, interpreted
HOST_GAP_S = 150e-6  # as the lab2_matmul record: the wrappers' Python stays out of the timed span


# ------------------------------------------------------------------------------------------------
# Kernels


@triton.jit
def tile_position(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    tiles_per_group = GROUP_M * num_pid_n
    first_m = (tile // tiles_per_group) * GROUP_M
    rows_in_group = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % tiles_per_group) % rows_in_group, (tile % tiles_per_group) // rows_in_group


@triton.jit
def store_tile(c_desc, acc, row, col, BLOCK_N: tl.constexpr, SUBTILE: tl.constexpr):
    if SUBTILE:
        halves = tl.permute(tl.reshape(acc, (acc.shape[0], 2, BLOCK_N // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        c_desc.store([row, col], left.to(c_desc.dtype))
        c_desc.store([row, col + BLOCK_N // 2], right.to(c_desc.dtype))
    else:
        c_desc.store([row, col], acc.to(c_desc.dtype))


@triton.jit
def persistent_kernel(a_desc, ae_desc, b_desc, be_desc, c_desc, ce_desc, M, N, K,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                      NUM_SMS: tl.constexpr, SUBTILE: tl.constexpr, FLATTEN: tl.constexpr,
                      WARP_SPECIALIZE: tl.constexpr, EDGE: tl.constexpr, EDGE_SIZE: tl.constexpr):
    """EDGE 0: every tile whole (TMA clips). EDGE 1: the last, partial row of tiles as EDGE_SIZE x BLOCK_N tiles;
    EDGE 2: the last, partial column as BLOCK_M x EDGE_SIZE tiles; either after the whole tiles, dealt to the
    programs that had one whole tile fewer."""
    if EDGE == 1:
        num_pid_m = M // BLOCK_M
    else:
        num_pid_m = tl.cdiv(M, BLOCK_M)
    if EDGE == 2:
        num_pid_n = N // BLOCK_N
    else:
        num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    tile_c = tl.program_id(0) - NUM_SMS
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_SMS, flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_position(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_tiles):
            a = a_desc.load([pid_m * BLOCK_M, ks * BLOCK_K])
            b = b_desc.load([ks * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        tile_c += NUM_SMS
        pid_m, pid_n = tile_position(tile_c, num_pid_m, num_pid_n, GROUP_M)
        store_tile(c_desc, acc, pid_m * BLOCK_M, pid_n * BLOCK_N, BLOCK_N, SUBTILE)
    if EDGE != 0:
        r = (num_pid_m * num_pid_n) % NUM_SMS  # programs r, r + 1, ... ran one whole tile fewer
        pid = tl.program_id(0)
        if pid >= r:
            if EDGE == 1:
                for col in range(pid - r, num_pid_n, NUM_SMS - r):
                    acc = tl.zeros((EDGE_SIZE, BLOCK_N), dtype=tl.float32)
                    for ks in range(k_tiles):
                        a = ae_desc.load([num_pid_m * BLOCK_M, ks * BLOCK_K])
                        b = b_desc.load([ks * BLOCK_K, col * BLOCK_N])
                        acc = tl.dot(a, b, acc)
                    store_tile(ce_desc, acc, num_pid_m * BLOCK_M, col * BLOCK_N, BLOCK_N, SUBTILE)
            else:
                for row in range(pid - r, num_pid_m, NUM_SMS - r):
                    acc = tl.zeros((BLOCK_M, EDGE_SIZE), dtype=tl.float32)
                    for ks in range(k_tiles):
                        a = a_desc.load([row * BLOCK_M, ks * BLOCK_K])
                        b = be_desc.load([ks * BLOCK_K, num_pid_n * BLOCK_N])
                        acc = tl.dot(a, b, acc)
                    ce_desc.store([row * BLOCK_M, num_pid_n * BLOCK_N], acc.to(ce_desc.dtype))


@triton.jit
def twodot_kernel(a_desc, b1_desc, b2_desc, c1_desc, c2_desc, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_NA: tl.constexpr, BLOCK_NB: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, SUBTILE: tl.constexpr, FLATTEN: tl.constexpr,
                  WARP_SPECIALIZE: tl.constexpr):
    """Persistent, as ``persistent_kernel`` with EDGE 0, on tiles BLOCK_M x (BLOCK_NA + BLOCK_NB): a width
    that need not be a power of two, as two dots sharing the A block (acc1 += A @ B[:, n0:n0+NA], acc2 +=
    A @ B[:, n0+NA:n0+NA+NB]). b1/b2 and c1/c2 are descriptors of the same B and C with the two block widths;
    TMA zero-fills loads and clips stores past the edges (a last tile may lie wholly or partly outside N)."""
    BLOCK_N: tl.constexpr = BLOCK_NA + BLOCK_NB
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    tile_c = tl.program_id(0) - NUM_SMS
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_SMS, flatten=FLATTEN,
                         warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_position(tile, num_pid_m, num_pid_n, GROUP_M)
        acc1 = tl.zeros((BLOCK_M, BLOCK_NA), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK_M, BLOCK_NB), dtype=tl.float32)
        for ks in range(k_tiles):
            a = a_desc.load([pid_m * BLOCK_M, ks * BLOCK_K])
            b1 = b1_desc.load([ks * BLOCK_K, pid_n * BLOCK_N])
            b2 = b2_desc.load([ks * BLOCK_K, pid_n * BLOCK_N + BLOCK_NA])
            acc1 = tl.dot(a, b1, acc1)
            acc2 = tl.dot(a, b2, acc2)
        tile_c += NUM_SMS
        pid_m, pid_n = tile_position(tile_c, num_pid_m, num_pid_n, GROUP_M)
        store_tile(c1_desc, acc1, pid_m * BLOCK_M, pid_n * BLOCK_N, BLOCK_NA, SUBTILE)
        c2_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_NA], acc2.to(c2_desc.dtype))


@triton.jit
def streamk_kernel(a_desc, b_desc, c_desc, ws_ptr, count_ptr, M, N, K,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   NUM_SMS: tl.constexpr, SUBTILE: tl.constexpr, FLATTEN: tl.constexpr,
                   WARP_SPECIALIZE: tl.constexpr):
    """Whole tiles persistent as above, then the last sk_tiles tiles (the partial wave and one whole wave)
    shared out by k-steps, an equal run of them per program; the last program to finish a shared tile
    (an acq_rel counter per tile) adds the others' partial sums from the workspace. No program waits."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    sk_tiles = 0
    if tiles > NUM_SMS and tiles % NUM_SMS != 0:
        sk_tiles = tiles % NUM_SMS + NUM_SMS
    dp_tiles = tiles - sk_tiles
    for tile in tl.range(pid, dp_tiles, NUM_SMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_position(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_tiles):
            a = a_desc.load([pid_m * BLOCK_M, ks * BLOCK_K])
            b = b_desc.load([ks * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        store_tile(c_desc, acc, pid_m * BLOCK_M, pid_n * BLOCK_N, BLOCK_N, SUBTILE)
    sk_iters = sk_tiles * k_tiles
    per = tl.cdiv(sk_iters, NUM_SMS)
    it = pid * per
    end = tl.minimum(it + per, sk_iters)
    rows = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    tile_elems = BLOCK_M * BLOCK_N
    while it < end:
        t = it // k_tiles  # stream-K tile number
        k_first = it - t * k_tiles
        k_last = tl.minimum(k_tiles, k_first + end - it)
        pid_m, pid_n = tile_position(dp_tiles + t, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_first, k_last):
            a = a_desc.load([pid_m * BLOCK_M, ks * BLOCK_K])
            b = b_desc.load([ks * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        if k_first == 0 and k_last == k_tiles:
            store_tile(c_desc, acc, pid_m * BLOCK_M, pid_n * BLOCK_N, BLOCK_N, SUBTILE)
        else:
            # my partial sum goes to my slot: 0 for the piece my run starts with, 1 for the one it ends with
            slot = 2 * pid + (it != pid * per).to(tl.int32)
            tl.store(ws_ptr + slot.to(tl.int64) * tile_elems + rows[:, None] * BLOCK_N + cols[None, :], acc)
            tl.debug_barrier()
            first_p = (t * k_tiles) // per
            last_p = ((t + 1) * k_tiles - 1) // per
            arrived = tl.atomic_add(count_ptr + t, 1, sem="acq_rel", scope="gpu")
            if arrived == last_p - first_p:  # the last to finish this tile adds the others' sums and stores it
                for p in range(first_p, last_p + 1):
                    if p != pid:
                        other = 2 * p + (p * per < t * k_tiles).to(tl.int32)
                        acc += tl.load(ws_ptr + other.to(tl.int64) * tile_elems + rows[:, None] * BLOCK_N
                                       + cols[None, :], cache_modifier=".cg")
                store_tile(c_desc, acc, pid_m * BLOCK_M, pid_n * BLOCK_N, BLOCK_N, SUBTILE)
                tl.store(count_ptr + t, 0)  # ready for the next call
        it += k_last - k_first


# ------------------------------------------------------------------------------------------------
# Variants


@dataclass(frozen=True)
class Variant:
    """One line of the table. kind: torch | notebook (autotuned matmul_tma) | nbcfg (the notebook's kernel,
    its candidate ``cfg`` forced) | persistent | streamk | twodot. tile: (BLOCK_M, BLOCK_N, BLOCK_K, stages,
    warps, SUBTILE, FLATTEN, WARP_SPECIALIZE), as the notebook's TMA_CANDIDATES; for twodot BLOCK_N is the
    whole width WA + WB, ``wb`` the second dot's (WA = BLOCK_N - wb; both powers of two)."""
    name: str
    kind: str
    tile: tuple = ()
    edge: str = "none"  # persistent: none | rows | cols (used where the remainder is at most half a tile)
    tight: bool = False  # edge tile: smallest power of two holding the remainder, not half a tile
    copy_b: bool = True  # the notebook's line_aligned(b) first (a copy only where B's rows are not 128-byte aligned)
    group_m: int = 8
    cfg: int = -1
    wb: int = 0  # twodot: width of the second dot's block
    why: str = ""


def gpu_variants(nb) -> list[Variant]:
    out = [Variant("cublas", "torch", why="torch.matmul: the reference"),
           Variant("notebook", "notebook", why="the lab's matmul_tma as graded (autotuned, B copy, HALF)")]
    for i, cfg in enumerate(nb.tma_configs(DEVICE)):  # TMA_CANDIDATES that fit this GPU's shared memory
        k = cfg.kwargs
        tile = (k["BLOCK_M"], k["BLOCK_N"], k["BLOCK_K"], cfg.num_stages, cfg.num_warps, k["SUBTILE"], k["FLATTEN"],
                k["WARP_SPECIALIZE"])
        out.append(Variant(f"nb#{i}", "nbcfg", tile=tile, cfg=i, why="the notebook kernel, this candidate forced"))
    p = "persistent"
    t128 = (128, 256, 64, 3, 8, True, False, True)  # TMA_CANDIDATES[0]
    t256 = (256, 128, 64, 3, 8, True, True, False)  # TMA_CANDIDATES[4]
    out += [
        Variant("128x256 ws rows nocopy", p, t128, "rows", copy_b=False, why="(c) nb#0 without the B copy"),
        Variant("256x128 flat cols", p, t256, "cols", why="(b) last column as half tiles: B re-read 20x, not 40x"),
        Variant("256x128 flat cols tight", p, t256, "cols", tight=True, why="(b) last column of 8 as 256 x 16"),
        Variant("256x128 s4 flat cols tight", p, (256, 128, 64, 4, 8, True, True, False), "cols", tight=True,
                why="(b) 4 stages"),
        Variant("256x128 ws cols tight", p, (256, 128, 64, 3, 8, True, False, True), "cols", tight=True,
                why="(b) warp_specialize"),
        Variant("256x128 flat cols tight nocopy", p, t256, "cols", tight=True, copy_b=False,
                why="(b)+(c) B re-read half as often: does it still need the copy"),
        Variant("256x128 s4 flat cols tight nocopy", p, (256, 128, 64, 4, 8, True, True, False), "cols",
                tight=True, copy_b=False, why="(b)+(c)"),
        Variant("128x128 w8 s4 flat rows", p, (128, 128, 64, 4, 8, True, True, False), "rows",
                why="(b) 12.1 waves at 5000^3, two warpgroups"),
        Variant("128x256 ws rows g4", p, t128, "rows", group_m=4, why="tile order: smaller groups"),
        Variant("streamk 128x256", "streamk", (128, 256, 64, 3, 8, True, False, False),
                why="(a) DP waves + stream-K tail, fp32 workspace fix-up"),
        Variant("streamk 256x128 flat", "streamk", t256, why="(a) the same with 256-row tiles"),
    ]
    # (d) widths that are not powers of two, as two dots sharing A (twodot_kernel): 640 tiles at 5000^3 = 4.85
    # waves, not 800 = 6.06. 8 warps: two warpgroups, each 128 x 160 (or 64 x 320) fp32 accumulators.
    # sm_90a with triton 3.6 (compile_sm90.py, no GPU): 190-198 registers, no spills, 209-221 KB of the 227 KB
    # of shared memory; BLOCK_K 64 with 4 stages does not fit (256 KB: the staged C adds 48 KB), BLOCK_K 32
    # with 6 stages does. 128 x 160 (1280 tiles, 9.70 waves) left out: 128 x 128 tiles already lose (0.73).
    d = "twodot"
    out += [
        Variant("256x160 (128+32) s3", d, (256, 160, 64, 3, 8, True, False, False), wb=32,
                why="(d) cuBLAS-like tile (its 256x152): 20 x 32 = 640 tiles, 4.85 waves"),
        Variant("256x160 (128+32) s3 flat", d, (256, 160, 64, 3, 8, True, True, False), wb=32,
                why="(d) the same, one software pipeline over all of a program's tiles (nb#1's switch)"),
        Variant("256x160 (128+32) k32 s6", d, (256, 160, 32, 6, 8, True, False, False), wb=32,
                why="(d) the same shared memory as 6 stages of BLOCK_K 32: a deeper pipeline"),
        Variant("128x320 (256+64) s3", d, (128, 320, 64, 3, 8, True, False, False), wb=64,
                why="(d) 40 x 16 = 640 tiles, 4.85 waves, the notebook's 128-row, 64-row-per-warpgroup shape"),
    ]
    return out


def shapes() -> list[tuple[int, int, int]]:
    """The GPU shapes, or those of ``I29_SHAPES`` (``MxNxK,...``: an environment variable, so that the compile
    workers see the same list)."""
    if DEVICE != "cuda":
        return DRY_SHAPES
    chosen = os.environ.get("I29_SHAPES")
    if not chosen:
        return GPU_SHAPES
    try:
        return [tuple(int(x) for x in s.split("x")) for s in chosen.split(",")]  # type: ignore[misc]
    except ValueError:
        sys.exit(f"I29_SHAPES: expected MxNxK[,MxNxK...] (e.g. 5000x5000x4992), got {chosen!r}")


def variants_for(nb) -> list[Variant]:
    """Every variant, or those named in ``I29_VARIANTS`` (comma-separated names; ``cublas`` always runs)."""
    out = gpu_variants(nb) if DEVICE == "cuda" else [cpu_variant(v) for v in gpu_variants(nb)]
    chosen = os.environ.get("I29_VARIANTS")
    if not chosen:
        return out
    names = {"cublas", *chosen.split(",")}
    unknown = names - {v.name for v in out}
    if unknown:
        sys.exit(f"I29_VARIANTS: unknown {sorted(unknown)}; expected some of {[v.name for v in out]}")
    return [v for v in out if v.name in names]


def cpu_variant(v: Variant) -> Variant:
    """The same variant with an interpreter-sized tile (1/8 of each side, BLOCK_K 16; twodot 1/4, so that its
    second block keeps the 16 bytes a row TMA needs: 256 x (128 + 32) runs as 64 x (32 + 8))."""
    if not v.tile or v.kind == "nbcfg":
        return v
    bm, bn, bk, s, w, sub, flat, ws = v.tile
    f = 4 if v.kind == "twodot" else 8
    return Variant(**{**asdict(v), "tile": (bm // f, bn // f, 16, s, w, sub, flat, ws), "wb": v.wb // f})


def pow2_at_least(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def edge_plan(v: Variant, M: int, N: int) -> tuple[int, int]:
    """(EDGE, EDGE_SIZE) for this shape: the named edge where its remainder is at most half a tile, else (0, 0)."""
    bm, bn = v.tile[:2]
    lo_rows, lo_cols = (64, 16) if DEVICE == "cuda" else (4, 4)  # Hopper: 64 rows per warpgroup MMA
    if v.edge == "rows" and 0 < M % bm <= bm // 2 and bm // 2 >= lo_rows:
        return 1, max(lo_rows, pow2_at_least(M % bm)) if v.tight else bm // 2
    if v.edge == "cols" and 0 < N % bn <= bn // 2 and bn // 2 >= lo_cols:
        return 2, max(lo_cols, pow2_at_least(N % bn)) if v.tight else bn // 2
    return 0, 0


def make_fn(v: Variant, nb, a, b):
    """(fn, info): fn() computes a @ b with variant v; info says what it chose for this shape."""
    M, K = a.shape
    N = b.shape[1]
    if v.kind == "torch":
        return (lambda: torch.matmul(a, b)), {}
    if v.kind == "notebook":
        return (lambda: nb.matmul_tma(a, b)), {}
    if not nb.tma_applies(a, b):
        raise ValueError("TMA does not apply (rows not 16-byte aligned)")
    num_sms = nb.NUM_SMS
    if v.kind == "nbcfg":
        cfg = nb.tma_configs(DEVICE)[v.cfg]
        kw = cfg.all_kwargs()
        bm, bn = kw["BLOCK_M"], kw["BLOCK_N"]

        def nbcfg():  # what the autotuner runs for this config (pre-hook included)
            c = torch.empty((M, N), device=a.device, dtype=a.dtype)
            descs = [TensorDescriptor.from_tensor(t, [16, 16]) for t in (a, a, nb.line_aligned(b), c, c)]
            nargs = dict(zip(["a_desc", "ah_desc", "b_desc", "c_desc", "ch_desc"], descs, strict=True), **kw)
            cfg.pre_hook(nargs)
            grid = (min(num_sms, triton.cdiv(M, bm) * triton.cdiv(N, bn)),)
            nb.matmul_tma_kernel.fn[grid](*descs, M, N, K, NUM_SMS=num_sms, **kw)
            return c
        return nbcfg, {"config": str(cfg)}
    bm, bn, bk, stages, warps, sub, flat, ws = v.tile
    common = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=v.group_m, NUM_SMS=num_sms, SUBTILE=sub,
                  FLATTEN=flat, WARP_SPECIALIZE=ws, num_warps=warps, num_stages=stages)
    cw = bn // 2 if sub else bn
    if v.kind == "streamk":
        ws_buf = torch.empty(2 * num_sms * bm * bn, device=a.device, dtype=torch.float32)
        counts = torch.zeros(2 * num_sms, device=a.device, dtype=torch.int32)

        def streamk():
            c = torch.empty((M, N), device=a.device, dtype=a.dtype)
            bb = nb.line_aligned(b) if v.copy_b else b
            grid = (min(num_sms, triton.cdiv(M, bm) * triton.cdiv(N, bn)),)
            streamk_kernel[grid](TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(bb, [bk, bn]),
                                 TensorDescriptor.from_tensor(c, [bm, cw]), ws_buf, counts, M, N, K, **common)
            return c
        return streamk, {}
    if v.kind == "twodot":
        wa = bn - v.wb
        common = {**common, "BLOCK_NA": wa, "BLOCK_NB": v.wb}
        del common["BLOCK_N"]

        def twodot():
            c = torch.empty((M, N), device=a.device, dtype=a.dtype)
            bb = nb.line_aligned(b) if v.copy_b else b
            descs = [TensorDescriptor.from_tensor(t, blk) for t, blk in
                     ((a, [bm, bk]), (bb, [bk, wa]), (bb, [bk, v.wb]), (c, [bm, wa // 2 if sub else wa]),
                      (c, [bm, v.wb]))]
            grid = (min(num_sms, triton.cdiv(M, bm) * triton.cdiv(N, bn)),)
            twodot_kernel[grid](*descs, M, N, K, **common)
            return c
        return twodot, {"tiles": triton.cdiv(M, bm) * triton.cdiv(N, bn)}
    edge, size = edge_plan(v, M, N)

    def persistent():
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        bb = nb.line_aligned(b) if v.copy_b else b
        ae = [size if edge == 1 else bm, bk]
        be = [bk, size if edge == 2 else bn]
        ce = [size, cw] if edge == 1 else [bm, size] if edge == 2 else [bm, cw]
        descs = [TensorDescriptor.from_tensor(t, blk) for t, blk in
                 ((a, [bm, bk]), (a, ae), (bb, [bk, bn]), (bb, be), (c, [bm, cw]), (c, ce))]
        whole = (M // bm if edge == 1 else triton.cdiv(M, bm)) * (N // bn if edge == 2 else triton.cdiv(N, bn))
        extra = (triton.cdiv(N, bn) if edge == 1 else triton.cdiv(M, bm)) if edge else 0
        persistent_kernel[(min(num_sms, whole + extra),)](*descs, M, N, K, EDGE=edge, EDGE_SIZE=size, **common)
        return c
    return persistent, {"edge": ["none", "rows", "cols"][edge], "edge_size": size}


# ------------------------------------------------------------------------------------------------
# Checks and timing


def operands(M: int, N: int, K: int, dtype=torch.float16, seed: int = 0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    scale = K ** -0.25  # entries of A @ B about N(0, 1)
    a = (torch.randn(M, K, generator=g, device=DEVICE) * scale).to(dtype)
    b = (torch.randn(K, N, generator=g, device=DEVICE) * scale).to(dtype)
    return a, b


def check(out, ref) -> dict:
    """Relative Frobenius and largest absolute error of ``out`` against ``ref`` (entries about N(0, 1))."""
    diff = (out.float() - ref.float())
    rel = (diff.norm() / ref.float().norm()).item()
    worst = diff.abs().max().item()
    ok = bool(torch.isfinite(out).all().item()) and rel <= 1e-2 and worst <= 0.05
    return {"ok": ok, "rel_err": rel, "max_abs_err": worst}


def poison(M: int, N: int, dtype) -> None:
    """Leave a NaN-filled block of C's size in the caching allocator, so a tile a kernel never writes shows up
    as NaN (not as the right values a previous variant left at the same address)."""
    t = torch.full((M, N), float("nan"), device=DEVICE, dtype=dtype)
    del t


def best_config(kernel) -> str | None:
    cfg = getattr(kernel, "best_config", None)
    return str(cfg) if cfg is not None else None


# ------------------------------------------------------------------------------------------------
# Parallel compilation (GPU): worker processes run each (shape, variant) once, filling Triton's disk cache


def compile_worker(task_file: str, result_file: str) -> None:
    nb = load_notebook()
    variants = {v.name: v for v in variants_for(nb)}
    tasks = json.loads(Path(task_file).read_text())
    inputs = {}
    with open(result_file, "w") as log:
        for shape_idx, name in tasks:
            M, N, K = shapes()[shape_idx]
            log.write(json.dumps({"started": [shape_idx, name]}) + "\n")
            log.flush()
            t0 = time.perf_counter()
            try:
                if shape_idx not in inputs:
                    inputs[shape_idx] = operands(M, N, K)
                a, b = inputs[shape_idx]
                fn, _ = make_fn(variants[name], nb, a, b)
                fn()
                if DEVICE == "cuda":
                    torch.cuda.synchronize()
                row = {"shape": shape_idx, "variant": name, "ok": True}
            except Exception as exc:  # recorded; the timed process will not retry it
                row = {"shape": shape_idx, "variant": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"[:800]}
            row["seconds"] = round(time.perf_counter() - t0, 2)
            log.write(json.dumps(row) + "\n")
            log.flush()


def precompile(variants: list[Variant], shape_ids: list[int], deadline_s: float, workdir: Path) -> dict:
    """Run the (shape, variant) pairs in worker processes until done or ``deadline_s``; return their records."""
    # one worker per variant at a time (all shapes: each specialisation compiled once, by one process); the
    # notebook's autotuned wrapper (Exercise 4's grouped kernel at 2048^3 first) on a worker of its own
    groups = [[(s, v.name) for s in shape_ids] for v in variants if v.kind in ("nbcfg", "persistent", "streamk", "twodot")]
    notebook = sorted([(s, "notebook") for s in shape_ids], key=lambda p: shapes()[p[0]] != (2048, 2048, 2048))
    n = max(1, min(12, (os.cpu_count() or 2) - 2))
    work = [[] for _ in range(n)]
    work[0] += notebook
    for i, group in enumerate(groups):
        work[1 + i % (n - 1) if n > 1 else 0] += group
    pairs = sum(work, [])
    procs = []
    for w in range(n):
        task_file, result_file = workdir / f"tasks{w}.json", workdir / f"compiled{w}.jsonl"
        task_file.write_text(json.dumps(work[w]))
        with open(workdir / f"worker{w}.log", "w") as err:  # a file, not a pipe: a full pipe would block it
            cmd = [sys.executable, __file__, "--compile-worker", str(task_file), str(result_file)]
            procs.append((subprocess.Popen(cmd + ([] if DEVICE == "cuda" else ["--dry-run"]),
                                           stdout=subprocess.DEVNULL, stderr=err),
                          result_file, workdir / f"worker{w}.log"))
    t_end = time.perf_counter() + deadline_s
    killed = set()
    for w, (proc, _, _) in enumerate(procs):
        try:
            proc.wait(timeout=max(0.1, t_end - time.perf_counter()))
        except subprocess.TimeoutExpired:
            proc.kill()  # only the workers started above, by their own handles
            proc.wait()
            killed.add(w)
    records = []
    for w, (proc, result_file, log) in enumerate(procs):
        pending = None  # the pair a worker had started and not finished: a crash, a hang or the deadline
        lines = result_file.read_text().splitlines() if result_file.exists() else []
        for row in (json.loads(line) for line in lines if line.strip()):
            if "started" in row:
                pending = row["started"]
            else:
                records.append(row)
                pending = None
        if proc.returncode != 0:
            records.append({"worker": w, "exit_code": proc.returncode, "killed_at_deadline": w in killed,
                            "stderr_tail": log.read_text(errors="replace")[-1500:]})
            if pending is not None and pending[1] != "notebook":  # not retried by the timed process: it might hang or crash it too
                why = "unfinished when the worker was stopped at the deadline" if w in killed else "worker crashed"
                records.append({"shape": pending[0], "variant": pending[1], "ok": False, "error": why})
    n_killed = len(killed)
    return {"workers": n, "pairs": len(pairs), "killed_at_deadline": n_killed, "records": records}


# ------------------------------------------------------------------------------------------------


def load_notebook():
    import types

    from mlsys.bench.experiments.lab2_matmul import GOING_FURTHER
    from mlsys.runtime.notebook import code_cells, exec_cells
    from mlsys.runtime.paths import lab_notebook

    nb_path = lab_notebook("lab2_tiled_matmul")
    tagged = [c.grade_id for c in code_cells(nb_path) if "lab2-kernel" in c.tags]
    module = types.ModuleType("lab2_kernels")
    exec_cells(nb_path, ["setup", "add_kernel", *tagged], module.__dict__)
    module.fallback = module.matmul  # the persistent TMA kernel is in the optional notebook beside the lab
    exec_cells(GOING_FURTHER, [c.grade_id for c in code_cells(GOING_FURTHER) if "lab2-kernel" in c.tags], module.__dict__)
    return module


def cpu_check() -> int:
    """Every variant under the interpreter on tiny ragged shapes (stream-K with k split unevenly over 4
    programs) against fp32 torch.matmul."""
    nb = load_notebook()
    ref = torch.randn(64, 64)
    bad = ref.clone()
    bad[8:16, 40:48] = 0  # one 8 x 8 tile never written
    failures = int(check(ref, ref)["ok"] is not True) + int(check(bad, ref)["ok"] is not False)
    print(f"check() passes the reference and flags a missing 8x8 tile: {failures == 0}")
    for M, N, K, dtype in CPU_SHAPES:
        a, b = operands(M, N, K, dtype)
        ref = a.float() @ b.float()
        for v in map(cpu_variant, gpu_variants(nb)):
            t0 = time.perf_counter()
            try:
                poison(M, N, dtype)
                fn, info = make_fn(v, nb, a, b)
                res = check(fn(), ref)
            except Exception as exc:
                res, info = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, {}
                traceback.print_exc()
            failures += not res["ok"]
            print(f"{M}x{N}x{K} {str(dtype)[6:]:8} {v.name:36} {'ok ' if res['ok'] else 'BAD'} "
                  f"rel {res.get('rel_err', float('nan')):.1e} {info} {time.perf_counter() - t0:.1f}s", flush=True)
    print(f"cpu check: {failures} failures")
    return 1 if failures else 0


def run(out_path: Path, budget_s: float) -> None:
    t_start = time.perf_counter()

    def left() -> float:
        return budget_s - (time.perf_counter() - t_start)

    from mlsys.bench.timing import time_interleaved

    nb = load_notebook()
    variants = variants_for(nb)
    gpu = DEVICE == "cuda"
    report = {"what": "issue 29 sweep: Lab 2 persistent TMA matmul variants vs torch.matmul, fp16 in, fp32 acc",
              "device": torch.cuda.get_device_name(0) if gpu else "cpu (--dry-run: interpreter, tiny shapes)",
              "sm_count": nb.NUM_SMS, "notebook_candidates": [str(c) for c in nb.tma_configs(DEVICE)],
              "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
              "software": {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
                           "python": sys.version.split()[0]},
              "method": "mlsys.bench.timing.time_interleaved: L2 flushed, CUDA events, one call of each per round, "
                        f"{HOST_GAP_S * 1e6:g} us GPU spin before each, median; share = cublas time / variant time",
              "budget_s": budget_s, "variants": [asdict(v) for v in variants], "shapes": {}, "skipped": []}

    def save() -> None:
        report["elapsed_s"] = round(time.perf_counter() - t_start, 1)
        out_path.write_text(json.dumps(report, indent=1, default=str))

    workdir = out_path.parent / (out_path.stem + "_compile")
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    report["precompile"] = precompile(variants, list(range(len(shapes()))), min(110.0, 0.5 * budget_s), workdir)
    report["precompile"]["seconds"] = round(time.perf_counter() - t0, 1)
    failed = {(r["shape"], r["variant"]): r["error"] for r in report["precompile"]["records"]
              if "variant" in r and not r["ok"]}
    print(f"precompile: {report['precompile']['workers']} workers, {len(report['precompile']['records'])} of "
          f"{report['precompile']['pairs']} pairs done, {len(failed)} failed, {report['precompile']['seconds']} s",
          flush=True)
    save()

    for si, (M, N, K) in enumerate(shapes()):
        label = f"{M}x{N}x{K}"
        if left() < 10:
            report["skipped"].append(f"{label}: budget")
            continue
        a, b = operands(M, N, K)
        ref = torch.matmul(a, b)
        entry = {"tiles_128x256": triton.cdiv(M, 128) * triton.cdiv(N, 256), "variants": {}}
        report["shapes"][label] = entry
        fns = {}
        for v in variants:
            rec = entry["variants"][v.name] = {}
            if (si, v.name) in failed:
                rec.update(status="compile/run failed in worker", error=failed[(si, v.name)])
                continue
            if left() < 8:
                rec["status"] = "skipped: budget"
                continue
            t0 = time.perf_counter()
            try:
                fn, info = make_fn(v, nb, a, b)
                rec.update(info)
                poison(M, N, a.dtype)
                res = check(fn(), ref)
            except Exception as exc:
                rec.update(status="failed", error=f"{type(exc).__name__}: {exc}"[:800])
                continue
            rec.update(res, first_call_s=round(time.perf_counter() - t0, 2))
            if res["ok"]:
                fns[v.name] = fn
            else:
                rec["status"] = "WRONG (not timed)"
        calls_s = 2 * M * N * K / 400e12  # a rough time per call, to size the repeats
        repeats = int(max(10, min(20, 3.0 / max(1e-9, calls_s * len(fns)))))
        timings = time_interleaved(fns, DEVICE, what=label, repeats=repeats, warmup=2, spin_up_s=0.05,
                                   host_gap_s=HOST_GAP_S)
        t_ref = timings["cublas"].median
        for name, t in timings.items():
            entry["variants"][name].update(status="timed", median_us=t.median * 1e6, min_us=min(t.times) * 1e6,
                                           max_us=max(t.times) * 1e6, tflops=2 * M * N * K / t.median / 1e12,
                                           share=t_ref / t.median)
        entry["repeats"] = repeats
        ranked = [(rec["share"], name) for name, rec in entry["variants"].items() if "share" in rec and name != "cublas"]
        entry["best"] = {"variant": max(ranked)[1], "share": max(ranked)[0]} if ranked else None
        entry["notebook_best_config"] = {"matmul_tma_kernel": best_config(nb.matmul_tma_kernel),
                                         "matmul_kernel": best_config(nb.matmul_kernel)}
        save()
        print(f"\n{label} (cublas {t_ref * 1e6:.1f} us, {2 * M * N * K / t_ref / 1e12:.0f} TFLOP/s; best "
              f"{entry['best']}), "
              f"{left():.0f} s left; notebook picked {entry['notebook_best_config']['matmul_tma_kernel']}")
        for name, rec in sorted(entry["variants"].items(), key=lambda kv: -kv[1].get("share", -1)):
            if "share" in rec:
                print(f"  {name:36} {rec['tflops']:6.0f} TFLOP/s  share {rec['share']:.3f}  {rec.get('edge', '')}")
            else:
                print(f"  {name:36} {rec.get('status', '?')}: {rec.get('error', '')[:100]}")
        sys.stdout.flush()
    save()
    print(f"\nwrote {out_path} ({time.perf_counter() - t_start:.0f} s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="JSON report (GPU run)")
    parser.add_argument("--budget", type=float, default=200.0, help="seconds for the whole GPU run")
    parser.add_argument("--cpu-check", action="store_true", help="every kernel under the interpreter, tiny shapes")
    parser.add_argument("--dry-run", action="store_true", help="the GPU run's code path on the CPU (interpreter)")
    parser.add_argument("--compile-worker", nargs=2, metavar=("TASKS", "RESULTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.compile_worker:
        compile_worker(*args.compile_worker)
        return 0
    if args.cpu_check:
        return cpu_check()
    if args.out is None or (DEVICE != "cuda" and not args.dry_run):
        parser.error("a GPU run needs CUDA and an OUT.json path (or use --cpu-check / --dry-run)")
    run(args.out, args.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
