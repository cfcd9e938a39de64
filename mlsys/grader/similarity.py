"""Which submissions look copied: ``python -m mlsys.grader.teach similarity LAB`` (or ``python -m mlsys.grader.similarity``).

Every submission's answer cells (nbgrader ``solution`` code cells, matched by ``grade_id``) are compared with
every other submission's, with the instructor solutions (``labs/source``) and with known public solutions
(``labs/known_solutions/<lab>.json``: fingerprints of the Triton tutorials' kernels, see there).

The method (the idea of MOSS, Schleimer et al., SIGMOD 2003, without the winnowing: the cells are small):

1. **Normalise.** Python's tokenizer turns a cell into tokens; comments, blank lines and indentation go;
   every string becomes ``S`` and every number ``N``; identifiers that are keywords, attributes (``tl.load``'s
   ``load``), modules (``tl``, ``torch``...) or builtins are kept, every other one is a renameable name.
2. **Fingerprint.** Each run of ``K`` consecutive tokens (a k-gram, ``K`` = 24: about two lines of kernel
   code) has its renameable names renamed ``v0``, ``v1``... by order of first use *within the k-gram*, then
   is hashed; each hash remembers the source line where its k-gram starts. Renaming variables, reformatting,
   adding comments or moving code around inside a cell changes no fingerprint.
3. **Remove what was given.** Hashes that occur anywhere in the student version of the lab (its code cells
   and the code shown in its text) are dropped: starter code and hints match everyone.
4. **Score.** For a cell of a submission with at least ``MIN_PRINTS`` fingerprints left, its score against a
   source is the share of its fingerprints found in the source's same cell (or in a known kernel):
   ``score = |F_sub & F_src| / |F_sub|`` (containment, 0 to 1). A submission's score against a source is
   its best cell's. A pair at or above ``THRESHOLD`` (0.7) is flagged.

Calibration (tests/test_similarity.py, 2026-12-02): ten honest Lab 2 answers written independently score at
most about 0.55 against each other and the instructor solution (short kernels of one algorithm share
idioms); a renamed, reformatted copy of the instructor solution scores 1.0, and a renamed copy of the Triton
tutorial's matmul kernel about 0.9. Larger ``K`` lowers honest scores and keeps copies' scores.

Outputs (under ``--out``, default ``labs/similarity/``): ``<lab>.html``, the closest pairs with their matching
lines side by side (every submitted character escaped), and ``<lab>.csv`` with one row per submission:
``student, lab, similarity, similarity_score``. It joins ``labs/grades.csv`` on ``(student, lab)``; a flag is
for the teacher to read and never changes a score.
"""

from __future__ import annotations

import argparse
import builtins
import csv
import hashlib
import html
import io
import json
import keyword
import re
import sys
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlsys.runtime.paths import labs_root

__all__ = ["K", "MIN_PRINTS", "THRESHOLD", "Tok", "normalise", "fingerprints", "Answer", "Match", "answers",
           "given_prints", "compare", "run", "main", "canonical"]

K = 24            # tokens per k-gram: about one line of kernel code
MIN_PRINTS = 12   # a cell with fewer fingerprints left after removing the given code is too short to judge
THRESHOLD = 0.7   # share of a cell's own fingerprints found in one source that flags it
KEEP = {"tl", "triton", "torch", "np", "numpy", "math", "F", "nn", "dist", "self", "cls"} | set(dir(builtins))


@dataclass(frozen=True)
class Tok:
    text: str   # the normalised token
    line: int   # 1-based line in the cell's source


def _raw_tokens(source: str) -> list[tuple[int, str, str]]:
    """(line, kind, text) for the code tokens of ``source``; IPython magics and shell lines are blanked."""
    text = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in source.splitlines()) + "\n"
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENCODING, tokenize.ENDMARKER}
    try:
        return [(t.start[0], tokenize.tok_name[t.type], t.string)
                for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in skip]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        out = []  # unfinished code: a plain regex tokenizer, comments dropped
        for i, ln in enumerate(text.splitlines(), 1):
            for m in re.finditer(r"#.*|'[^']*'|\"[^\"]*\"|[A-Za-z_]\w*|\d[\w.]*|\S", ln):
                s = m.group()
                if s.startswith("#"):
                    break
                kind = "STRING" if s[0] in "'\"" else "NAME" if s[0].isalpha() or s[0] == "_" else (
                    "NUMBER" if s[0].isdigit() else "OP")
                out.append((i, kind, s))
        return out


def normalise(source: str) -> list[Tok]:
    """The tokens of ``source``: strings ``S``, numbers ``N``, and every renameable name (not a keyword, an
    attribute, a module or a builtin) as ``$name``, which :func:`canonical` renames by order of first use."""
    out: list[Tok] = []
    prev = ""
    for line, kind, s in _raw_tokens(source):
        if kind == "STRING" or kind == "FSTRING_START":
            s = "S"
        elif kind in ("FSTRING_MIDDLE", "FSTRING_END"):
            continue
        elif kind == "NUMBER":
            s = "N"
        elif kind == "NAME" and prev != "." and not keyword.iskeyword(s) and s not in KEEP:
            s = "$" + s
        out.append(Tok(s, line))
        prev = s
    return out


def canonical(tokens: Iterable[str]) -> list[str]:
    """Rename the ``$name`` tokens ``v0``, ``v1``... by order of first use within ``tokens``: a renamed copy
    gives the same result wherever the tokens sit (each k-gram is renamed on its own)."""
    names: dict[str, str] = {}
    return [names.setdefault(t, f"v{len(names)}") if t.startswith("$") else t for t in tokens]


def _hash(tokens: Iterable[str]) -> str:
    return hashlib.blake2b(" ".join(tokens).encode(), digest_size=8).hexdigest()


def fingerprints(source: str, k: int = K) -> dict[str, int]:
    """``{hash: first line}`` of every k-gram of ``source``'s normalised tokens (one fingerprint for shorter code)."""
    toks = normalise(source)
    if not toks:
        return {}
    out: dict[str, int] = {}
    for i in range(max(1, len(toks) - k + 1)):
        out.setdefault(_hash(canonical(t.text for t in toks[i:i + k])), toks[i].line)
    return out


@dataclass
class Answer:
    """One source's answer cells: ``cells[grade_id]`` = source text, ``prints[grade_id]`` = its own fingerprints."""
    name: str                      # a student, "instructor solution" or "Triton tutorial: ..."
    cells: dict[str, str]
    prints: dict[str, dict[str, int]] = field(default_factory=dict)
    kind: str = "student"          # student | instructor | known


def _solution_cells(nb: dict[str, Any]) -> dict[str, str]:
    cells = {}
    for i, c in enumerate(nb.get("cells", [])):
        meta = c.get("metadata", {}).get("nbgrader", {})
        if c.get("cell_type") == "code" and meta.get("solution"):
            src = c.get("source", "")
            cells[str(meta.get("grade_id", f"cell{i}"))] = "".join(src) if isinstance(src, list) else str(src)
    return cells


def answers(path: Path, name: str, kind: str = "student") -> Answer:
    """The answer cells of the notebook at ``path``; a notebook that cannot be read has none."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Answer(name, {}, kind=kind)
    return Answer(name, _solution_cells(nb) if isinstance(nb, dict) else {}, kind=kind)


def given_prints(release_nb: Path) -> set[str]:
    """Fingerprints of everything the student version gives: code cells and code in the text (``` blocks, `code`)."""
    nb = json.loads(Path(release_nb).read_text(encoding="utf-8"))
    out: set[str] = set()
    for c in nb.get("cells", []):
        src = "".join(c.get("source", ""))
        if c.get("cell_type") == "markdown":
            blocks = re.findall(r"```[^\n]*\n(.*?)```", src, flags=re.S) + re.findall(r"`([^`\n]+)`", src)
            for b in blocks:
                out |= set(fingerprints(b))
        else:
            out |= set(fingerprints(src))
    return out


def _own(ans: Answer, given: set[str]) -> Answer:
    ans.prints = {gid: {h: ln for h, ln in fingerprints(src).items() if h not in given}
                  for gid, src in ans.cells.items()}
    return ans


@dataclass
class Match:
    """The closest cell of submission ``a`` to source ``b``: ``score`` of ``a``'s fingerprints found in ``b``."""
    a: Answer
    b: Answer
    cell: str
    b_cell: str
    score: float
    lines: list[tuple[int, int]]   # (line in a's cell, line in b's cell) where shared k-grams start

    @property
    def flagged(self) -> bool:
        return self.score >= THRESHOLD


def _score(mine: dict[str, int], theirs: dict[str, int]) -> tuple[float, list[tuple[int, int]]]:
    if len(mine) < MIN_PRINTS:
        return 0.0, []
    shared = [h for h in mine if h in theirs]
    return len(shared) / len(mine), sorted({(mine[h], theirs[h]) for h in shared})


def compare(a: Answer, b: Answer) -> Match | None:
    """``a``'s closest cell to ``b``: same ``grade_id`` for students and the instructor, any kernel for a known source."""
    best: Match | None = None
    for gid, mine in a.prints.items():
        targets = b.prints.items() if b.kind == "known" else [(gid, b.prints.get(gid, {}))]
        for bid, theirs in targets:
            score, lines = _score(mine, theirs)
            if score > 0 and (best is None or (score, len(lines)) > (best.score, len(best.lines))):
                best = Match(a, b, gid, bid, score, lines)
    return best


def known_solutions(lab: str, root: Path) -> list[Answer]:
    """The known public solutions of ``lab`` (fingerprints only, with their source) from ``known_solutions/<lab>.json``."""
    path = root / "known_solutions" / f"{lab}.json"
    if not path.is_file():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for kern in data["kernels"]:
        a = Answer(f"{data['source']['name']}: {kern['name']} ({data['source']['path']})", {}, kind="known")
        a.prints = {kern["name"]: {h: int(ln) for h, ln in kern["fingerprints"].items()}}
        out.append(a)
    return out


def _side_by_side(m: Match) -> str:
    a_lines = m.a.cells.get(m.cell, "").splitlines()
    b_lines = m.b.cells.get(m.b_cell, "").splitlines()
    rows = []
    for la, lb in sorted({(la, lb) for la, lb in m.lines}):
        left = a_lines[la - 1] if 0 < la <= len(a_lines) else ""
        right = b_lines[lb - 1] if 0 < lb <= len(b_lines) else f"(line {lb} of the source; kept as fingerprints only)"
        rows.append(f"<tr><td>{la}</td><td><pre>{html.escape(left)}</pre></td>"
                    f"<td>{lb}</td><td><pre>{html.escape(right)}</pre></td></tr>")
    return "<table><tr><th>line</th><th>submission</th><th>line</th><th>source</th></tr>" + "".join(rows) + "</table>"


def _html(lab: str, matches: list[Match], top: int) -> str:
    parts = [f"<!doctype html><meta charset='utf-8'><title>Similarity: {html.escape(lab)}</title>",
             "<style>td pre{margin:0}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;"
             "vertical-align:top}.flag{color:#a00;font-weight:bold}</style>",
             f"<h1>Similarity report: {html.escape(lab)}</h1><p>Share of a submission cell's own fingerprints "
             f"(k = {K} normalised tokens, given code removed) found in the source; flagged at {THRESHOLD:.0%} "
             "or more. A flag asks the teacher to read both; it never changes a score.</p>"]
    for m in matches[:top]:
        cls = " class='flag'" if m.flagged else ""
        parts.append(f"<h2{cls}>{html.escape(m.a.name)} ~ {html.escape(m.b.name)}: {m.score:.0%} of cell "
                     f"<code>{html.escape(m.cell)}</code>{' (flagged)' if m.flagged else ''}</h2>{_side_by_side(m)}")
    return "\n".join(parts)


def run(lab: str, *, root: Path | None = None, submitted: Path | None = None, out: Path | None = None,
        top: int = 20) -> list[Match]:
    """Compare every submission of ``lab``; write ``<out>/<lab>.html`` and ``<out>/<lab>.csv``; return the matches,
    closest first (one per ordered pair: submission a's best cell against source b)."""
    root = root or labs_root()
    submitted = submitted or root / "submitted"
    out = out or root / "similarity"
    release = root / "release" / lab / f"{lab}.ipynb"
    if not release.is_file():
        raise ValueError(f"unknown lab {lab!r}: no {release} (labs: {sorted(p.name for p in (root / 'release').glob('*'))})")
    given = given_prints(release)
    students = [_own(answers(p, p.parent.parent.name), given) for p in sorted(submitted.glob(f"*/{lab}/{lab}.ipynb"))]
    sources = [_own(answers(root / "source" / lab / f"{lab}.ipynb", "instructor solution", "instructor"), given)]
    sources += known_solutions(lab, root)
    matches = [m for a in students for b in students + sources if b is not a and (m := compare(a, b))]
    matches.sort(key=lambda m: -m.score)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{lab}.html").write_text(_html(lab, matches, top), encoding="utf-8")
    best = {}
    for m in matches:
        best.setdefault(m.a.name, m)
    with open(out / f"{lab}.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "lab", "similarity", "similarity_score"])
        for s in students:
            m = best.get(s.name)
            flag = f"{m.score:.0%} of {m.cell} matches {m.b.name}" if m and m.flagged else ""
            w.writerow([s.name, lab, flag, f"{m.score:.2f}" if m else "0.00"])
    return matches


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mlsys.grader.teach similarity",
                                description="flag submissions whose answer cells match another submission, the "
                                            "instructor solution or a known public solution")
    p.add_argument("lab", help="the lab to check, e.g. lab2_tiled_matmul")
    p.add_argument("--root", type=Path, help="the nbgrader course root (default: labs/ of this checkout)")
    p.add_argument("--submitted", type=Path, help="folder of <student>/<lab>/<lab>.ipynb (default labs/submitted)")
    p.add_argument("--out", type=Path, help="where to write <lab>.html and <lab>.csv (default labs/similarity)")
    p.add_argument("--top", type=int, default=20, help="pairs shown in the report (default 20)")
    a = p.parse_args(argv)
    try:
        matches = run(a.lab, root=a.root, submitted=a.submitted, out=a.out, top=a.top)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = a.out or (a.root or labs_root()) / "similarity"
    flagged = sorted({m.a.name for m in matches if m.flagged})
    print(f"{len(flagged)} submission(s) flagged{': ' + ', '.join(flagged) if flagged else ''}; "
          f"report: {out / (a.lab + '.html')}, flags: {out / (a.lab + '.csv')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
