"""The book: every chapter executes on a CPU, claims fail loudly, and prose has no hand-typed figures.

`make test` alone tells a maintainer which chapter broke and why, with the traceback. When `make book`
has just executed the chapters (its execution cache is newer than every input it depends on: mlsys,
data, the build settings), a chapter whose code the cache holds is taken from there instead of being run
a second time; `MLSYS_TEST_EXECUTE=1` always executes.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
import yaml
from jupyter_client.manager import KernelManager
from myst_nb.core.read import read_myst_markdown_notebook
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("*.md"))


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections", []))

    for part in toc.get("parts", []):
        walk(part.get("chapters", []))
    return files


def execute_chapter(path: Path, timeout: int = 240) -> nbformat.NotebookNode:
    """Execute a MyST Markdown chapter with a fresh kernel in the repository root; raise on any error.

    The kernel gets the environment ``make book`` gives it: no MPLBACKEND, so figures display inline.
    """
    nb = read_myst_markdown_notebook(path.read_text())
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=env, cwd=str(path.parent))
    try:
        NotebookClient(nb, km=km, timeout=timeout, resources={"metadata": {"path": str(path.parent)}}).execute()
    finally:
        km.shutdown_kernel(now=True)
    return nb


CACHE = ROOT / "_build" / ".jupyter_cache"
_INPUTS = ("mlsys", "data", "Makefile", "_config.yml", "requirements.txt")  # what the Makefile's cache rule watches


def _cache_is_fresh() -> bool:
    stamp = CACHE / ".inputs-stamp"
    if not stamp.is_file():
        return False
    t = stamp.stat().st_mtime
    for name in _INPUTS:
        top = ROOT / name
        for f in [top] if top.is_file() else top.rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts and f.stat().st_mtime > t:
                return False
    return True


def executed_by_the_book(path: Path) -> nbformat.NotebookNode | None:
    """The chapter as ``make book`` executed it, if its execution cache is fresh and holds this code."""
    if os.environ.get("MLSYS_TEST_EXECUTE") == "1" or not _cache_is_fresh():
        return None
    from jupyter_cache import get_cache

    nb = read_myst_markdown_notebook(path.read_text())
    try:
        _, merged = get_cache(str(CACHE)).merge_match_into_notebook(nb)
    except KeyError:  # this code was never executed by the book
        return None
    return merged


def _figures(nb: nbformat.NotebookNode) -> int:
    return sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))


def test_every_toc_entry_exists():
    for entry in _toc_files():
        candidates = [ROOT / f"{entry}{ext}" for ext in (".md", ".ipynb")]
        assert any(c.exists() for c in candidates), f"_toc.yml lists {entry} but no .md or .ipynb exists"


@pytest.mark.slow
@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_executes_on_cpu_and_draws_a_figure(path):
    nb = executed_by_the_book(path) or execute_chapter(path)
    assert _figures(nb) >= 1, f"{path.name}: no figure in its outputs (each chapter draws at least one)"


@pytest.mark.slow  # executes a chapter: ~3.5 s of CPU
def test_a_changed_constant_that_breaks_a_claim_fails_the_chapter(tmp_path, monkeypatch):
    """Raise the H100's bandwidth tenfold: its ridge point falls below the A100's, and the chapter's check() fails."""
    src = (ROOT / "mlsys" / "data" / "accelerators.toml").read_text()
    needle = 'memory_bandwidth = { value = 3.35, unit = "TB/s", source = "ds" }'
    assert src.count(needle) == 1, "the H100-SXM bandwidth line this test edits has changed"
    tampered = tmp_path / "accelerators.toml"
    tampered.write_text(src.replace(needle, needle.replace("3.35", "33.5")))
    monkeypatch.setenv("MLSYS_ACCELERATORS", str(tampered))
    with pytest.raises(CellExecutionError, match="ClaimError"):
        execute_chapter(ROOT / "chapters" / "90_accelerators.md")


# A number followed by a unit in prose is a figure that should come through glue.
_UNITS = r"(?:[kMGTP]i?B(?:/s)?|[kMGTP]?FLOP/s|[TP]FLOPS|TOPS|W|ms|µs|us|ns|GHz|MHz|%|x\b|×)"
_FIGURE = re.compile(r"(?<![\w.{`$/-])\d[\d,]*(?:\.\d+)?\s?" + _UNITS)


def _prose(md: str) -> str:
    md = re.sub(r"^---\n.*?\n---\n", "", md, flags=re.S)  # front matter
    md = re.sub(r"```.*?```", "", md, flags=re.S)  # code cells and directives
    md = re.sub(r":::.*?:::", lambda m: m.group(0) if "dropdown" in m.group(0) else "", md, flags=re.S)
    md = re.sub(r"\$\$.*?\$\$|\$[^$\n]*\$", "", md, flags=re.S)  # maths
    md = re.sub(r"`[^`\n]*`", "", md)  # inline code and roles
    md = re.sub(r"\(https?://[^)]*\)", "", md)
    cut = re.search(r"^#+\s*References", md, flags=re.M)
    return md[: cut.start()] if cut else md


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_no_hand_typed_figures_in_prose(path):
    hits = _FIGURE.findall(_prose(path.read_text()))
    assert not hits, f"{path.name}: figures typed by hand in prose (use glue): {hits}"


def test_figure_lint_catches_typed_numbers():
    assert _FIGURE.findall(_prose("The H100 moves 3.35 TB/s and reaches 989 TFLOP/s, a 50% gain.")) == [
        "3.35 TB/s", "989 TFLOP/s", "50%"]
    assert not _FIGURE.findall(_prose("An H100 has {glue:text}`bw` and `x = 3 * 4 GB`; see $2mnk$ FLOP."))


def test_tooling_present():
    assert shutil.which("jupyter-book", path=str(ROOT / ".venv" / "bin")) or shutil.which("jupyter-book")


def _notebook_pages() -> list[Path]:
    return [ROOT / f"{e}.ipynb" for e in _toc_files() if (ROOT / f"{e}.ipynb").exists()]


@pytest.mark.parametrize("path", _notebook_pages(), ids=lambda p: p.stem)
def test_no_book_page_shows_a_traceback(path):
    """The book renders a lab page as stored (labs are excluded from execution): no error output may be stored."""
    nb = nbformat.read(path, as_version=4)
    bad = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            if out.get("output_type") == "error" or "Traceback (most recent call last)" in text:
                bad.append(f"cell {i}: {out.get('ename') or text[:80]}")
    assert not bad, f"{path.relative_to(ROOT)} shows errors in the book: {bad}"


def test_lab_pages_are_not_executed_by_the_book():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    from pathlib import PurePosixPath

    patterns = config["execute"]["exclude_patterns"]
    for page in _notebook_pages():  # myst-nb matches the patterns with PurePosixPath.match
        rel = PurePosixPath(page.relative_to(ROOT).as_posix())
        assert any(rel.match(p) for p in patterns), f"{rel} would be executed: a blank student lab shows tracebacks"
