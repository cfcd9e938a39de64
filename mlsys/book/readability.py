"""How readable the built book's teaching text is: sentence length, bold glued figures, reading time.

Reads the HTML that ``make book`` writes (``_build/html/chapters/*.html``) and measures, per chapter,
only the *teaching text*: the paragraphs of the article (list items are paragraphs in Sphinx's HTML).
Left out, because a learner does not read them as running prose:

* code cells, their inputs and outputs (``div.cell``), literal blocks and tables;
* collapsed boxes (``:class: dropdown`` admonitions and ``details``): the measurement notes;
* figure captions, the ``References`` section, navigation and the page's table of contents.

Kept: open admonitions (a "Takeaway" box is teaching text), learning objectives, exercises and
their solutions. Inline maths counts as one word; an inline code span as one word. A bold lead-in
that opens a paragraph ("**Exercise 1.** Compute ...") is a label: it joins the sentence it opens.

Measures (see :class:`Stats`):

* words: whitespace-separated tokens with at least one letter or digit;
* sentences: split at ``.``, ``!`` or ``?`` followed by a space and a capital, a digit, a quote, a
  bracket or an inline code span, and at the end of every paragraph; not after a known abbreviation ("e.g.", "i.e.",
  "Fig.", "vs.", "cf.", ...) or a capital initial ("M. Milakov"); "3.5" has no space, so never splits; units
  are no abbreviations ("took 1.5 ms. Then" ends a sentence), nor is "etc." (it mostly ends one);
* bold glued figures: ``span.pasted-text`` (what ``{glue:text}`` renders) that shows in bold, i.e. inside
  ``<strong>``/``<b>``, or every one when the site's CSS leaves MyST-NB's default bold in place
  (``span.pasted-text {font-weight: bold}``); per 100 words;
* SASS mentions: the word "SASS" anywhere the page shows it but code (prose, tables, captions, output);
* reading minutes, as the review of 2026-12-01 estimated them: every word the page shows (teaching text,
  tables, captions, printed output; not code inputs, collapsed boxes or references) at 120 words a
  minute (a careful first read of technical text), plus 1.5 minutes per figure and 6 s per visible line
  of code; and the teaching text's part on its own ("minutes (words)").

Run ``python -m mlsys.book.readability _build/html`` for a table per chapter and for the whole book.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

#: words a minute for a careful first read of technical prose (the review's rate)
WORDS_PER_MINUTE = 120
#: minutes a learner spends on one figure, and per visible line of code (the review's rates)
MINUTES_PER_FIGURE = 1.5
MINUTES_PER_CODE_LINE = 0.1
#: a sentence longer than this many words is "long"
LONG_SENTENCE = 40

#: abbreviations whose final period never ends a sentence (compared lower-case, without the period)
ABBREVIATIONS = {"e.g", "i.e", "fig", "figs", "eq", "eqs", "vs", "cf", "ch", "sec", "approx", "al", "ref", "refs",
                 "vol", "resp", "prof", "dr", "mr"}
#: marks the start of an inline code span in a paragraph's text: a sentence may begin with one ("`fp32` is ...")
CODE = "\u2060"
_END = re.compile(r"[.!?][\"')\]]*\s+(?=[A-Z0-9\"'(\[`$\u2060])")
_WORD = re.compile(r"\S*[A-Za-z0-9]\S*")
_SASS = re.compile(r"\bSASS\b")

#: ancestors whose text is not teaching text (tag, class or id tests)
_SKIP_TAGS = {"pre", "table", "figcaption", "nav", "details", "script", "style"}
_SKIP_CLASSES = {"cell", "cell_output", "cell_input", "caption", "dropdown", "toctree-wrapper", "footnote",
                 "citation", "highlight", "math-wrapper", "admonition-title"}


@dataclass
class Stats:
    """The measures of one page (or, summed, of several); means are derived, so sums stay exact."""

    words: int = 0
    sentences: list[int] = field(default_factory=list)  # words per sentence, in page order
    bold_glued: int = 0
    glued: int = 0
    sass: int = 0
    figures: int = 0
    code_lines: int = 0
    shown_words: int = 0  # every word a reader meets: prose, tables, captions, printed output (not code, notes)

    def __add__(self, other: Stats) -> Stats:
        return Stats(self.words + other.words, self.sentences + other.sentences, self.bold_glued + other.bold_glued,
                     self.glued + other.glued, self.sass + other.sass, self.figures + other.figures,
                     self.code_lines + other.code_lines, self.shown_words + other.shown_words)

    @property
    def mean_sentence(self) -> float:
        """Mean words per sentence (0 for a page without sentences)."""
        return sum(self.sentences) / len(self.sentences) if self.sentences else 0.0

    @property
    def long_sentences(self) -> int:
        """Sentences over :data:`LONG_SENTENCE` words."""
        return sum(n > LONG_SENTENCE for n in self.sentences)

    @property
    def bold_glued_per_100(self) -> float:
        """Glued figures shown in bold per 100 words of teaching text."""
        return 100 * self.bold_glued / self.words if self.words else 0.0

    @property
    def words_minutes(self) -> float:
        """Minutes to read the teaching text alone, at :data:`WORDS_PER_MINUTE`."""
        return self.words / WORDS_PER_MINUTE

    @property
    def reading_minutes(self) -> float:
        """Everything shown: shown words / 120 + 1.5 min per figure + 6 s per visible code line."""
        return (self.shown_words / WORDS_PER_MINUTE + MINUTES_PER_FIGURE * self.figures
                + MINUTES_PER_CODE_LINE * self.code_lines)


def split_sentences(text: str) -> list[str]:
    """The sentences of one paragraph's text (see the module's docstring for the rule)."""
    text = " ".join(text.split())
    out, start = [], 0
    for m in _END.finditer(text):
        before = text[start:m.start() + 1].split()
        last = before[-1].rstrip(".!?\"')]") if before else ""
        if text[m.start()] == "." and (last.lower() in ABBREVIATIONS or re.fullmatch(r"[A-Z]", last)):
            continue  # "e.g. The", "Fig. 6", "M. Milakov": an abbreviation or an initial, not an end
        out.append(text[start:m.end()].strip())
        start = m.end()
    if text[start:].strip():
        out.append(text[start:].strip())
    return out


def count_words(text: str) -> int:
    """Whitespace-separated tokens holding at least one letter or digit."""
    return len(_WORD.findall(text))


def _skipped(tag) -> bool:
    """Whether ``tag`` or an ancestor holds text that is not teaching text."""
    for t in [tag, *tag.parents]:
        if t.name in _SKIP_TAGS:
            return True
        classes = set(t.get("class") or [])
        if classes & _SKIP_CLASSES or t.get("id") == "references" or t.name == "section" and \
                (t.get("id") or "").startswith("references"):
            return True
    return False


def _paragraph_text(p) -> str:
    """A paragraph's text with each inline maths span and code span counted as one word."""
    from copy import copy

    p = copy(p)
    first = next((c for c in p.contents if not (isinstance(c, str) and not c.strip())), None)
    if getattr(first, "name", None) in ("strong", "b"):  # "**Exercise 1.** Compute ...": a label, not a sentence
        first.replace_with(first.get_text().rstrip().rstrip(".:") + " ")
    for m in p.select("span.math, code"):
        m.replace_with(" X " if m.name == "span" else " " + CODE + "".join(m.get_text().split()) + " ")
    return p.get_text()


def css_makes_glue_bold(site: Path) -> bool:
    """Whether a glued value shows in bold by default on the built ``site``.

    MyST-NB's stylesheet sets ``span.pasted-text`` in bold; the book's ``_static/book.css`` may set it back
    to normal weight (the convention: bold only where the prose writes ``**{glue:text}`x`**``).
    """
    override = site / "_static" / "book.css"
    if override.is_file():
        css = re.sub(r"\s+", "", override.read_text(encoding="utf-8"))
        if re.search(r"\.pasted-text\{[^}]*font-weight:(normal|400)", css):
            return False
    return True


def page_stats(html: str, glue_bold_by_default: bool = True) -> Stats:
    """The measures of one built page's article (its ``<article>``, or the whole body if it has none)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    article = soup.find("article") or soup.body or soup
    s = Stats()
    for p in article.find_all("p"):
        if _skipped(p):
            continue
        text = _paragraph_text(p)
        s.words += count_words(text)
        s.sentences += [count_words(x) for x in split_sentences(text) if count_words(x)]
        for g in p.select("span.pasted-text"):
            s.glued += 1
            s.bold_glued += glue_bold_by_default or g.find_parent(["strong", "b"]) is not None
    s.figures = sum(not _in_dropdown(img) for img in article.find_all("img"))
    shown = _shown_text(article)
    s.shown_words, s.sass = count_words(shown), len(_SASS.findall(shown))
    for cell in article.select("div.cell_input"):
        if "tag_hide-input" not in " ".join(cell.find_parent("div", class_="cell").get("class") or []):
            s.code_lines += len(cell.get_text().strip().splitlines())
    return s


def _shown_text(article) -> str:
    """The text of everything the page shows a reader, less code-cell inputs (counted as lines), collapsed
    boxes, the References section and navigation."""
    from copy import copy

    a = copy(article)
    for t in a.select("div.cell_input, details, .dropdown, nav, script, style, .toctree-wrapper, a.headerlink, "
                      "section#references, .admonition-title"):
        t.decompose()
    for m in a.select("span.math"):
        m.replace_with(" X ")
    return a.get_text(" ")


def _in_dropdown(tag) -> bool:
    return any(t.name == "details" or "dropdown" in (t.get("class") or []) for t in tag.parents)


def chapter_stats(site: Path) -> dict[str, Stats]:
    """Measures of every chapter page of a built book (``site`` is ``_build/html``), by file stem.

    Raises FileNotFoundError when ``site/chapters`` holds no HTML page (the book is not built).
    """
    pages = sorted((Path(site) / "chapters").glob("*.html"))
    if not pages:
        raise FileNotFoundError(f"no chapter pages under {Path(site) / 'chapters'}; build the book (make book) first")
    bold = css_makes_glue_bold(Path(site))
    return {p.stem: page_stats(p.read_text(encoding="utf-8"), bold) for p in pages}


def report(stats: dict[str, Stats]) -> str:
    """A Markdown table: one row per chapter, then the whole book."""
    head = ("| page | words | sentences | mean words | > 40 words | bold glued /100 w | SASS | minutes (words) "
            "| minutes (all) |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    total = sum(stats.values(), Stats())
    rows = [head] + [_row(name, s) for name, s in stats.items()] + [_row("**book**", total)]
    return "\n".join(rows)


def _row(name: str, s: Stats) -> str:
    return (f"| {name} | {s.words} | {len(s.sentences)} | {s.mean_sentence:.1f} | {s.long_sentences} "
            f"| {s.bold_glued_per_100:.2f} | {s.sass} | {s.words_minutes:.0f} | {s.reading_minutes:.0f} |")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mlsys.book.readability", description=__doc__.split("\n")[0])
    parser.add_argument("site", nargs="?", default="_build/html", help="the built book (default _build/html)")
    args = parser.parse_args(argv)
    print(report(chapter_stats(Path(args.site))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
