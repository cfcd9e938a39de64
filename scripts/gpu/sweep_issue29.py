"""Issue 29 sweep: candidate reference-kernel variants side by side with the library, one run, one GPU.

Development tool, not a course figure (records go through ``mlsys.bench``). Each shape is timed with
:func:`mlsys.bench.timing.time_interleaved` (L2 flushed before every call, CUDA events, warm-up, a GPU
spin before each call so Python launch paths stay out, median of ``REPEATS``), library first in the dict,
every variant checked against the library's output after timing. Prints one table per lab; writes
``$OUT/sweep_issue29.json``.

Lab 2 (``fill`` variants): a persistent TMA matmul whose last row of tiles, when it holds at most half a
tile (5000 = 39 x 128 + 8), runs as half-height tiles, dealt to the programs that have one whole tile
fewer than the others, so the tail fits in the last wave instead of adding one.
Lab 5 (``lazy`` variants): the running max is moved (and O, l rescaled) only when some row's max grew by
more than ``LAZY`` (log2 units; FA4's trick): p may reach 2**LAZY, which fp16 and the fp32 sums hold.
``prescale``: the scale (times log2 e) is folded into Q once.

    python3 scripts/gpu/sweep_issue29.py [lab2] [lab5]
"""

from __future__ import annotations

import json
import os
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from mlsys.bench.experiments import lab2_matmul, lab5_attention
from mlsys.bench.timing import time_interleaved

REPEATS = 15
DEV = "cuda" if torch.cuda.is_available() else "cpu"
NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 4


@triton.jit
def _pos(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    tiles_per_group = GROUP_M * num_pid_n
    first_m = (tile // tiles_per_group) * GROUP_M
    rows_in_group = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % tiles_per_group) % rows_in_group, (tile % tiles_per_group) // rows_in_group


@triton.jit
def fill_kernel(a_desc, ah_desc, b_desc, c_desc, ch_desc, M, N, K,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                NUM_SMS: tl.constexpr, WS: tl.constexpr, FLATTEN: tl.constexpr, HALF: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    rem = M % BLOCK_M
    if HALF:  # a last row of tiles at most half full: half-height tiles, after the whole ones
        full_m = M // BLOCK_M
        n_strip = num_pid_n if rem > 0 else 0
    else:
        full_m = tl.cdiv(M, BLOCK_M)
        n_strip = 0
    n_full = full_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(pid, n_full, NUM_SMS, flatten=FLATTEN, warp_specialize=WS):
        pid_m, pid_n = _pos(tile, full_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_tiles):
            a = a_desc.load([pid_m * BLOCK_M, ks * BLOCK_K])
            b = b_desc.load([ks * BLOCK_K, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], left.to(c_desc.dtype))
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], right.to(c_desc.dtype))
    if HALF:
        r = n_full % NUM_SMS  # programs >= r have one whole tile fewer: the strip goes to them
        f = NUM_SMS - r
        if pid >= r:
            for s in range(pid - r, n_strip, f):
                acc = tl.zeros((BLOCK_M // 2, BLOCK_N), dtype=tl.float32)
                for ks in range(k_tiles):
                    a = ah_desc.load([full_m * BLOCK_M, ks * BLOCK_K])
                    b = b_desc.load([ks * BLOCK_K, s * BLOCK_N])
                    acc = tl.dot(a, b, acc)
                halves = tl.permute(tl.reshape(acc, (BLOCK_M // 2, 2, BLOCK_N // 2)), (0, 2, 1))
                left, right = tl.split(halves)
                ch_desc.store([full_m * BLOCK_M, s * BLOCK_N], left.to(ch_desc.dtype))
                ch_desc.store([full_m * BLOCK_M, s * BLOCK_N + BLOCK_N // 2], right.to(ch_desc.dtype))


def fill_matmul(a, b, bm=128, bn=256, bk=64, stages=3, warps=8, group=8, ws=False, flatten=False, half=True):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N, device=a.device, dtype=a.dtype)
    half = half and 0 < M % bm <= bm // 2
    da = TensorDescriptor.from_tensor(a, [bm, bk])
    dah = TensorDescriptor.from_tensor(a, [bm // 2, bk])
    db = TensorDescriptor.from_tensor(b, [bk, bn])
    dc = TensorDescriptor.from_tensor(c, [bm, bn // 2])
    dch = TensorDescriptor.from_tensor(c, [bm // 2, bn // 2])
    full_m = M // bm if half else triton.cdiv(M, bm)
    grid = (min(NUM_SMS, full_m * triton.cdiv(N, bn) + (triton.cdiv(N, bn) if half else 0)),)
    fill_kernel[grid](da, dah, db, dc, dch, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group,
                      NUM_SMS=NUM_SMS, WS=ws, FLATTEN=flatten, HALF=half, num_warps=warps, num_stages=stages)
    return c


@triton.jit
def attn_kernel(Q, K, V, Out, N_CTX, qk_scale, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LAZY: tl.constexpr, PRESCALE: tl.constexpr,
                FASTEXP: tl.constexpr = False):
    start_m = tl.program_id(0)
    if CAUSAL:
        start_m = tl.num_programs(0) - 1 - start_m
    head = tl.program_id(1).to(tl.int64)
    base = head * N_CTX * HEAD_DIM
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :])
    if PRESCALE:
        q = (q * qk_scale).to(Q.dtype.element_ty)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if CAUSAL:
        full = (start_m * BLOCK_M) // BLOCK_N * BLOCK_N
        end = (start_m + 1) * BLOCK_M
    else:
        full = N_CTX
        end = N_CTX
    acc, l_i, m_i = attn_blocks(acc, l_i, m_i, q, K + base, V + base, 0, full, offs_m, qk_scale, HEAD_DIM, BLOCK_N,
                                False, LAZY, PRESCALE, FASTEXP)
    if CAUSAL:
        acc, l_i, m_i = attn_blocks(acc, l_i, m_i, q, K + base, V + base, full, end, offs_m, qk_scale, HEAD_DIM,
                                    BLOCK_N, True, LAZY, PRESCALE, FASTEXP)
    out = acc / l_i[:, None]
    tl.store(Out + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], out.to(Out.dtype.element_ty))


@triton.jit
def attn_blocks(acc, l_i, m_i, q, k_base, v_base, start, end, offs_m, qk_scale, HEAD_DIM: tl.constexpr,
                BLOCK_N: tl.constexpr, MASKED: tl.constexpr, LAZY: tl.constexpr, PRESCALE: tl.constexpr,
                FASTEXP: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(start, end, BLOCK_N):
        cols = start_n + offs_n
        kv = cols[:, None] * HEAD_DIM + offs_d[None, :]
        k = tl.load(k_base + kv)
        s = tl.dot(q, tl.trans(k))
        if not PRESCALE:
            s = s * qk_scale
        if MASKED:
            s = tl.where(cols[None, :] <= offs_m[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        if LAZY > 0:
            if tl.max(m_new - m_i, 0) > LAZY:  # some row's max grew a lot: move every row's
                alpha = tl.math.exp2(m_i - m_new)
                acc = acc * alpha[:, None]
                l_i = l_i * alpha
                m_i = m_new
            p = tl.math.exp2(s - m_i[:, None])
            l_i = l_i + tl.sum(p, 1)
        elif FASTEXP:  # exp2 of two fp16 values per instruction: half the special-function issues
            x = (s - m_new[:, None]).to(tl.float16)
            p = tl.inline_asm_elementwise("ex2.approx.f16x2 $0, $1;", "=r,r", [x], dtype=tl.float16,
                                          is_pure=True, pack=2)
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p.to(tl.float32), 1)
            acc = acc * alpha[:, None]
            m_i = m_new
        else:
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            m_i = m_new
        v = tl.load(v_base + kv)
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_i


def attn(q, k, v, causal, bm=128, bn=128, warps=8, stages=3, lazy=0.0, prescale=False, fastexp=False):
    b, h, n, d = q.shape
    o = torch.empty_like(q)
    attn_kernel[(n // bm, b * h)](q, k, v, o, n, d ** -0.5 * 1.4426950408889634, HEAD_DIM=d, CAUSAL=causal,
                                  BLOCK_M=bm, BLOCK_N=bn, LAZY=lazy, PRESCALE=prescale, FASTEXP=fastexp, num_warps=warps,
                                  num_stages=stages)
    return o


def sweep(label, fns, check, lib):
    """time_interleaved over fns (library first); returns rows with share of the library."""
    t = time_interleaved(fns, DEV, what=label, repeats=REPEATS, warmup=2, host_gap_s=150e-6)
    lib_t = t[lib].median
    rows = []
    for name, tm in t.items():
        rows.append({"case": label, "variant": name, "median_s": tm.median, "share": lib_t / tm.median,
                     "spread": (max(tm.times) - min(tm.times)) / tm.median,
                     "max_abs_err": check(name)})
    return rows


def lab2(results):
    """Where the 5000^3 time goes: the same tiles at 5120^3 (no partial tile, 128-byte row pitch) and 5000^3
    read through views with a 5120-element row pitch (the pitch alone)."""
    mod = lab2_matmul.load_kernels(DEV)
    for label, (m, n, k), pitch in [("5000", (5000,) * 3, None), ("5000 pitch 5120", (5000,) * 3, 5120),
                                    ("5120", (5120,) * 3, None)]:
        g = torch.Generator().manual_seed(m + n + k)
        if pitch:
            a = torch.randn(m, pitch, generator=g).half().to(DEV)[:, :k]
            b = torch.randn(k, pitch, generator=g).half().to(DEV)[:, :n]
        else:
            a = torch.randn(m, k, generator=g).half().to(DEV)
            b = torch.randn(k, n, generator=g).half().to(DEV)
        ref = torch.matmul(a, b).float()
        fns = {"cuBLAS": lambda a=a, b=b: torch.matmul(a, b),
               "plain 128x256x64 s3": lambda a=a, b=b: fill_matmul(a, b, half=False),
               "fill s4": lambda a=a, b=b: fill_matmul(a, b, stages=4)}
        if not pitch:
            fns["notebook (autotuned)"] = lambda a=a, b=b: mod.matmul_tma(a, b)
        lab2_case(results, f"lab2 {label}", fns, ref)


def lab2_case(results, label, fns, ref, no_product=None):
    """One Lab 2 case: every candidate warmed up, then timed side by side with cuBLAS and checked against
    ``ref`` (candidates named ``no_product...`` return no product and are not checked); its rows printed."""
    for fn in fns.values():
        fn()

    def check(name):
        if no_product and name.startswith(no_product):
            return 0.0
        return float((fns[name]().float() - ref).abs().max())
    results += sweep(label, fns, check, "cuBLAS")
    print_rows([r for r in results if r["case"] == label])


def lab2pad(results):
    """The notebook's persistent kernel at 5000^3 with its two ragged-edge measures on and off: rows copied to
    128-byte-aligned pitch (ALIGN_ROWS) and the last row of tiles as half tiles (HALF_TILES); the copy alone."""
    mod = lab2_matmul.load_kernels(DEV)
    for m, n, k in [(5000, 5000, 5000), (5000, 5000, 4000), (3000, 5000, 5000)]:
        g = torch.Generator().manual_seed(m + n + k)
        a = torch.randn(m, k, generator=g).half().to(DEV)
        b = torch.randn(k, n, generator=g).half().to(DEV)
        ref = torch.matmul(a, b).float()

        def nb(align, half, a=a, b=b):
            mod.ALIGN_ROWS, mod.HALF_TILES = align, half
            return mod.matmul_tma(a, b)

        def copy_only(a=a, b=b):
            mod.ALIGN_ROWS = True
            return mod.line_aligned(a), mod.line_aligned(b)
        fns = {"cuBLAS": lambda a=a, b=b: torch.matmul(a, b),
               "notebook align+half": lambda: nb(True, True), "notebook align": lambda: nb(True, False),
               "notebook half": lambda: nb(False, True), "notebook neither": lambda: nb(False, False),
               "copy A, B to aligned rows": copy_only}
        lab2_case(results, f"lab2 {m}x{n}x{k}", fns, ref, no_product="copy")
        mod.ALIGN_ROWS, mod.HALF_TILES = True, True


def lab2copy(results):
    """Which operand's copy pays, under which rule (128-byte lines or 32-byte sectors), and the copy's block."""
    mod = lab2_matmul.load_kernels(DEV)
    orig = mod.line_aligned
    for m, n, k in [(5000, 5000, 5000), (5000, 5000, 4000)]:
        g = torch.Generator().manual_seed(m + n + k)
        a = torch.randn(m, k, generator=g).half().to(DEV)
        b = torch.randn(k, n, generator=g).half().to(DEV)
        ref = torch.matmul(a, b).float()

        def nb(line=128, only=None, block=(128, 64), a=a, b=b):
            mod.LINE, mod.COPY_BLOCK = line, block
            mod.line_aligned = (orig if only is None else
                                lambda t: orig(t) if t is (a if only == "A" else b) else t)
            try:
                return mod.matmul_tma(a, b)
            finally:
                mod.line_aligned, mod.LINE, mod.COPY_BLOCK = orig, 128, (128, 64)

        def copy_only(block, a=a, b=b):
            mod.COPY_BLOCK = block
            out = orig(a), orig(b)
            mod.COPY_BLOCK = (128, 64)
            return out
        fns = {"cuBLAS": lambda a=a, b=b: torch.matmul(a, b),
               "notebook (128-byte rule)": lambda: nb(), "32-byte rule": lambda: nb(line=32),
               "A only": lambda: nb(only="A"), "B only": lambda: nb(only="B"),
               "copy block 64x256": lambda: nb(block=(64, 256)), "copy block 32x256": lambda: nb(block=(32, 256)),
               "copy alone 128x64": lambda: copy_only((128, 64)), "copy alone 64x256": lambda: copy_only((64, 256)),
               "copy alone 32x256": lambda: copy_only((32, 256))}
        lab2_case(results, f"lab2 {m}x{n}x{k}", fns, ref, no_product="copy alone")


def lab5(results):
    ns = lab5_attention.load_reference()
    backends, _ = lab5_attention.available_backends(DEV)
    for d in (128, 64):
        for n in (4096, 8192):
            for causal in (False, True):
                b, h = lab5_attention.shape_for(n, d)
                gen = torch.Generator(device=DEV).manual_seed(n + int(causal) + d)
                q, k, v = (torch.randn(b, h, n, d, device=DEV, dtype=torch.float16, generator=gen) for _ in range(3))
                bn = 128 if d == 128 else 64
                variants = {
                    "cuDNN": backends["sdpa_cudnn"],
                    "notebook (autotuned)": ns["attention"],
                    f"fixed 128x{bn} w8 s3": lambda q, k, v, c, bn=bn: attn(q, k, v, c, bn=bn),
                    f"fastexp 128x{bn} w8 s3": lambda q, k, v, c, bn=bn: attn(q, k, v, c, bn=bn, fastexp=True),
                    f"fastexp 128x{bn} w8 s2": lambda q, k, v, c, bn=bn: attn(q, k, v, c, bn=bn, stages=2,
                                                                           fastexp=True),
                    f"fastexp 128x{192 - bn} w8 s3": lambda q, k, v, c, bn=bn: attn(q, k, v, c, bn=192 - bn,
                                                                                 fastexp=True),
                }
                if d == 128:
                    variants["fastexp 128x128 w8 s4"] = lambda q, k, v, c: attn(q, k, v, c, stages=4, fastexp=True)
                else:
                    variants["fastexp 128x64 w4 s3"] = lambda q, k, v, c: attn(q, k, v, c, bn=64, warps=4,
                                                                             fastexp=True)
                fns = {}
                for name, fn in variants.items():
                    try:
                        fn(q, k, v, causal)
                        fns[name] = lambda fn=fn, q=q, k=k, v=v, c=causal: fn(q, k, v, c)
                    except Exception as exc:
                        print(f"{name} D={d} N={n} causal={causal}: {type(exc).__name__}: {str(exc)[:300]}",
                              flush=True)
                ref = fns["cuDNN"]().float()

                def check(name, fns=fns, ref=ref):
                    return float((fns[name]().float() - ref).abs().max())
                label = f"lab5 D={d} N={n} causal={causal}"
                results += sweep(label, fns, check, "cuDNN")
                print_rows([r for r in results if r["case"] == label])
                del q, k, v, ref


def print_rows(rows):
    for r in rows:
        print(f"{r['case']:<32} {r['variant']:<30} {r['median_s'] * 1e6:9.1f} us  share {r['share']:.3f}  "
              f"err {r['max_abs_err']:.3g}", flush=True)


def main():
    which = sys.argv[1:] or ["lab2", "lab5"]
    results = []
    meta = {"device": torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu", "torch": torch.__version__,
            "triton": triton.__version__, "sms": NUM_SMS}
    print(meta, flush=True)
    if "lab2" in which:
        lab2(results)
    if "lab2pad" in which:
        lab2pad(results)
    if "lab2copy" in which:
        lab2copy(results)
    if "lab5" in which:
        lab5(results)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_issue29.json"), "w") as f:
            json.dump({"meta": meta, "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
