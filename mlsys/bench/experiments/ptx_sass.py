"""PTX and SASS of chapter 2's element-wise and tl.dot Triton kernels, with opcode counts.

On a CUDA GPU the kernels are compiled by launching them (and their results checked); elsewhere
they are compiled ahead of time for compute capability 9.0 with the ptxas and nvdisasm that Triton ships, which
gives the same text an H100 would run. SASS opcodes keep their modifiers, lower-case ones too
(``HGMMA.64x64x16.F32``): a tensor-core instruction is never dropped from the count.
"""

from __future__ import annotations

import inspect
import re
from collections import Counter
from typing import Any

SHOWN_IN = ("chapters/02_journey_of_a_matmul",)
NEEDS = "any"

#: tensor-core instructions in PTX (wgmma, mma) and SASS (HGMMA, HMMA, ...)
TENSOR_CORE = (r"\bwgmma\.mma_async\S*", r"\bmma\.sync\S*", r"\bHGMMA\S*", r"\bHMMA\S*", r"\btcgen05\.mma\S*")
#: a SASS opcode: upper-case mnemonic, then dot-separated modifiers of any case (``HGMMA.64x64x16.F32``)
SASS_OPCODE = re.compile(r"^[A-Z][A-Z0-9_]*(\.[A-Za-z0-9_]+)*$")
_SASS_CONTROL = re.compile(r"^[0-9a-fA-F\-]{2}:[0-9\-]:[0-9\-]:[A-Z\-]:\d+")


def ptx_opcodes(ptx: str) -> Counter[str]:
    """PTX instructions by opcode (first token of each instruction line, predicate dropped)."""
    counts: Counter[str] = Counter()
    for raw in ptx.splitlines():
        line = raw.split("//")[0].strip()
        if not line or line.startswith((".", "{", "}", "$", ")")) or line.endswith(":"):
            continue
        if line.startswith("@"):
            parts = line.split(None, 1)
            line = parts[1] if len(parts) > 1 else ""
        tok = line.split()[0].rstrip(";") if line.split() else ""
        if tok and re.match(r"^[a-z]", tok):
            counts[tok] += 1
    return counts


def sass_opcodes(sass: str) -> Counter[str]:
    """SASS instructions by opcode with modifiers (control-code prefix, comments and predicate dropped)."""
    counts: Counter[str] = Counter()
    for raw in sass.splitlines():
        line = raw.strip()
        if "\t" in line and _SASS_CONTROL.match(line):
            line = line.split("\t", 1)[1].strip()
        line = re.sub(r"/\*.*?\*/", "", line).strip()
        if not line or line.endswith(":") or line.startswith((".", "Function", "//")):
            continue
        if line.startswith("@"):
            parts = line.split(None, 1)
            line = parts[1] if len(parts) > 1 else ""
        tok = line.split()[0].rstrip(";") if line.split() else ""
        if SASS_OPCODE.match(tok):
            counts[tok] += 1
    return counts


def base_opcodes(counts: Counter[str]) -> Counter[str]:
    """Merge opcodes that differ only in modifiers: ``LDG.E.U16`` and ``LDG.E`` count as ``LDG``."""
    merged: Counter[str] = Counter()
    for op, v in counts.items():
        merged[op.split(".")[0]] += v
    return merged


def excerpt(text: str, pattern: str, before: int = 4, after: int = 4, max_hits: int = 2) -> list[str]:
    """Lines around the first ``max_hits`` matches of ``pattern``, separate hits joined by ``...``."""
    lines = text.splitlines()
    out: list[str] = []
    last = -1
    for i in [i for i, ln in enumerate(lines) if re.search(pattern, ln)][:max_hits]:
        lo, hi = max(i - before, last + 1), min(i + after + 1, len(lines))
        if out and lo > last + 1:
            out.append("...")
        out.extend(lines[lo:hi])
        last = hi - 1
    return out


def describe(k: Any, key_ptx: str, key_sass: str) -> dict[str, Any]:
    """Counts, excerpts and launch metadata of one compiled kernel."""
    ptx, sass = k.asm["ptx"], k.asm["sass"]
    pc, sc = ptx_opcodes(ptx), sass_opcodes(sass)
    md = k.metadata
    return {
        "ptx_target": next((ln.split()[1] for ln in ptx.splitlines() if ln.startswith(".target")), None),
        "ptx_lines": len(ptx.splitlines()),
        "ptx_instruction_count": sum(pc.values()),
        "ptx_opcodes": dict(pc.most_common()),
        "ptx_excerpt": excerpt(ptx, key_ptx),
        "sass_instruction_count": sum(sc.values()),
        "sass_opcodes": dict(sc.most_common()),
        "sass_base_opcodes": dict(base_opcodes(sc).most_common()),
        "sass_excerpt": excerpt(sass, key_sass),
        "tensor_core_instructions": sorted({m for pat in TENSOR_CORE for m in re.findall(pat, ptx + "\n" + sass)}),
        "num_warps": md.num_warps,
        "num_stages": md.num_stages,
        "shared": {"value": md.shared, "unit": "byte"},
    }


def _aot(arch: int) -> tuple[Any, Any]:
    """Compile both kernels for ``sm_<arch>`` without a GPU (Triton ships ptxas and nvdisasm).

    Call it in a process where the Triton interpreter is off (see :func:`_aot_in_subprocess`).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from ._ch2_kernels import matmul_kernel, scale_add_kernel

    return _compile(scale_add_kernel, matmul_kernel, GPUTarget("cuda", arch, 32), triton, ASTSource)


def _aot_in_subprocess(arch: int) -> dict[str, Any]:
    """:func:`_aot` and :func:`describe` in a fresh Python without ``TRITON_INTERPRET`` (the interpreter
    replaces ``@triton.jit`` process-wide, so a compiled kernel cannot be made beside it)."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", __name__, str(arch)], env=env, capture_output=True, text=True,
                         timeout=600, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"ahead-of-time compile for sm_{arch} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def _described(k1: Any, k2: Any) -> dict[str, Any]:
    return {"scale_add": describe(k1, r"\bfma\.rn", r"\bFFMA\b"),
            "matmul": describe(k2, r"wgmma\.mma_async|mma\.sync", r"HGMMA|HMMA")}


def _compile(scale_add_kernel: Any, matmul_kernel: Any, target: Any, triton: Any, ASTSource: Any) -> tuple[Any, Any]:
    k1 = triton.compile(ASTSource(fn=scale_add_kernel, signature={
        "x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "alpha": "fp32", "BLOCK": "constexpr"},
        constexprs={"BLOCK": 1024}), target=target)
    k2 = triton.compile(ASTSource(fn=matmul_kernel, signature={
        "a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
        "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
        constexprs={"BM": 64, "BN": 64, "BK": 32}), target=target)
    return k1, k2


def _launched() -> tuple[Any, Any]:
    import torch
    import triton

    from ._ch2_kernels import matmul_kernel, scale_add_kernel

    n = 4096
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    o = torch.empty_like(x)
    k1 = scale_add_kernel[(triton.cdiv(n, 1024),)](x, y, o, n, 2.0, BLOCK=1024)
    torch.testing.assert_close(o, 2.0 * x + y)
    m = 256
    a = torch.randn(m, m, device="cuda", dtype=torch.float16)
    b = torch.randn(m, m, device="cuda", dtype=torch.float16)
    c = torch.empty(m, m, device="cuda", dtype=torch.float16)
    k2 = matmul_kernel[(m // 64, m // 64)](a, b, c, m, m, m, BM=64, BN=64, BK=32, num_warps=4)
    torch.testing.assert_close(c, a @ b, rtol=2e-2, atol=2e-1)
    return k1, k2


def run(ctx: Any) -> dict[str, Any]:
    from ._ch2_kernels import matmul_kernel, scale_add_kernel

    out: dict[str, Any] = {"scale_add_source": inspect.getsource(scale_add_kernel.fn),
                           "matmul_source": inspect.getsource(matmul_kernel.fn)}
    if ctx.device == "cuda":
        import torch

        out.update(_described(*_launched()))
        major, minor = torch.cuda.get_device_capability()
        out["compiled_on"] = f"this GPU (compute capability {major}.{minor}), by launching the kernels"
    else:
        out.update(_aot_in_subprocess(90))
        out["compiled_on"] = "a CPU, ahead of time for compute capability 9.0 with Triton's ptxas and nvdisasm"
    out["scale_add"]["launch"] = {"n": 4096, "BLOCK": 1024, "dtype": "float32"}
    out["matmul"]["launch"] = {"M": 256, "N": 256, "K": 256, "BM": 64, "BN": 64, "BK": 32, "dtype": "float16"}
    return out


if __name__ == "__main__":  # the ahead-of-time compile of _aot_in_subprocess
    import json
    import sys

    print(json.dumps(_described(*_aot(int(sys.argv[1])))))
