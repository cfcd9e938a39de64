"""PTX and SASS of the same kernels written in CUDA C++ and in Triton, compiled for the H100
(sm_90a), with the memory and matrix instructions counted: vector add, row softmax, and a small
matrix product (WMMA in CUDA, ``tl.dot`` in Triton).

CUDA C++ goes through ``nvcc -arch=sm_90a`` (``-ptx`` for PTX, ``-cubin`` then ``cuobjdump
--dump-sass`` for SASS); Triton kernels are launched on the GPU (so they are specialised as in real
use) and their ``asm["ptx"]`` and ``asm["sass"]`` kept; on a machine without one they are compiled
for sm_90a with ``triton.compile``. SASS opcodes are counted by mnemonic (``LDG.E.128`` counts as
``LDG``, ``HGMMA.64x128x16.F32.BF16`` as ``HGMMA``) and by full opcode. On a GPU the CUDA kernels
are also run through CuPy, when it is installed, and checked against torch.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

SHOWN_IN = ("chapters/08_writing_kernels",)
NEEDS = "any"

CUDA_SOURCE = r"""
#include <cuda_fp16.h>
#include <mma.h>

// c[i] = a[i] + b[i]: one thread per element, a guard for the last partial block
extern "C" __global__ void vector_add(const float* __restrict__ a, const float* __restrict__ b,
                                      float* __restrict__ c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

// y = softmax(x) along each row: one block per row, a shared-memory tree for the max and the sum
extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
    extern __shared__ float buf[];
    const float* row = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, row[j]);
    buf[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] = fmaxf(buf[threadIdx.x], buf[threadIdx.x + s]);
        __syncthreads();
    }
    m = buf[0];
    __syncthreads();
    float sum = 0.f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) sum += __expf(row[j] - m);
    buf[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    float inv = 1.f / buf[0];
    for (int j = threadIdx.x; j < cols; j += blockDim.x) out[j] = __expf(row[j] - m) * inv;
}

// one warp computes a 16x16 tile C = A[16, K] @ B[K, 16] on the tensor cores (WMMA, fp16 in, fp32 acc)
extern "C" __global__ void wmma_tile(const half* __restrict__ a, const half* __restrict__ b,
                                     float* __restrict__ c, int K) {
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(fa, a + k, K);
        wmma::load_matrix_sync(fb, b + (size_t)k * 16, 16);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}
"""

_SASS_LINE = re.compile(
    r"^\s*(?:/\*[0-9a-f]+\*/\s*|[-0-9a-fA-F]{2}:[-\d]:[-\d]:[-Y]:\d+\s+)"  # cuobjdump address or nvdisasm control codes
    r"(?:\{\s*)?(?:@!?U?P[T\d]+\s+)?"                                   # optional predicate
    r"([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")                           # opcode with its modifiers
KEY_MNEMONICS = ("LDG", "STG", "LDS", "STS", "LDGSTS", "UTMALDG", "HMMA", "HGMMA", "MUFU", "FFMA", "FADD",
                 "SHFL", "BAR", "EXIT")


def sass_opcodes(sass: str) -> list[str]:
    """Every instruction's full opcode (``LDG.E.128``) in a cuobjdump or nvdisasm listing, in order."""
    return [m.group(1) for line in sass.splitlines() if (m := _SASS_LINE.match(line))]


def count_sass(sass: str) -> dict[str, Any]:
    """Instruction counts of a SASS listing: by mnemonic (before the first dot) and by full opcode."""
    ops = sass_opcodes(sass)
    by_mnemonic = Counter(op.split(".")[0] for op in ops)
    keyed = {k: by_mnemonic.get(k, 0) for k in KEY_MNEMONICS}
    full = Counter(op for op in ops if op.split(".")[0] in KEY_MNEMONICS)
    return {"instructions": len(ops), "mnemonics": keyed, "opcodes": dict(sorted(full.items()))}


def count_ptx(ptx: str) -> dict[str, int]:
    """PTX instruction counts for global loads and stores, tensor-core and special-function instructions."""
    pats = {"ld.global": r"\bld\.global", "st.global": r"\bst\.global", "ld.shared": r"\bld\.shared",
            "mma": r"\b(?:wmma\.mma|mma\.sync)", "wgmma": r"\bwgmma\.mma_async", "ex2": r"\bex2\.approx",
            "cp.async": r"\bcp\.async\b(?!\.bulk)", "cp.async.bulk.tensor": r"\bcp\.async\.bulk\.tensor"}
    return {k: len(re.findall(p, ptx)) for k, p in pats.items()}


def _tool(name: str) -> str:
    """A CUDA tool from PATH, /usr/local/cuda/bin, or the copy Triton ships (triton/backends/nvidia/bin)."""
    places = [Path("/usr/local/cuda/bin") / name]
    try:
        import triton

        places.append(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)
    except ImportError:
        pass
    found = shutil.which(name) or next((str(p) for p in places if p.exists()), None)
    if not found:
        raise FileNotFoundError(f"{name} is not on PATH, in /usr/local/cuda/bin nor in Triton's bin folder")
    return found


def _excerpt(text: str, limit: int = 12000) -> str:
    return text if len(text) <= limit else text[:limit] + "\n... (truncated)"


def clean_sass(sass: str) -> str:
    """A cuobjdump listing without its instruction encodings (the ``/* 0x... */`` columns and lines)."""
    lines = (re.sub(r"\s*/\*\s*0x[0-9a-f]{16}\s*\*/", "", line).rstrip() for line in sass.splitlines())
    return "\n".join(line for line in lines if line.strip())


def _cuda_sass_by_function(sass: str) -> dict[str, str]:
    sass = clean_sass(sass)
    parts = re.split(r"^\s*Function : (\w+)\s*$", sass, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _cuda_ptx_by_function(ptx: str) -> dict[str, str]:
    parts = re.split(r"(?=^\.visible \.entry )", ptx, flags=re.M)
    out = {}
    for p in parts[1:]:
        m = re.match(r"\.visible \.entry (\w+)", p)
        if m:
            out[m.group(1)] = p
    return out


def compile_cuda(workdir: Path) -> dict[str, Any]:
    """nvcc the CUDA source for sm_90a; return PTX, SASS and counts per kernel, plus the cubin's path."""
    src = workdir / "kernels.cu"
    src.write_text(CUDA_SOURCE)
    nvcc = _tool("nvcc")
    ptx_path, cubin = workdir / "kernels.ptx", workdir / "kernels.cubin"
    subprocess.run([nvcc, "-arch=sm_90a", "-O3", "-ptx", str(src), "-o", str(ptx_path)], check=True,
                   capture_output=True, text=True)
    res = subprocess.run([nvcc, "-arch=sm_90a", "-O3", "-cubin", "-Xptxas", "-v", str(src), "-o", str(cubin)],
                         check=True, capture_output=True, text=True)
    sass = subprocess.run([_tool("cuobjdump"), "--dump-sass", str(cubin)], check=True, capture_output=True,
                          text=True).stdout
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    ptxs, sasses = _cuda_ptx_by_function(ptx_path.read_text()), _cuda_sass_by_function(sass)
    kernels = {}
    for name in ("vector_add", "softmax_rows", "wmma_tile"):
        kernels[name] = {"ptx": _excerpt(ptxs.get(name, "")), "sass": _excerpt(sasses.get(name, "")),
                         "ptx_counts": count_ptx(ptxs.get(name, "")), "sass_counts": count_sass(sasses.get(name, ""))}
    return {"compiler": version, "command": "nvcc -arch=sm_90a -O3 -ptx / -cubin; cuobjdump --dump-sass",
            "ptxas_info": res.stderr.strip()[-3000:], "kernels": kernels, "cubin": str(cubin)}


def _triton_kernels() -> dict[str, Any]:
    import triton
    import triton.language as tl

    from ._matmul import _kernel as _matmul_kernel

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):  # noqa: ANN001
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)

    @triton.jit
    def softmax_kernel(x_ptr, y_ptr, cols, stride, BLOCK: tl.constexpr):  # noqa: ANN001
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        mask = offs < cols
        x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        tl.store(y_ptr + row * stride + offs, e / tl.sum(e, axis=0), mask=mask)

    return {"vector_add": add_kernel, "softmax_rows": softmax_kernel, "matmul": _matmul_kernel()}


def _triton_on_gpu(kernels: dict[str, Any]) -> dict[str, Any]:
    import torch

    out = {}
    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    z = torch.empty_like(x)
    k = kernels["vector_add"][(triton_cdiv(n, 1024),)](x, y, z, n, BLOCK=1024)
    torch.testing.assert_close(z, x + y)
    out["vector_add"] = k
    rows, cols = 4096, 1000
    a = torch.randn(rows, cols, device="cuda")
    b = torch.empty_like(a)
    k = kernels["softmax_rows"][(rows,)](a, b, cols, a.stride(0), BLOCK=1024)
    torch.testing.assert_close(b, torch.softmax(a, -1))
    out["softmax_rows"] = k
    from ._matmul import tiles
    from .wave_quantization import BLOCK_K, BLOCK_M, BLOCK_N
    m = 512
    p, q = torch.randn(m, m, device="cuda").bfloat16(), torch.randn(m, m, device="cuda").bfloat16()
    r = torch.empty(m, m, device="cuda", dtype=torch.bfloat16)
    k = kernels["matmul"][(tiles(m, m, BLOCK_M, BLOCK_N),)](p, q, r, m, m, m, m, 1, m, 1, m, 1, BM=BLOCK_M, BN=BLOCK_N,
                                                            BK=BLOCK_K, GROUP_M=1, num_warps=8, num_stages=3)
    torch.testing.assert_close(r.float(), (p.float() @ q.float()), atol=0.5, rtol=2e-2)
    out["matmul"] = k
    return out


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _triton_offline(kernels: dict[str, Any]) -> dict[str, Any]:
    import triton
    from triton.backends.compiler import GPUTarget

    from .wave_quantization import BLOCK_K, BLOCK_M, BLOCK_N
    target = GPUTarget("cuda", 90, 32)
    specs = {
        "vector_add": ({"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                       {"BLOCK": 1024}, {}),
        "softmax_rows": ({"x_ptr": "*fp32", "y_ptr": "*fp32", "cols": "i32", "stride": "i32", "BLOCK": "constexpr"},
                         {"BLOCK": 1024}, {}),
        "matmul": ({**{p: "*bf16" for p in ("a_ptr", "b_ptr", "c_ptr")},
                    **{p: "i32" for p in ("M", "N", "K", "sam", "sak", "sbk", "sbn", "scm", "scn")},
                    "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "GROUP_M": "constexpr"},
                   {"BM": BLOCK_M, "BN": BLOCK_N, "BK": BLOCK_K, "GROUP_M": 1}, {"num_warps": 8, "num_stages": 3}),
    }
    out = {}
    for name, (sig, const, opts) in specs.items():
        src = triton.compiler.ASTSource(fn=kernels[name], signature=sig, constexprs=const)
        out[name] = triton.compile(src, target=target, options=opts)
    return out


def run(ctx: Any) -> dict[str, Any]:
    import triton

    results: dict[str, Any] = {"target": "sm_90a"}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            cuda = compile_cuda(Path(tmp))
            cubin = cuda.pop("cubin")
            if ctx.device == "cuda":
                cuda["verified"] = _verify_cuda(cubin)
            results["cuda"] = cuda
        except (FileNotFoundError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", "") or ""
            results["cuda"] = {"unavailable": f"{type(exc).__name__}: {exc} {detail[:500]}"}
            ctx.note(f"CUDA C++ part skipped: {exc}")
    if ctx.device == "cuda":
        compiled = _triton_on_gpu(_triton_kernels())
    else:  # the interpreter (TRITON_INTERPRET=1) replaces the compiler in this process: compile in a fresh one
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        proc = subprocess.run([sys.executable, "-m", __name__], env=env, capture_output=True, text=True, check=False)
        if proc.returncode:
            raise RuntimeError(f"offline Triton compile failed: {proc.stderr[-2000:]}")
        compiled = {name: _Asm(v) for name, v in json.loads(proc.stdout).items()}
    tri: dict[str, Any] = {"triton": triton.__version__,
                           "how": "launched on the GPU" if ctx.device == "cuda" else "triton.compile for sm_90a"}
    for name, k in compiled.items():
        ptx = k.asm["ptx"]
        try:
            sass = k.asm["sass"]
        except Exception as exc:  # noqa: BLE001 - SASS needs nvdisasm; say so if absent
            sass = ""
            ctx.note(f"triton {name}: no SASS ({exc})")
        entry = {"ptx": _excerpt(ptx), "sass": _excerpt(sass), "ptx_counts": count_ptx(ptx),
                 "sass_counts": count_sass(sass)}
        for attr in ("n_regs", "n_spills"):
            if isinstance(getattr(k, attr, None), int):
                entry[attr] = getattr(k, attr)
        entry["shared_memory"] = {"value": int(getattr(k.metadata, "shared", 0)), "unit": "byte",
                                  "method": "Triton's compiled-kernel metadata"}
        tri[name] = entry
    results["triton"] = tri
    return results


def _verify_cuda(cubin: str) -> dict[str, Any]:
    """Run the nvcc-built kernels through CuPy and compare with torch (``{"ok": bool, ...}``)."""
    try:
        import cupy as cp
        import numpy as np
    except ImportError as exc:
        return {"ok": False, "why": f"CuPy not importable ({exc})"}
    try:
        mod = cp.RawModule(path=cubin)
        n = 1 << 20
        a, b = cp.random.randn(n, dtype=cp.float32), cp.random.randn(n, dtype=cp.float32)
        c = cp.empty_like(a)
        mod.get_function("vector_add")((triton_cdiv(n, 256),), (256,), (a, b, c, np.int32(n)))
        add_ok = bool(cp.allclose(c, a + b))
        rows, cols, threads = 512, 1000, 256
        x = cp.random.randn(rows, cols, dtype=cp.float32)
        y = cp.empty_like(x)
        mod.get_function("softmax_rows")((rows,), (threads,), (x, y, np.int32(cols)), shared_mem=threads * 4)
        e = cp.exp(x - x.max(axis=1, keepdims=True))
        soft_ok = bool(cp.allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-6))
        k = 64
        p, q = cp.random.randn(16, k).astype(cp.float16), cp.random.randn(k, 16).astype(cp.float16)
        r = cp.empty((16, 16), dtype=cp.float32)
        mod.get_function("wmma_tile")((1,), (32,), (p, q, r, np.int32(k)))
        mma_ok = bool(cp.allclose(r, p.astype(cp.float32) @ q.astype(cp.float32), rtol=1e-2, atol=1e-2))
        return {"ok": add_ok and soft_ok and mma_ok, "vector_add": add_ok, "softmax_rows": soft_ok, "wmma_tile": mma_ok,
                "how": "CuPy RawModule on the nvcc cubin, compared with CuPy reference results"}
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "why": f"{type(exc).__name__}: {str(exc)[:300]}"}


class _Asm:
    """What the report needs of a compiled kernel, rebuilt from the offline compile's JSON."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.asm = {"ptx": data["ptx"], "sass": data["sass"]}
        self.metadata = type("Meta", (), {"shared": data["shared"]})()


if __name__ == "__main__":  # offline compile for sm_90a, printed as JSON (used on machines without a GPU)
    done = {}
    for _name, _k in _triton_offline(_triton_kernels()).items():
        done[_name] = {"ptx": _k.asm["ptx"], "sass": _k.asm["sass"], "shared": int(getattr(_k.metadata, "shared", 0))}
    print(json.dumps(done))
