"""Issue 29: Lab 3's fused softmax and element-wise kernels under other launch configurations, against a copy of as
many bytes, one GPU run.

    python tests/gpu_runs/i29_lab3_sweep.py OUT.json [--repeats R]   # on a GPU (repo root on PYTHONPATH)
    python tests/gpu_runs/i29_lab3_sweep.py OUT.json --cpu-check     # every variant under the interpreter

Development tool, not a course figure. The kernels are the instructor notebook's own (its cells, executed as
``mlsys.bench``'s ``lab3_fusion`` does); only the launch changes:

* softmax: ``num_warps`` in 2, 4, 8, 16 for every one of ``lab3_fusion``'s seven shapes, and the notebook's
  own rule (``min(16, max(4, BLOCK // 256))``). The recorded fp16 rows of 4096 ran at 0.80 of the copy on an
  H200 (0.94 on an H100) with 16 warps: one program then holds 8 KiB, so the 64 warps an SM can hold keep
  only 4 rows (32 KiB) of loads in flight, half what the fp32 rows of the same length keep. ``recip`` is the
  kernel with one reciprocal per row and a multiply per element instead of a division per element.
* element-wise: ``BLOCK`` in 1024 (the notebook's), 2048, 4096 with 4 or 8 warps, at ``lab3_fusion``'s four
  shapes (fp32 1024 x 1024 ran at 0.94 of the copy on an H200).

Per shape, ``dst.copy_(src)`` on a tensor of the same shape and dtype (the same bytes read and written as the
kernels) and every variant are timed side by side by :func:`mlsys.bench.timing.time_interleaved` (L2 flushed,
CUDA events, one call of each per round, median); share = copy time / variant time. Every variant's output is
checked against PyTorch before timing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

if "--cpu-check" in sys.argv:
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["TRITON_INTERPRET"] = "1"

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from mlsys.bench.experiments import lab3_fusion  # noqa: E402
from mlsys.bench.timing import time_interleaved  # noqa: E402

GPU_EW = [((1024, 1024), "fp32"), ((4096, 4096), "fp32"), ((8192, 8192), "fp32"), ((4096, 4096), "fp16")]
GPU_SM = [((32768, 1024), "fp32"), ((16384, 2048), "fp32"), ((8192, 4096), "fp32"), ((4096, 781), "fp32"),
          ((32768, 1024), "fp16"), ((16384, 2048), "fp16"), ((8192, 4096), "fp16")]
CPU_EW = [((1000,), "fp32"), ((33, 65), "fp16")]
CPU_SM = [((7, 781), "fp32"), ((5, 1024), "fp16")]
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


@triton.jit
def softmax_recip_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    """The notebook's softmax with one reciprocal per row and a multiply per element (not a division)."""
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    numerator = tl.exp(x - tl.max(x, axis=0))
    y = numerator * (1.0 / tl.sum(numerator, axis=0))
    tl.store(out_ptr + row * row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax_launcher(kernel: Any, warps: int):
    """f(x): `kernel` (the notebook's softmax or the recip one) launched one program per row on `warps` warps."""
    def run(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n_cols = x.shape[-1]
        kernel[(x.numel() // n_cols,)](x, out, n_cols, n_cols, BLOCK=triton.next_power_of_2(n_cols), num_warps=warps)
        return out
    return run


def softmax_variants(ns: dict[str, Any]) -> dict[str, Any]:
    """name -> f(x): the notebook's launcher, and its softmax kernel (or the recip one) on a given num_warps."""
    out = {"notebook": ns["fused_softmax"]}
    for w in (2, 4, 8, 16):
        out[f"w{w}"] = softmax_launcher(ns["softmax_kernel"], w)
    for w in (4, 8, 16):
        out[f"recip_w{w}"] = softmax_launcher(softmax_recip_kernel, w)
    return out


def bytes_rule_warps(n_cols: int, itemsize: int) -> int:
    """num_warps so that each thread holds 32 bytes of the row: BLOCK * itemsize / (32 * 32), within 2..16."""
    return min(16, max(2, triton.next_power_of_2(n_cols) * itemsize // 1024))


def elementwise_variants(ns: dict[str, Any]) -> dict[str, Any]:
    kernel = ns["relu_affine_kernel"]

    def launcher(block: int, warps: int):
        def run(x: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            n = x.numel()
            kernel[(triton.cdiv(n, block),)](x, out, n, 0.5, 1.0, BLOCK=block, num_warps=warps)
            return out
        return run

    out = {"notebook": ns["fused_relu_affine"]}
    for block in (1024, 2048, 4096):
        for w in (4, 8):
            out[f"b{block}_w{w}"] = launcher(block, w)
    return out


def measure(kind: str, shape: tuple[int, ...], dname: str, variants: dict[str, Any], device: str,
            repeats: int, softmax_kernel: Any = None) -> dict[str, Any]:
    dtype = DTYPES[dname]
    x = torch.randn(shape, device=device, dtype=dtype) * (4 if kind == "softmax" else 1)
    if kind == "softmax":
        ref = torch.softmax(x.float(), dim=-1).to(dtype)
        tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-3)
        variants = dict(variants)
        w = bytes_rule_warps(shape[-1], x.element_size())
        variants["bytes_rule"] = softmax_launcher(softmax_kernel, w)  # 32 bytes of the row per thread
    else:
        ref = (torch.relu(x.float()) * 0.5 + 1.0).to(dtype)
        tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-3, atol=1e-3)
    row: dict[str, Any] = {"kind": kind, "shape": list(shape), "dtype": dname, "variants": {}}
    fns: dict[str, Any] = {}
    dst = torch.empty_like(x)
    fns["copy"] = lambda: dst.copy_(x)
    for name, fn in variants.items():
        try:
            torch.testing.assert_close(fn(x), ref, **tol)
            fns[name] = lambda fn=fn: fn(x)
        except Exception as exc:  # noqa: BLE001 - a wrong variant is reported, never timed
            row["variants"][name] = {"status": "wrong", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    if device != "cuda":
        row["checked"] = sorted(fns)
        return row
    times = time_interleaved(fns, device, what=f"{kind} {shape} {dname}", repeats=repeats, warmup=5,
                             spin_up_s=0.1)
    copy = times["copy"].median
    row["copy"] = {"time_s": copy, "bytes": 2 * x.numel() * x.element_size(),
                   "bandwidth_byte_s": 2 * x.numel() * x.element_size() / copy, "spread": times["copy"].spread}
    for name in fns:
        if name != "copy":
            row["variants"][name] = {"status": "ok", "time_s": times[name].median, "share_of_copy": copy / times[name].median,
                                     "spread": times[name].spread}
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--repeats", type=int, default=40)
    p.add_argument("--cpu-check", action="store_true")
    args = p.parse_args()
    device = "cpu" if args.cpu_check else "cuda"
    ns = lab3_fusion.load_kernels()
    sm, ew = softmax_variants(ns), elementwise_variants(ns)
    result: dict[str, Any] = {"script": "tests/gpu_runs/i29_lab3_sweep.py", "argv": sys.argv[1:],
                              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                              "torch": torch.__version__, "triton": triton.__version__, "rows": []}
    if device == "cuda":
        result.update(device=torch.cuda.get_device_name(0), cuda=torch.version.cuda)
        try:
            from mlsys.bench.provenance import nvidia_smi

            result["nvidia_smi"] = nvidia_smi(0)
        except Exception as exc:  # noqa: BLE001
            result["nvidia_smi"] = {"error": str(exc)[:300]}
    t0 = time.monotonic()
    cases = [("softmax", s, d, sm) for s, d in (CPU_SM if args.cpu_check else GPU_SM)]
    cases += [("elementwise", s, d, ew) for s, d in (CPU_EW if args.cpu_check else GPU_EW)]
    for kind, shape, dname, variants in cases:
        row = measure(kind, shape, dname, variants, device, args.repeats, ns["softmax_kernel"])
        result["rows"].append(row)
        ok = {k: v for k, v in row["variants"].items() if v.get("status") == "ok"}
        bad = {k: v["error"][:100] for k, v in row["variants"].items() if v.get("status") != "ok"}
        if ok:
            best = max(ok, key=lambda k: ok[k]["share_of_copy"])
            print(f"{kind:11s} {str(shape):14s} {dname}: copy {row['copy']['bandwidth_byte_s'] / 1e12:.2f} TB/s; "
                  + " ".join(f"{k} {v['share_of_copy']:.3f}" for k, v in ok.items()) + f"; best {best}", flush=True)
        else:
            print(f"{kind:11s} {str(shape):14s} {dname}: checked {row.get('checked')}", flush=True)
        if bad:
            print("   WRONG:", bad)
            result.setdefault("wrong", []).append({"shape": list(shape), "dtype": dname, **bad})
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    result["elapsed_s"] = round(time.monotonic() - t0, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 1 if result.get("wrong") else 0


if __name__ == "__main__":
    sys.exit(main())
