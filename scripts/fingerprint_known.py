"""Write labs/known_solutions/<lab>.json: fingerprints of a public solution's kernels, never their code.

    python scripts/fingerprint_known.py LAB TUTORIAL.py KERNEL [KERNEL...] --path python/tutorials/X.py --commit SHA

TUTORIAL.py is a local copy of the public file (or of its kernels alone); each KERNEL is a top-level function
of it. The fingerprints are those `mlsys.grader.similarity` computes (k-grams of normalised tokens, names
renamed), with the line in the kernel where each starts. The code itself stays out of this repository.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

from mlsys.grader.similarity import K, fingerprints


def kernel_source(text: str, name: str) -> str:
    """The source of top-level function ``name`` in ``text``, decorators included."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            return "\n".join(text.splitlines()[start - 1:node.end_lineno]) + "\n"
    raise SystemExit(f"no top-level function {name!r} in the given file")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("lab")
    p.add_argument("file", type=Path)
    p.add_argument("kernels", nargs="+")
    p.add_argument("--path", required=True, help="the file's path in triton-lang/triton")
    p.add_argument("--commit", required=True)
    a = p.parse_args()
    text = a.file.read_text()
    entry = {
        "source": {"name": "Triton tutorial", "repository": "https://github.com/triton-lang/triton",
                   "path": a.path, "commit": a.commit,
                   "licence": "MIT (Copyright 2018-2020 Philippe Tillet, 2020-2022 OpenAI); "
                              "only fingerprints are kept here, not the code"},
        "k": K,
        "kernels": [{"name": k, "fingerprints": fingerprints(kernel_source(text, k))} for k in a.kernels],
    }
    out = Path("labs/known_solutions") / f"{a.lab}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out}: " + ", ".join(f"{k['name']} {len(k['fingerprints'])}" for k in entry["kernels"]))


if __name__ == "__main__":
    main()
