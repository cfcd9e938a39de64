"""Slides cut from the built book: every chapter gets a deck with its objectives, figures and takeaways."""

import base64
import os
import re
from pathlib import Path

import pytest

from mlsys.book import slides

REPO = Path(__file__).resolve().parents[1]
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")

PAGE = """<html><body><article class="bd-article"><section id="tiling">
<h1>Tiling<a class="headerlink" href="#tiling">#</a></h1>
<div class="tip admonition"><p class="admonition-title">Learning objectives</p><p>After this chapter you can</p>
<ul class="simple"><li><p>compute the traffic of a tiled matmul</p></li><li><p>choose a tile size</p></li></ul></div>
<section id="one-tile"><h2>One tile<a class="headerlink" href="#one-tile">#</a></h2>
<figure class="align-default" id="diagram-tile"><img src="../_images/tile.png"/><figcaption><p>A tile of C.</p></figcaption></figure>
<div class="admonition"><p class="admonition-title">Takeaway</p><p>A 64 x 64 tile reads each strip once:
<span class="pasted-text">31 FLOP/byte</span>.</p></div></section>
<section id="waves"><h2>Waves<a class="headerlink" href="#waves">#</a></h2>
<div class="cell_output docutils container"><img src="../_images/waves.png"/></div>
<div class="admonition"><p class="admonition-title">Takeaway</p><p>Count tiles in waves of SMs.</p></div>
</section></section></article></body></html>"""


@pytest.fixture
def site(tmp_path):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "_images").mkdir()
    for name in ("tile.png", "waves.png"):
        (tmp_path / "_images" / name).write_bytes(PNG)
    (tmp_path / "chapters" / "09_tiling.html").write_text(PAGE)
    return tmp_path


def test_a_deck_holds_objectives_figures_and_takeaways(site):
    [d] = slides.build(site)
    assert d.title == "Tiling"
    assert [re.sub("<[^>]+>", "", o) for o in d.objectives] == ["compute the traffic of a tiled matmul",
                                                                 "choose a tile size"]
    assert d.figures == 2 and len(d.takeaways) == 2
    assert [(k, h) for k, h, _ in d.slides] == [("figure", "One tile (diagram)"), ("takeaway", "One tile"),
                                                 ("figure", "Waves"), ("takeaway", "Waves")]
    text = (site / "slides" / "09_tiling.html").read_text()
    assert text.count("31 FLOP/byte") == 2  # its slide and the closing summary: the glued number as the book shows it
    assert text.count("data:image/png;base64,") == 2 and "_images/" not in text  # self-contained
    assert "http://" not in text and "https://" not in text  # nothing fetched at view time
    assert "09_tiling.html" in (site / "slides" / "index.html").read_text()


def test_a_missing_image_or_title_is_an_error(site):
    (site / "_images" / "waves.png").unlink()
    with pytest.raises(FileNotFoundError, match="waves.png"):
        slides.build(site)
    (site / "chapters" / "09_tiling.html").write_text("<html><body><p>no title</p></body></html>")
    with pytest.raises(ValueError, match="no <h1> title"):
        slides.deck(site / "chapters" / "09_tiling.html")


def test_no_built_book_is_an_error(tmp_path):
    assert slides.main([str(tmp_path)]) == 1


def test_every_chapter_of_the_built_book_has_its_deck():
    """On the built book (CI builds it before the tests; `make book` writes the decks)."""
    site = REPO / "_build" / "html"
    if not (site / "index.html").is_file():
        if os.environ.get("CI"):
            pytest.fail("no built book in _build/html; CI runs `make book` before the tests")
        pytest.skip("no built book in _build/html: run `make book` (it builds the slides too)")
    from bs4 import BeautifulSoup

    chapters = re.findall(r"file: (chapters/\S+)", (REPO / "_toc.yml").read_text())
    assert chapters
    for ch in chapters:
        page = BeautifulSoup((site / f"{ch}.html").read_text(), "html.parser")
        deck_html = (site / "slides" / f"{Path(ch).name}.html").read_text()
        deck_text = " ".join(BeautifulSoup(deck_html, "html.parser").get_text(" ", strip=True).split())
        for box in page.find_all("div", class_="admonition"):
            title = box.find("p", class_="admonition-title")
            if title and title.get_text(strip=True).lower().startswith("takeaway"):
                words = box.get_text(" ", strip=True).split()[1:8]
                assert " ".join(words)[:30] in deck_text, ch
        assert deck_html.count("<figure") >= len(page.find_all("figure")), ch


def test_an_animation_player_is_left_out_of_the_deck():
    """A player's frame has no image source until its script runs; the deck keeps the still figure only."""
    from bs4 import BeautifulSoup

    from mlsys.book import slides

    html = ('<section><div class="animation"><img id="_anim_img1"/></div>'
            '<figure id="diagram-x"><img src="still.png"/></figure></section>')
    found = slides._figures(BeautifulSoup(html, "html.parser").section)
    assert [f.get("id") for f in found] == ["diagram-x"]
