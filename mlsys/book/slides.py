"""Slides for every chapter, cut from the built book itself, so they never disagree with it.

    python -m mlsys.book.slides [_build/html]      (``make slides``; ``make book`` runs it too)

Reads each built chapter page (``<site>/chapters/*.html``) and writes one self-contained deck
``<site>/slides/<chapter>.html`` plus ``<site>/slides/index.html``. A deck holds, in the page's order:

1. a title slide with the chapter's learning objectives;
2. per section (``h2``): one slide per figure (diagrams, labelled ``diagram-*``, and every captioned figure or
   plotted output, with its caption) and one per "Takeaway" box;
3. a closing slide repeating every takeaway.

The text is the page's HTML (glued numbers included, as the book rendered them); images are inlined as
``data:`` URIs, so a deck is one file that works offline; maths is typeset by the book's own copy of
MathJax (``../_static/mathjax``), never a CDN. Arrow keys, space or a click move between slides; printing
shows every slide. A chapter page without a title is an error; a reference page with no objectives, figures or
takeaways gets a title slide that sends the reader to the page.
"""

from __future__ import annotations

import base64
import copy
import html
import mimetypes
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Deck", "deck", "render", "build", "main"]


@dataclass
class Deck:
    """One chapter's slides: ``slides`` are (kind, heading, HTML body) in page order."""
    stem: str
    title: str
    objectives: list[str] = field(default_factory=list)
    slides: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def takeaways(self) -> list[str]:
        return [body for kind, _, body in self.slides if kind == "takeaway"]

    @property
    def figures(self) -> int:
        return sum(kind == "figure" for kind, _, _ in self.slides)


def _text(tag) -> str:
    for a in tag.select("a.headerlink"):
        a.decompose()
    return tag.get_text(" ", strip=True)


def _inline_images(tag, page: Path) -> None:
    """Replace each ``img`` source by a ``data:`` URI of the file it points to (relative to ``page``); links
    that wrap an image (to the full-size file) and heading permalinks are dropped, the deck being one file."""
    if tag.name != "img":
        for a in tag.select("a.image-reference"):
            a.unwrap()
        for a in tag.select("a.headerlink"):
            a.decompose()
    for img in [tag] if tag.name == "img" else tag.find_all("img"):
        src = img.get("src", "")
        if src.startswith("data:"):
            continue
        if not src:  # an animation player's frame, filled in by its script: the deck keeps the still figure
            player = img.find_parent("div", class_="animation")
            (player or img).decompose()
            continue
        path = (page.parent / src.split("#")[0]).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"{page.name}: image {src} not found at {path}")
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        img["src"] = f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def _admonition_title(div) -> str:
    t = div.find("p", class_="admonition-title")
    return t.get_text(" ", strip=True) if t else ""


def _figures(section) -> list:
    """The section's figures in page order: ``figure`` elements, and plotted outputs (images in cell outputs)
    that are not inside one."""
    found = []
    for tag in section.find_all(["figure", "img"]):
        if tag.name == "img" and not tag.get("src") or tag.find_parent("div", class_="animation"):
            continue  # an animation player (its frame is drawn by its script): the deck keeps the still figure
        if tag.name == "figure" or (tag.find_parent("div", class_="cell_output") and tag.find_parent("figure") is None):
            found.append(tag)
    return found


def _section_slides(section, heading: str, page: Path) -> list[tuple[str, str, str]]:
    out = []
    for fig in _figures(section):
        fig = copy.copy(fig)
        _inline_images(fig, page)
        label = fig.get("id", "") or ""
        kind_note = "diagram" if label.startswith("diagram-") else "figure"
        body = str(fig) if fig.name == "figure" else f"<figure>{fig}</figure>"
        out.append(("figure", f"{heading}" + (" (diagram)" if kind_note == "diagram" else ""), body))
    for div in section.find_all("div", class_="admonition"):
        if _admonition_title(div).lower().startswith("takeaway"):
            body = copy.copy(div)
            body.find("p", class_="admonition-title").decompose()
            _inline_images(body, page)
            out.append(("takeaway", heading, body.decode_contents().strip()))
    return out


def deck(page: Path) -> Deck:
    """The deck of one built chapter page."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    article = soup.find("article") or soup.find("main") or soup
    h1 = article.find("h1")
    if h1 is None:
        raise ValueError(f"{page}: no <h1> title; expected a chapter page of the built book")
    d = Deck(page.stem, _text(copy.copy(h1)))
    for div in article.find_all("div", class_="admonition"):
        if _admonition_title(div) == "Learning objectives":
            d.objectives = [li.decode_contents().strip() for li in div.find_all("li")]
            break
    top = h1.find_parent("section") or article
    intro = copy.copy(top)
    for s in intro.find_all("section"):
        if s.find("h2", recursive=False):
            s.decompose()
    d.slides.extend(_section_slides(intro, d.title, page))
    for section in top.find_all("section"):
        h2 = section.find("h2", recursive=False)
        if h2 is not None:
            d.slides.extend(_section_slides(section, _text(copy.copy(h2)), page))
    return d


_CSS = """
body{margin:0;font-family:system-ui,sans-serif;background:#fff;color:#222}
section.slide{display:none;box-sizing:border-box;width:100vw;height:100vh;padding:4vh 6vw;overflow:auto}
section.slide.on{display:block}
section.slide h1{font-size:2.4em;margin-top:20vh}section.slide h2{font-size:1.6em;border-bottom:2px solid #0a6}
section.slide img{max-width:88vw;max-height:62vh;display:block;margin:1em auto}
section.slide figcaption{font-size:.9em;color:#444}
.takeaway{font-size:1.5em;border-left:6px solid #0a6;padding:.5em 1em;background:#f3fbf7}
footer{position:fixed;bottom:1vh;right:2vw;font-size:.8em;color:#777}
@media print{section.slide{display:block;height:auto;page-break-after:always}footer{display:none}}
"""
_JS = """
const s=[...document.querySelectorAll('section.slide')];let i=0;const f=document.getElementById('n');
function go(k){s[i].classList.remove('on');i=Math.max(0,Math.min(s.length-1,k));s[i].classList.add('on');
f.textContent=(i+1)+' / '+s.length;}
document.addEventListener('keydown',e=>{if(['ArrowRight','PageDown',' '].includes(e.key))go(i+1);
if(['ArrowLeft','PageUp'].includes(e.key))go(i-1);});document.addEventListener('click',()=>go(i+1));go(0);
"""


def render(d: Deck) -> str:
    """The deck as one HTML file (no network at view time)."""
    t = html.escape(d.title)
    parts = [f"<section class='slide'><h1>{t}</h1>"
             + (("<p>After this chapter you can</p><ul>" + "".join(f"<li>{o}</li>" for o in d.objectives) + "</ul>")
                if d.objectives else f"<p>A reference page: read it in <a href='../chapters/{d.stem}.html'>the book</a>.</p>")
             + "</section>"]
    for kind, heading, body in d.slides:
        inner = f"<div class='takeaway'>{body}</div>" if kind == "takeaway" else body
        parts.append(f"<section class='slide'><h2>{html.escape(heading)}</h2>{inner}</section>")
    if d.takeaways:
        parts.append("<section class='slide'><h2>Takeaways</h2><ul>"
                     + "".join(f"<li>{b}</li>" for b in d.takeaways) + "</ul></section>")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{t} (slides)</title>"
            f"<style>{_CSS}</style><script defer src='../_static/mathjax/tex-chtml.js'></script></head><body>"
            + "\n".join(parts)
            + f"<footer><a href='../chapters/{d.stem}.html'>{t}</a> &middot; <span id='n'></span></footer>"
            f"<script>{_JS}</script></body></html>")


def build(site: Path) -> list[Deck]:
    """Write ``<site>/slides/<chapter>.html`` for every built chapter, and an index; return the decks."""
    pages = sorted((site / "chapters").glob("*.html"))
    if not pages:
        raise FileNotFoundError(f"no chapter pages in {site / 'chapters'}: build the book first (make book)")
    out = site / "slides"
    out.mkdir(parents=True, exist_ok=True)
    decks = [deck(p) for p in pages]
    for d in decks:
        (out / f"{d.stem}.html").write_text(render(d), encoding="utf-8")
    items = "".join(f"<li><a href='{d.stem}.html'>{html.escape(d.title)}</a> ({len(d.slides) + 1} slides)</li>"
                    for d in decks)
    (out / "index.html").write_text(f"<!doctype html><meta charset='utf-8'><title>Slides</title>"
                                    f"<h1>Slides, one deck per chapter</h1><ul>{items}</ul>", encoding="utf-8")
    return decks


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    site = Path(args[0]) if args else Path("_build/html")
    try:
        decks = build(site)
    except (FileNotFoundError, ValueError) as exc:
        print(f"slides: {exc}", file=sys.stderr)
        return 1
    print(f"slides: {len(decks)} decks, {sum(len(d.slides) + 1 for d in decks)} slides in {site / 'slides'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
