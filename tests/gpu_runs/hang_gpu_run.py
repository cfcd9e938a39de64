"""On a GPU: a check of a really endless Triton kernel ends its process, visibly, and frees the GPU.

    python tests/gpu_runs/hang_gpu_run.py OUT.json [--limit 20]

Three child processes, one after the other:

1. ``hung``: ``checks.check_kernel`` on a launcher whose kernel loops forever (``while k < n`` with the
   increment forgotten, storing in the loop), with the watchdog's limit set to ``--limit`` seconds and
   its heartbeat to 5 s. Expected: exit code 86 (:data:`mlsys.labkit.watchdog.EXIT_CODE`) after about
   the limit, "still running" lines, and a last line that starts with "GPU kernel hung in".
2. ``after``: a fresh process times a small matmul on the same GPU: the hung kernel ended with its
   process, so the GPU answers at once.
3. ``honest``: ``checks.check_kernel`` on a correct kernel under the same watchdog: it passes and the
   process exits 0 well before the limit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

KERNELS = textwrap.dedent("""
    import torch, triton, triton.language as tl
    from mlsys.labkit import checks, watchdog
    watchdog.GPU_LIMIT, watchdog.HEARTBEAT = __LIMIT__, 5.0

    @triton.jit
    def spin_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        acc = tl.zeros([BLOCK], tl.float32)
        k = 0
        while k < n:  # k += 1 forgotten: a learner's endless loop
            acc += x
            tl.store(out_ptr + offs, acc, mask=mask)
        tl.store(out_ptr + offs, acc, mask=mask)

    @triton.jit
    def add_one_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)

    def launch(kernel, x):
        out = torch.empty_like(x)
        kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
        return out

    x = torch.randn(1000, device="cuda")
""")

CASES = {
    "hung": KERNELS + textwrap.dedent("""
        checks.check_kernel(lambda t: launch(spin_kernel, t), (x,), x, names=("x",), label="spin on 1000 elements")
        print("RETURNED (unexpected)")
    """),
    "after": textwrap.dedent("""
        import time, torch
        t0 = time.monotonic()
        a = torch.randn(2048, 2048, device="cuda")
        torch.cuda.synchronize()
        (a @ a).sum().item()
        print(f"GPU answered in {time.monotonic() - t0:.2f} s")
    """),
    "honest": KERNELS + textwrap.dedent("""
        checks.check_kernel(lambda t: launch(add_one_kernel, t), (x,), x + 1, names=("x",), label="add one")
        print("honest check passed")
    """),
}


def run_case(name: str, limit: float) -> dict:
    code = CASES[name].replace("__LIMIT__", repr(float(limit)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    script = Path(tempfile.mkdtemp(prefix="mlsys-hang-")) / f"{name}.py"  # @triton.jit reads its source file
    script.write_text(code)
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                              timeout=limit + 90)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = None, str(exc.stdout or ""), "TIMEOUT: the child did not end"
    wall = time.monotonic() - t0
    lines = out.splitlines()
    return {"case": name, "exit_code": rc, "wall": {"value": round(wall, 2), "unit": "s"},
            "still_running_lines": sum("still running on the GPU" in x for x in lines),
            "last_line": lines[-1] if lines else "", "stderr_tail": err[-1500:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--limit", type=float, default=20.0)
    a = ap.parse_args()
    import torch
    import triton

    rec = {"what": "a check of an endless Triton kernel on a GPU, under mlsys.labkit.watchdog",
           "method": __doc__.split("\n\n", 2)[2].strip(),
           "date": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
           "device": torch.cuda.get_device_name(0), "software": {"torch": torch.__version__, "triton": triton.__version__,
                                                                 "python": sys.version.split()[0]},
           "limit": {"value": a.limit, "unit": "s"}, "cases": []}
    for name in ("hung", "after", "honest"):
        rec["cases"].append(run_case(name, a.limit))
        a.out.write_text(json.dumps(rec, indent=1) + "\n")
        print(json.dumps(rec["cases"][-1]), flush=True)
    hung, after, honest = rec["cases"]
    ok = (hung["exit_code"] == 86 and hung["last_line"].startswith("GPU kernel hung in spin")
          and hung["wall"]["value"] < a.limit + 60 and after["exit_code"] == 0 and honest["exit_code"] == 0)
    rec["as_expected"] = ok
    a.out.write_text(json.dumps(rec, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
