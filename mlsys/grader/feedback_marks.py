"""Feedback pages that read true: cells that were not graded say so instead of "Score: 0.0 / 2.0".

nbgrader's feedback page gives every graded cell a score, twice (in the list at the top and in the
cell's own header). Two kinds of cell have no score yet, and showing 0 for them tells the learner
they lost points they did not lose:

* a performance cell (``perf_*``) whose verdict the grader marked ``not_graded`` (metadata.mlsys.verdict: no GPU
  here; never the cell's printed text, which an answer could print): it reads "not graded here (no GPU)";
* a written answer (a solution cell with points) that the teacher has not graded yet: it reads
  "pending (graded by your teacher)".

:func:`ungraded_cells` finds both in an autograded notebook; :func:`relabel` rewrites a page.
"""

from __future__ import annotations

import re
from typing import Any

from mlsys.grader.decide.verdict import cell_status

__all__ = ["ungraded_cells", "relabel"]

NOT_HERE = "not graded here (no GPU)"
PENDING = "pending (graded by your teacher)"


def _text(cell: dict[str, Any]) -> str:
    parts = []
    for o in cell.get("outputs", []):
        t = o.get("text") or o.get("data", {}).get("text/plain", "")
        parts.append("".join(t) if isinstance(t, list) else str(t))
    return "".join(parts)


def ungraded_cells(graded_nb: dict[str, Any]) -> dict[str, str]:
    """grade_id -> the words to show instead of a score, for every cell of ``graded_nb`` without one."""
    from nbformat import from_dict
    from nbgrader.utils import determine_grade, is_solution

    out: dict[str, str] = {}
    for cell in graded_nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id")
        if not gid or not meta.get("grade"):
            continue
        if gid.startswith("perf_") and cell_status(cell) == "not_graded":
            out[gid] = NOT_HERE
        elif is_solution(from_dict(cell)):
            # a notebook file keeps a cell's source as a list of lines; nbgrader's checksum wants one string
            src = cell.get("source", "")
            score, _ = determine_grade(from_dict(dict(cell, source="".join(src) if isinstance(src, list) else src)))
            if score is None:
                out[gid] = PENDING
    return out


def relabel(html: str, ungraded: dict[str, str]) -> str:
    """Replace the two "Score: s / m" of each ungraded cell with its words (and its points)."""
    for gid, words in ungraded.items():
        g = re.escape(gid)
        # the list at the top: <li><a href="#gid">Test cell</a> (Score: 0.0 / 2.0)</li>
        html = re.sub(rf'(<a href="#{g}">[^<]*</a>\s*)\(Score: [0-9.]+ / ([0-9.]+)\)',
                      lambda m, w=words: f"{m.group(1)}({w}; {m.group(2)} points)", html)
        # the cell's own header: <a name="gid"></a><div class="panel-heading">... Score: 0.0 / 2.0 <a href="#top">
        html = re.sub(rf'(<a name="{g}"></a>.*?)Score: [0-9.]+ / ([0-9.]+)(\s*<a href="#top">)',
                      lambda m, w=words: f"{m.group(1)}{w[0].upper() + w[1:]}; {m.group(2)} points{m.group(3)}",
                      html, count=1, flags=re.S)
    return html
