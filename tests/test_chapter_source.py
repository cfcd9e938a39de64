"""Chapter sources, read as Markdown without building the book (fast; runs under ``make test``).

* A MyST role inside inline code is never parsed: ```{glue:text}`name``` ``` renders as the literal
  text ``{glue:text} name``. No chapter may have one.
* A chapter's re-measure line shows the command itself; every ``python -m mlsys.bench run NAME``
  it shows names an experiment that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))
_MD = MarkdownIt("commonmark")


def inline_code(md: str) -> list[str]:
    """The contents of every inline code span in ``md`` (CommonMark's reading, as MyST's parser does)."""
    out: list[str] = []
    for token in _MD.parse(md):
        for child in token.children or []:
            if child.type == "code_inline":
                out.append(child.content)
    return out


def roles_in_inline_code(md: str) -> list[str]:
    return [c for c in inline_code(md) if re.search(r"\{[\w:-]+\}", c) and "{glue" in c]


def test_the_check_sees_a_role_in_inline_code_and_passes_a_plain_role():
    assert roles_in_inline_code("To re-measure: `{glue:text}`ch6_reproduce``.") == ["{glue:text}"]
    assert roles_in_inline_code("It runs at {glue:text}`bw`, see `x = {1: 2}`.") == []
    # two roles side by side are two roles, not code
    assert roles_in_inline_code("{glue:text}`versions`{glue:text}`which_file`") == []


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_no_glue_role_inside_inline_code(path):
    bad = roles_in_inline_code(path.read_text(encoding="utf-8"))
    assert not bad, f"{path.name}: a glue role inside inline code renders as literal text: {bad}"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_reproduction_commands_name_real_experiments(path):
    from mlsys.bench import experiment

    names = set(experiment.catalogue())
    shown = [m.group(1) for code in inline_code(path.read_text(encoding="utf-8"))
             for m in [re.match(r"python -m mlsys\.bench run (\w+)", code)] if m]
    missing = [n for n in shown if n not in names]
    assert not missing, f"{path.name}: re-measure lines name experiments that do not exist: {missing}"
