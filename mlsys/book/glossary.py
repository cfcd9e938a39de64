"""The book's glossary, read from its page (``glossary.md`` is the one source of truth).

The page holds one MyST ``{glossary}`` directive. An entry is one or more term lines (no indent; several
lines name aliases of one entry) followed by an indented definition that ends with the chapter that
teaches the term, ``Taught in {doc}`chapters/NN_name```. Chapters link a term with ``{term}`warp```;
Sphinx matches term names case-insensitively.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "glossary.md"
_DIRECTIVE = re.compile(r"^```\{glossary\}[^\n]*\n(.*?)^```", re.S | re.M)
_TAUGHT = re.compile(r"\{doc\}`(chapters/[\w.-]+)`")


@dataclass(frozen=True)
class Entry:
    """One glossary entry: its term names (the first is the headword), definition and teaching chapter."""

    terms: tuple[str, ...]
    definition: str
    chapter: str | None  # "chapters/04_execution_model", or None when the definition names no chapter


def entries(text: str | None = None) -> list[Entry]:
    """The entries of the glossary page (or of ``text``, a page's Markdown), in page order.

    Raises ValueError when the page holds no ``{glossary}`` directive or an entry has no definition.
    """
    text = PAGE.read_text(encoding="utf-8") if text is None else text
    m = _DIRECTIVE.search(text)
    if not m:
        raise ValueError("expected a ```{glossary} directive in the glossary page; found none")
    out: list[Entry] = []
    terms: list[str] = []
    body: list[str] = []

    def close() -> None:
        if terms:
            if not body:
                raise ValueError(f"glossary term(s) {terms} have no indented definition")
            definition = " ".join(s.strip() for s in body)
            taught = _TAUGHT.search(definition)
            out.append(Entry(tuple(terms), definition, taught.group(1) if taught else None))

    for line in m.group(1).split("\n"):
        if not line.strip() or line.startswith(":"):  # blank line or a directive option (:sorted:)
            continue
        if line[0].isspace():
            body.append(line)
        else:
            if body:  # a term line after a definition starts the next entry
                close()
                terms, body = [], []
            terms.append(line.strip())
    close()
    return out


def term_names(text: str | None = None) -> set[str]:
    """Every term name of the glossary, lower-cased as Sphinx matches a ``{term}`` role."""
    return {t.lower() for e in entries(text) for t in e.terms}
