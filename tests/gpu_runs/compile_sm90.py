"""Compile i29_matmul_sweep.py's Triton kernels for Hopper (sm_90a) on a machine without a GPU, and report
what the GPU run cannot show before it starts: registers, spills, shared memory, and the wgmma shapes.

    /tmp/t36/bin/python tests/gpu_runs/compile_sm90.py [--kind twodot] [--m 5000 --n 5000 --k 5000] [--json F]

Development tool. Needs only ``triton`` (the GPU machine's version, 3.6.0; no torch, no course package):
the ``@triton.jit`` functions and the ``Variant`` list are lifted out of the sweep script by their source
(``ast``), written to a temporary module and imported, so the kernels compiled here are the sweep's own.
Each variant of the chosen kinds (default: twodot, plus the notebook's 128 x 256 candidate through
``persistent_kernel`` as a yardstick) is compiled by ``triton.compile`` from host TMA descriptor types
(``tensordesc<fp16[BM, BK]>``) for ``GPUTarget("cuda", 90, 32)``, with M, N, K i32, marked divisible by 16
where they are (as the launcher would; 5000 is not). Reported per variant:

* ``shared``: the dynamic shared memory Triton asks for (``metadata.shared``); with the cubin's static
  shared memory against the 232,448 bytes (227 KiB) one block may opt into on an H100/H200;
* ``regs``, ``spill_bytes`` (local + stack): from ``cuobjdump --dump-resource-usage`` (Triton's bundled copy)
  on Triton's own cubin (``n_regs``/``n_spills`` of a CompiledKernel are only filled in when it is loaded on
  a GPU); registers x threads against the 65,536 an SM holds;
* ``wgmma``: the distinct ``wgmma.mma_async`` shapes in the PTX (e.g. ``m64n128k16``, ``m64n32k16`` for a
  256 x (128 + 32) tile: both dots on the tensor cores), the SASS ``HGMMA`` count per shape, and the
  ``wgmma.wait_group`` depths (a non-zero one: MMAs left in flight across loop iterations).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget

SWEEP = Path(__file__).with_name("i29_matmul_sweep.py")
SMEM_LIMIT = 232448  # bytes of shared memory one block may opt into (H100, H200)
REGS_PER_SM = 65536
LIFTED = ("tile_position", "store_tile", "persistent_kernel", "twodot_kernel", "Variant", "gpu_variants")


def load_sweep():
    """The sweep's kernels, Variant and gpu_variants, without torch or mlsys."""
    text = SWEEP.read_text()
    lines = text.splitlines()
    keep = [node for node in ast.parse(text).body if getattr(node, "name", None) in LIFTED]
    pieces = ["\n".join(lines[min([n.lineno] + [d.lineno for d in n.decorator_list]) - 1:n.end_lineno])
              for n in keep]  # decorators included
    header = ("from __future__ import annotations\n\nfrom dataclasses import dataclass\n\n"
              "import triton\nimport triton.language as tl\n\nDEVICE = \"cuda\"\n")
    path = Path(tempfile.mkdtemp(prefix="sweep_kernels_")) / "sweep_kernels.py"
    path.write_text(header + "\n\n" + "\n\n\n".join(pieces) + "\n")
    spec = importlib.util.spec_from_file_location("sweep_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sweep_kernels"] = mod
    spec.loader.exec_module(mod)
    return mod


class NoNotebook:
    """gpu_variants(nb) without the notebook: no nb#i candidates."""

    @staticmethod
    def tma_configs(device):
        return []


def source_for(mod, v, M, N, K, num_sms=132):
    """(ASTSource, num_warps, num_stages) for variant v at M x N x K, fp16 in and out."""
    bm, bn, bk, stages, warps, sub, flat, ws = v.tile
    ints = {"M": "i32", "N": "i32", "K": "i32"}
    desc = "tensordesc<fp16[{}, {}]>".format
    if v.kind == "twodot":
        wa, wb = bn - v.wb, v.wb
        sig = {"a_desc": desc(bm, bk), "b1_desc": desc(bk, wa), "b2_desc": desc(bk, wb),
               "c1_desc": desc(bm, wa // 2 if sub else wa), "c2_desc": desc(bm, wb), **ints}
        const = {"BLOCK_M": bm, "BLOCK_NA": wa, "BLOCK_NB": wb}
        fn = mod.twodot_kernel
    else:  # persistent_kernel, EDGE 0 (whole tiles, TMA clips): the edge descriptors are unused copies
        cw = bn // 2 if sub else bn
        sig = {"a_desc": desc(bm, bk), "ae_desc": desc(bm, bk), "b_desc": desc(bk, bn), "be_desc": desc(bk, bn),
               "c_desc": desc(bm, cw), "ce_desc": desc(bm, cw), **ints}
        const = {"BLOCK_M": bm, "BLOCK_N": bn, "EDGE": 0, "EDGE_SIZE": 0}
        fn = mod.persistent_kernel
    const.update(BLOCK_K=bk, GROUP_M=v.group_m, NUM_SMS=num_sms, SUBTILE=sub, FLATTEN=flat, WARP_SPECIALIZE=ws)
    names = list(sig)  # as the launcher specialises: an integer that is a multiple of 16 is marked so
    attrs = {(names.index(k),): [["tt.divisibility", 16]] for k, val in (("M", M), ("N", N), ("K", K))
             if val % 16 == 0}
    return triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs), warps, stages


def cubin_usage(cubin: bytes) -> dict:
    """Registers, local memory (spills), static shared memory and the SASS HGMMA shapes of Triton's own cubin,
    from the cuobjdump Triton bundles."""
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.cubin"
        path.write_bytes(cubin)
        usage = subprocess.run([str(tool), "--dump-resource-usage", str(path)], capture_output=True, text=True,
                               check=True).stdout
        sass = subprocess.run([str(tool), "-sass", str(path)], capture_output=True, text=True, check=True).stdout
    field = {k: int(v) for k, v in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", usage)}
    hgmma = {}
    for shape in re.findall(r"HGMMA\.(\d+x\d+x\d+)", sass):
        hgmma[shape] = hgmma.get(shape, 0) + 1
    return {"regs": field.get("REG"), "spill_bytes": field.get("LOCAL", 0) + field.get("STACK", 0),
            "static_shared": field.get("SHARED", 0), "sass_hgmma": hgmma}


def compile_one(mod, v, M, N, K) -> dict:
    src, warps, stages = source_for(mod, v, M, N, K)
    row = {"variant": v.name, "kind": v.kind, "tile": list(v.tile), "wb": v.wb, "warps": warps, "stages": stages}
    try:
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    except Exception as exc:  # reported: a variant that does not compile is dropped from the sweep
        row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:1500])
        return row
    ptx = k.asm["ptx"]
    md = k.metadata
    threads = 32 * warps * getattr(md, "num_ctas", 1)
    usage = cubin_usage(k.asm["cubin"])
    row.update(ok=True, shared=md.shared, **usage, shared_fits=md.shared + usage["static_shared"] <= SMEM_LIMIT,
               regs_x_threads=(usage["regs"] or 0) * threads,
               wgmma=sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx))),
               wgmma_count=len(re.findall(r"wgmma\.mma_async", ptx)),
               wgmma_waits=sorted(set(re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx))),
               tma_loads=len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global", ptx)),
               tma_stores=len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta", ptx)))
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", action="append", help="variant kinds to compile (default: twodot, and the "
                        "notebook's 128x256 through persistent_kernel)")
    parser.add_argument("--m", type=int, default=5000)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--k", type=int, default=5000)
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args()
    mod = load_sweep()
    variants = mod.gpu_variants(NoNotebook())
    if args.kind:
        chosen = [v for v in variants if v.kind in args.kind]
    else:
        yard = mod.Variant("128x256 s3 flat (notebook #2, EDGE 0)", "persistent", (128, 256, 64, 3, 8, True, True, False))
        chosen = [yard] + [v for v in variants if v.kind == "twodot"]
    print(f"triton {triton.__version__}, sm_90a, M N K = {args.m} {args.n} {args.k}; shared limit {SMEM_LIMIT} B")
    rows = []
    for v in chosen:
        row = compile_one(mod, v, args.m, args.n, args.k)
        rows.append(row)
        if row["ok"]:
            print(f"{v.name:42} regs {row['regs']:3} spills {row['spill_bytes']} B  shared "
                  f"{row['shared']:6} ({'fits' if row['shared_fits'] else 'TOO BIG'})  regs*threads "
                  f"{row['regs_x_threads']:5}  wgmma {','.join(row['wgmma'])} (SASS {row['sass_hgmma']}) waits "
                  f"{row['wgmma_waits']}  TMA ld/st {row['tma_loads']}/{row['tma_stores']}", flush=True)
        else:
            print(f"{v.name:42} FAILED: {row['error'][:300]}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    bad = [r["variant"] for r in rows if not r["ok"] or not r["shared_fits"] or r["spill_bytes"]]
    print(f"{len(rows) - len(bad)} of {len(rows)} compile, fit and do not spill" + (f"; not: {bad}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
