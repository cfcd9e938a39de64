"""The built site as a reader meets it: Debian's Chromium, driven by Playwright, over every page.

Run with ``make site-test`` (builds the book, then this file). Under ``make test`` it skips, saying
why, when there is no built book or no Chromium. It checks, on every page of ``_build/html``:

* the page loads with no console error, no uncaught exception and no failed request;
* every internal link and anchor resolves (to a page and an ``id`` on it);
* every image loads, has alt text that is not a file name, and figures are at least 2x resolution;
* no table or code block is wider than the text column at 1280 px (nothing hidden behind a scrollbar);
* no raw MyST, ``glue`` placeholder or unrendered TeX is left in the text, and no literal ``{glue``
  anywhere on the page, code spans included (a role inside inline code is never parsed);
* the search page finds a term from a chapter; at 390 px the navigation opens;
* the book has at least two animations, and pressing Play on each changes the frame it shows.

Screenshots of two pages (desktop and phone width) go to ``_build/screenshots/``.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                             "/usr/bin/chromium") if p and Path(p).exists()), None)

pytestmark = [pytest.mark.slow, pytest.mark.site]

if CHROMIUM is None:
    pytest.skip("no Chromium installed (Debian: apt-get install chromium); the browser test needs it",
                allow_module_level=True)
if not (HTML / "index.html").is_file():
    pytest.skip("no built book in _build/html: run `make site-test`, which builds it first",
                allow_module_level=True)
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (requirements.txt)")

# Sphinx's generated pages and the sources it copies are not reader pages.
SKIP = ("_static/", "_sources/", "_images/", "genindex.html", "search.html", "_modules/")
PAGES = sorted(p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
               if not p.relative_to(HTML).as_posix().startswith(SKIP))
RAW = [re.compile(p) for p in (r"\{glue(:\w+)?\}", r"\{(doc|ref|numref|eval)\}`", r"```\{", r"^:::\{",
                               r"\\\(|\\\)|\\\[|\\\]", r"\$\$")]


class _Collector(HTMLParser):
    """Ids and hrefs of one page, read from its HTML."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if a.get("name"):
            self.ids.add(a["name"])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])


@functools.cache
def _parsed(rel: str) -> _Collector:
    c = _Collector()
    c.feed((HTML / rel).read_text(encoding="utf-8"))
    return c


@pytest.fixture(scope="module")
def server():
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def test_there_are_pages():
    assert "index.html" in PAGES and len(PAGES) >= 8, f"expected the book's pages in {HTML}, found {PAGES}"


def test_internal_links_and_anchors_resolve():
    broken = []
    for rel in PAGES:
        for href in _parsed(rel).hrefs:
            url = urljoin(f"http://site/{rel}", href)
            parts = urlparse(url)
            if parts.netloc != "site" or parts.scheme != "http":
                continue
            path, frag = urldefrag(parts.path)
            target = unquote(path.lstrip("/")) or "index.html"
            if target.endswith("/"):
                target += "index.html"
            if not (HTML / target).exists():
                broken.append(f"{rel}: {href} -> no file {target}")
            elif unquote(parts.fragment) and target.endswith(".html") and \
                    unquote(parts.fragment) not in _parsed(target).ids:
                broken.append(f"{rel}: {href} -> no #{parts.fragment} on {target}")
    assert not broken, "broken internal links:\n" + "\n".join(broken[:40])


_PAGE_JS = """() => {
  const main = document.querySelector('main#main-content') || document.querySelector('article') || document.body;
  const column = (document.querySelector('article.bd-article') || main).getBoundingClientRect();
  const wide = [];
  for (const el of main.querySelectorAll('table, div.highlight pre, div.cell_output pre, .output pre')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0) continue;
    if (el.scrollWidth > el.clientWidth + 2 || r.right > column.right + 2) {
      wide.push(`${el.tagName.toLowerCase()} ${Math.round(el.scrollWidth)}px in a ${Math.round(column.width)}px column: `
                + (el.innerText || '').slice(0, 60).replace(/\\s+/g, ' '));
    }
  }
  const images = [];
  for (const img of main.querySelectorAll('img')) {
    const alt = (img.getAttribute('alt') || '').trim();
    const src = img.getAttribute('src');
    if (!img.complete || img.naturalWidth === 0) images.push(`${src}: did not load`);
    else if (!alt || /\\.(png|svg|jpe?g)$|_images\\/|^\\S*\\/\\S*$/.test(alt)) images.push(`${src}: alt text ${JSON.stringify(alt)}`);
    else if (src.includes('_images/') && img.naturalWidth < 1.9 * img.getBoundingClientRect().width)
      images.push(`${src}: ${img.naturalWidth}px shown at ${Math.round(img.getBoundingClientRect().width)}px (blurry on sharp screens)`);
  }
  const clone = main.cloneNode(true);
  for (const el of clone.querySelectorAll('pre, code, script, style, mjx-container, .MathJax')) el.remove();
  return {wide, images, text: clone.innerText, all_text: main.innerText};
}"""


@pytest.mark.parametrize("rel", PAGES)
def test_page_as_a_reader_sees_it(browser, server, rel):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    # Chromium sometimes probes the origin's /favicon.ico on its own (the book declares its icon with <link
    # rel="icon">): that 404 is outside the book, whose real host serves it under /gpus-for-ml/, not at the root
    probe = server + "favicon.ico"
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text} ({m.location.get('url', '')})")
            if m.type == "error" and m.location.get("url") != probe else None)
    page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.goto(server + rel, wait_until="networkidle")
    page.wait_for_function("() => !window.MathJax || !MathJax.startup || MathJax.startup.promise", timeout=15000)
    page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
    found = page.evaluate(_PAGE_JS)
    page.close()
    problems += [f"too wide: {w}" for w in found["wide"]]
    problems += [f"image: {i}" for i in found["images"]]
    # a role inside inline code is never parsed: `{glue:text}`x`` shows "{glue:text}" in a code span,
    # which the check below (text without code) cannot see; no page teaches glue, so any is a defect
    problems += [f"literal glue role left on the page: {line.strip()[:100]!r}"
                 for line in found["all_text"].splitlines() if "{glue" in line][:5]
    for pattern in RAW:
        for line in found["text"].splitlines():
            if pattern.search(line):
                problems.append(f"raw markup or TeX left in the text: {line.strip()[:100]!r}")
                break
    assert not problems, f"{rel}:\n" + "\n".join(problems[:30])


FIGURE_PAGES = [rel for rel in PAGES if "_images/" in (HTML / rel).read_text(encoding="utf-8")]


@pytest.mark.parametrize("rel", FIGURE_PAGES)
def test_every_figure_has_a_caption_a_number_and_real_alt_text(rel):
    """Each generated image sits in a <figure> with a numbered caption, and its alt text is a sentence."""
    html = (HTML / rel).read_text(encoding="utf-8")
    tags = [tag for tag in re.findall(r"<img[^>]*>", html) if "_images/" in tag]
    alts = [(re.search(r'alt="([^"]*)"', tag) or re.search("()", "")).group(1) for tag in tags]
    bad = [a for a in alts if len(a.split()) < 5 or "_images/" in a or a.endswith((".png", ".svg"))]
    assert not bad, f"{rel}: {len(bad)} figure(s) whose alt text is no description: {bad[:3]}"
    figures = re.findall(r"<figure\b.*?</figure>", html, flags=re.S)
    captioned = [f for f in figures if "_images/" in f and re.search(r'<figcaption>.*class="caption-number"', f, re.S)]
    assert len(captioned) == len(tags), (f"{rel}: {len(tags)} figure image(s), {len(captioned)} inside a <figure> "
                                         "with a numbered caption (give the cell mystnb figure metadata)")
    chapter = re.search(r'<h1>\s*<span class="section-number">(\d+)\.', html)
    if chapter and rel.startswith("chapters/"):  # a chapter's figures are numbered within it: Fig. 6.1, 6.2, ...
        numbers = re.findall(r'class="caption-number">Fig\. ([\d.]+)', html)
        want = [f"{chapter.group(1)}.{i}" for i in range(1, len(numbers) + 1)]
        assert [n.rstrip(".") for n in numbers] == want, f"{rel}: figure numbers {numbers}, expected {want}"


def test_headings_are_numbered_once():
    """The book numbers headings (6.2); a heading that types its own number reads "2.3. 4. ..."."""
    twice = [f"{rel}: {m.group(0)}" for rel in PAGES for m in re.finditer(
        r'section-number">[\d.]+\s*</span>\s*\d+(?:-\d+)?\.\s', (HTML / rel).read_text(encoding="utf-8"))]
    assert not twice, "headings numbered twice:\n" + "\n".join(twice[:10])


def test_chapters_offer_their_runnable_notebook():
    """A chapter is MyST Markdown, which Colab and Binder cannot run: its page offers, instead, the notebook
    generated from it (notebooks/<chapter>.ipynb, the labs' install cell first) as a download and in Colab,
    and nothing else (no Binder, no other .ipynb). Labs carry their own Colab link (issue 42)."""
    import json

    from mlsys.book import site
    from mlsys.book.notebooks import INSTALL_TAG, colab_url

    url, branch = site.repository(ROOT / "_config.yml")
    for rel in PAGES:
        if not rel.startswith("chapters/"):
            continue
        stem = rel.removeprefix("chapters/").removesuffix(".html")
        hrefs = _parsed(rel).hrefs
        launch = [h for h in hrefs if "mybinder.org" in h or "colab.research.google.com" in h or h.endswith(".ipynb")]
        assert sorted(launch) == sorted([colab_url(stem, url, branch), f"../notebooks/{stem}.ipynb"]), \
            f"{rel}: offers {launch}"
        nb = json.loads((HTML / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))
        assert nb["cells"][0]["metadata"]["tags"] == [INSTALL_TAG], f"{stem}.ipynb: no install cell first"
        assert site.BEGIN in "".join(nb["cells"][0]["source"]), f"{stem}.ipynb: its first cell is not the install"


def test_search_finds_a_chapter_term(browser, server):
    page = browser.new_page()
    page.goto(server + "search.html?q=roofline", wait_until="networkidle")
    page.wait_for_selector("#search-results ul.search li", timeout=20000)
    hits = page.locator("#search-results ul.search li").count()
    page.close()
    assert hits > 0, "the search page found nothing for 'roofline'"


def test_navigation_opens_on_a_phone_and_screenshots(browser, server):
    SHOTS.mkdir(parents=True, exist_ok=True)
    chapter = next(p for p in PAGES if p.startswith("chapters/"))
    desktop = browser.new_page(viewport={"width": 1280, "height": 900})
    desktop.goto(server + "index.html", wait_until="networkidle")
    desktop.screenshot(path=str(SHOTS / "index-1280.png"), full_page=False)
    desktop.close()
    phone = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2)
    phone.goto(server + chapter, wait_until="networkidle")
    sidebar = phone.locator("#pst-primary-sidebar, .bd-sidebar-primary").first
    assert not sidebar.is_visible() or sidebar.bounding_box()["x"] < 0, "at 390 px the chapter list should start hidden"
    phone.locator("button.primary-toggle, label.primary-toggle, .sidebar-toggle.primary-toggle").first.click()
    phone.wait_for_timeout(600)
    box = sidebar.bounding_box()
    visible = sidebar.is_visible()
    phone.screenshot(path=str(SHOTS / f"{Path(chapter).stem}-390-menu-open.png"))
    phone.close()
    assert visible and box is not None and box["x"] >= -1 and box["width"] > 100, \
        "at 390 px the navigation button did not open the chapter list"


def test_the_book_has_drawn_diagrams():
    """At least 14 figures labelled diagram-... (drawn by mlsys.diagrams), each a captioned figure whose image
    has alt text of a sentence or more."""
    found = []
    for rel in PAGES:
        html = (HTML / rel).read_text(encoding="utf-8")
        for m in re.finditer(r'<figure\b[^>]*id="(diagram-[a-z0-9-]+)".*?</figure>', html, flags=re.S):
            alt = re.search(r'<img[^>]*alt="([^"]*)"', m.group(0))
            assert alt and len(alt.group(1).split()) >= 12, f"{rel}: {m.group(1)} has no alt text describing it"
            assert "<figcaption>" in m.group(0), f"{rel}: {m.group(1)} has no caption"
            found.append(m.group(1))
    assert len(set(found)) >= 14, f"expected at least 14 diagram- figures, found {len(set(found))}: {sorted(found)}"


ANIMATION_PAGES = [rel for rel in PAGES if '<div class="animation">' in (HTML / rel).read_text(encoding="utf-8")]


def test_the_book_has_animations():
    """At least two animated diagrams (matplotlib's JS players, mlsys.diagrams.Player) are in the book."""
    count = sum((HTML / rel).read_text(encoding="utf-8").count('<div class="animation">') for rel in PAGES)
    assert count >= 2, f"expected at least two animations in the book, found {count} (on {ANIMATION_PAGES})"


@pytest.mark.parametrize("rel", ANIMATION_PAGES)
def test_animations_play(browser, server, rel):
    """Each animation on the page has alt text, and pressing its Play button changes the frame shown."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.goto(server + rel, wait_until="networkidle")
    players = page.locator("div.animation")
    assert players.count() >= 1
    for i in range(players.count()):
        player = players.nth(i)
        img = player.locator("img").first
        alt = img.get_attribute("alt") or ""
        assert len(alt.split()) >= 5, f"{rel}: animation {i + 1} has no alt text sentence: {alt!r}"
        player.scroll_into_view_if_needed()
        before = img.get_attribute("src")
        player.locator('button[title="Play"]').click()
        page.wait_for_timeout(2500)  # the players step every 0.7-0.9 s
        after = img.get_attribute("src")
        assert before and after and before != after, f"{rel}: animation {i + 1} did not change frame after Play"
    page.close()
    assert not errors, f"{rel}: " + "; ".join(errors)


def test_going_further_notebooks_follow_the_configured_install_block(tmp_path):
    """The optional notebooks carry the labs' install block, so a release bump reaches them too: check() names a
    stale one and sync() rewrites it."""
    import shutil

    from mlsys.book import site

    root = tmp_path / "repo"
    (root / "labs" / "going_further").mkdir(parents=True)
    shutil.copy2(ROOT / "_config.yml", root / "_config.yml")
    shutil.copy2(ROOT / "_toc.yml", root / "_toc.yml")
    shutil.copytree(ROOT / "chapters", root / "chapters")  # the labs' chapter lines are read from them
    nb = ROOT / "labs" / "going_further" / "lab2_going_further.ipynb"
    ref = site.install_ref(ROOT / "_config.yml")
    stale = nb.read_text(encoding="utf-8").replace(f"@{ref}", "@v2025.01")
    assert stale != nb.read_text(encoding="utf-8")
    (root / "labs" / "going_further" / nb.name).write_text(stale, encoding="utf-8")
    assert any("lab2_going_further" in p and "install block" in p for p in site.check(root))
    assert site.sync(root) == [root / "labs" / "going_further" / nb.name]
    assert f"@{ref}" in (root / "labs" / "going_further" / nb.name).read_text(encoding="utf-8")
    assert site.check(root) == []
