"""What the instructor's kernel launchers dispatch on this machine, judged as the grader judges a kernel exercise:
``python tests/gpu_runs/launcher_ops.py OUT.json``.

The kernel exercises of Labs 2, 3 and 5 are checked with ``grading.FORBIDDEN_TORCH_OPS``: a launcher may dispatch
only allocations, views and copies (``grading._ALLOWED_OPS``), and no matmul by any name (``grading.MATMUL_OPS``).
On a CPU the labs' graded courses check this through the sandboxed grader; a GPU takes other code paths (TMA
descriptors, the persistent kernels' grids), so this runs every launcher of the three instructor notebooks on
this machine's device under the course's dispatch recorder and lists each op that the check would refuse. The
answer and course cells run in this process (the device image has no Jupyter), test cells are not run.
"""

from __future__ import annotations

import fnmatch
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CALLS = {  # lab -> (function, argument builder) for each launcher a kernel exercise checks
    "lab2_tiled_matmul": ["naive_matmul", "tiled_matmul", "matmul", "matmul_tma", "add"],
    "lab3_fusion": ["fused_relu_affine", "fused_softmax"],
    "lab5_attention": ["attention"],
}


def _namespace(lab: str) -> dict[str, Any]:
    """The instructor notebook's code cells except its tests, run in order (magics dropped)."""
    nb = json.loads((REPO / "labs" / "source" / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
    ns: dict[str, Any] = {"__name__": "__main__"}
    cells = Path(tempfile.mkdtemp(prefix=f"{lab}-cells-"))  # @triton.jit reads a kernel's source from its file
    for i, cell in enumerate(nb["cells"]):
        meta = cell["metadata"].get("nbgrader") or {}
        if cell["cell_type"] != "code" or meta.get("grade"):
            continue
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        src = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            path = cells / f"cell{i}.py"
            path.write_text(src, encoding="utf-8")
            exec(compile(src, str(path), "exec"), ns)  # noqa: S102 - the course's own notebook
        except Exception as exc:  # noqa: BLE001 - a figure cell that needs a record: the launchers are defined before
            ns.setdefault("_cell_errors", []).append(f"{type(exc).__name__}: {str(exc)[:160]}")
    return ns


def _arguments(lab: str, name: str, torch: Any, device: str) -> list[tuple[Any, ...]]:
    g = torch.Generator().manual_seed(0)

    def r(*shape: int, dtype: Any = torch.float16) -> Any:
        return torch.randn(*shape, generator=g).to(dtype).to(device)

    if lab == "lab2_tiled_matmul":
        if name == "add":
            return [(r(4097), r(4097))]
        sizes = [(128, 256, 64), (65, 127, 33), (512, 512, 512)] if device == "cuda" else [(16, 32, 16), (9, 13, 5)]
        return [(r(m, k, dtype=dt), r(k, n, dtype=dt)) for (m, n, k) in sizes for dt in (torch.float16, torch.float32)]
    if lab == "lab3_fusion":
        big = device == "cuda"  # the interpreter (a CPU) runs small sizes only
        if name == "fused_relu_affine":
            return [(r(1025, 33, dtype=torch.float32), 1.5, -0.25),
                    (r(4096, 4096, dtype=torch.float16) if big else r(7, 9), 2.0, 0.5)]
        return [(r(7, 1025, dtype=torch.float32),), (r(64, 4096, dtype=torch.float16) if big else r(3, 33),)]
    n = 256 if device == "cuda" else 16
    return [(r(2, 4, n, 64), r(2, 4, n, 64), r(2, 4, n, 64), causal) for causal in (False, True)]


def main(out: Path | None) -> dict[str, Any]:
    import torch

    from mlsys.bench.provenance import provenance
    from mlsys.labkit import checks, grading

    device = "cuda" if torch.cuda.is_available() else "cpu"
    prov = provenance(device)
    result: dict[str, Any] = {"device": prov["device"]["name"], "date": prov["date"], "provenance": prov, "labs": {}}
    for lab, names in CALLS.items():
        ns = _namespace(lab)
        entry: dict[str, Any] = {"cell_errors": ns.get("_cell_errors", [])}
        for name in names:
            fn = ns.get(name)
            if fn is None:
                entry[name] = {"error": "not defined"}
                continue
            ops: set[str] = set()
            errors = []
            for args in _arguments(lab, name, torch, device):
                rec = checks.dispatch_recorder()
                try:
                    with rec:
                        fn(*args)
                    if device == "cuda":
                        torch.cuda.synchronize()
                except Exception as exc:  # noqa: BLE001 - recorded
                    errors.append(f"{type(exc).__name__}: {str(exc)[:160]}")
                ops |= rec.ops
            refused = sorted(op for op in ops if any(fnmatch.fnmatchcase(op, p) for p in grading.MATMUL_OPS) or (
                op.startswith("aten::") and not any(fnmatch.fnmatchcase(op, p) for p in grading._ALLOWED_OPS)))
            entry[name] = {"ops": sorted(ops), "refused": refused, "errors": errors}
        result["labs"][lab] = entry
    result["all_allowed"] = all(not v.get("refused") and not v.get("errors") and "error" not in v
                                for e in result["labs"].values() for k, v in e.items() if k != "cell_errors")
    if out is not None:
        out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    res = main(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    print(json.dumps(res, indent=1))
