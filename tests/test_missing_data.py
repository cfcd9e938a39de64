"""A figure the course's data file lacks is shown as missing, never as a property of the hardware.

Chapter 15's fit table and chapter 90's specification table once turned an absent interconnect field
into "cannot be split (no chip-to-chip link)" for TPU v4 and Trainium2, and an absent bf16 peak into
"no bf16" for the Jetson AGX Orin (review of 2026-12-01, C15-1, C15-4, C90-2). These tests read what
the chapters render.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_book import execute_chapter, executed_by_the_book

from mlsys import hardware

ROOT = Path(__file__).resolve().parents[1]
#: phrases that state a lack of hardware, which no figure of the data file can prove by its absence
_LACK = re.compile(r"\bno (?:chip-to-chip|link|interconnect|bf16|fp8|nvlink)\b|cannot be split", re.IGNORECASE)


def _rendered_text(chapter: str) -> str:
    path = ROOT / "chapters" / chapter
    nb = executed_by_the_book(path) or execute_chapter(path)
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            texts.append(str(data.get("text/html", "")) + str(data.get("text/markdown", "")) + str(data.get("text/plain", "")))
    return "\n".join(texts)


@pytest.mark.slow  # executes two chapters when the book's cache is stale
@pytest.mark.parametrize("chapter", ["15_choosing_hardware.md", "90_accelerators.md"])
def test_absent_fields_render_as_missing_never_as_a_lack(chapter):
    text = _rendered_text(chapter)
    lack = _LACK.findall(text)
    assert not lack, f"{chapter} renders a lack of hardware from the data file: {sorted(set(lack))}"
    for acc in hardware.all_accelerators():
        if acc.interconnect is None or acc.interconnect_bandwidth is None:
            row = next((r for r in text.split("<tr") if acc.name in r), "")
            assert hardware.MISSING in row.replace("&#x27;", "'").replace("&#39;", "'"), (
                f"{chapter}: {acc.name}'s link is not in the data file, but its row does not say so")


def test_the_lack_pattern_catches_the_old_wording():
    assert _LACK.search("cannot be split (no chip-to-chip link)")
    assert _LACK.search("no bf16")
    assert not _LACK.search("bf16 peak not in the course's data")
