"""Each chapter as a Jupyter notebook a reader can download or open in Colab.

Chapters are MyST Markdown (``chapters/*.md``), which Colab cannot open. This module converts each one
into ``notebooks/<chapter>.ipynb`` (committed, so Colab's GitHub addresses reach it), with the course's
install cell first: in Colab it pip-installs the course package from the repository, as the labs'
setup cell does (:func:`mlsys.book.site.install_block`, configured by ``_config.yml``). Outputs are
not stored; cell ids are numbered, so the same chapter always gives the same file. Jupyter does not
know MyST's roles, so the text cells get readable forms (:func:`readable`): a glued value shows its
name, a chapter reference links to the course site, a glossary term is plain text.

    python -m mlsys.book.notebooks write    # regenerate notebooks/ from chapters/
    python -m mlsys.book.notebooks check    # exit 1 and name the stale ones (tests/test_chapter_notebooks.py)
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path
from typing import Any

FOLDER = "notebooks"
#: the tag of the generated install cell
INSTALL_TAG = "colab-install"


def _root(root: Path | None) -> Path:
    from mlsys.book.site import repo_root

    return Path(root) if root is not None else repo_root()


def chapters(root: Path | None = None) -> list[Path]:
    """The chapter sources, ``chapters/*.md``, sorted."""
    return sorted((_root(root) / "chapters").glob("*.md"))


def notebook_path(chapter: Path, root: Path | None = None) -> Path:
    """Where the notebook of ``chapter`` (a ``chapters/*.md`` path) is written: ``notebooks/<stem>.ipynb``."""
    return _root(root) / FOLDER / f"{Path(chapter).stem}.ipynb"


def colab_url(stem: str, url: str, branch: str) -> str:
    """The Colab address of ``notebooks/<stem>.ipynb`` in the GitHub repository at ``url``, on ``branch``."""
    from mlsys.book.site import _GITHUB

    m = _GITHUB.match(url)
    if not m:
        raise ValueError(f"expected a repository URL https://github.com/<owner>/<repo>, got {url!r}")
    owner, name = m.groups()
    return f"https://colab.research.google.com/github/{owner}/{name}/blob/{branch}/{FOLDER}/{stem}.ipynb"


def install_source(url: str, branch: str) -> str:
    """The first cell: in Colab only, install the course package (the labs' install block)."""
    from mlsys.book.site import install_block

    return "import sys\n\n" + install_block(url, branch)


_ROLE = re.compile(r"\{(glue:text|glue|doc|term|numref|ref)\}`([^`]*)`")


def readable(md: str, site: str, here: str = "chapters") -> str:
    """``md`` (a text cell of a page in folder ``here``) with MyST roles Jupyter cannot render rewritten:
    ``{glue:text}`x``` -> ```x``` (the value's name; running the cells computes it), ``{doc}`t <p>``` ->
    a link to page ``p`` on the course ``site``, ``{term}`t <x>``` -> ``t``, ``{numref}`` -> "the figure"."""
    def one(m: re.Match) -> str:
        role, body = m.groups()
        text, target = (body.rsplit("<", 1)[0].strip(), body.rsplit("<", 1)[1].rstrip(">").strip()) \
            if body.endswith(">") and "<" in body else (body, body)
        if role in ("glue:text", "glue"):
            return f"`{body}`"
        if role == "doc":
            page = posixpath.normpath(posixpath.join(here, target))
            return f"[{text if text != target else posixpath.basename(page)}]({site}{page}.html)"
        if role == "term":
            return text
        return text.replace("%s", "").strip() if text != target else "the figure"  # numref, ref

    return _ROLE.sub(one, md)


def convert(md: str, url: str, branch: str) -> Any:
    """The notebook (an ``nbformat`` node) of one chapter's MyST Markdown ``md``: its cells, outputs
    empty, ids numbered, and the install cell first."""
    import nbformat
    from myst_nb.core.read import read_myst_markdown_notebook

    from mlsys.book.site import site_url

    nb = read_myst_markdown_notebook(md)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = readable(cell.source, site_url(url))
    install = nbformat.v4.new_code_cell(install_source(url, branch), metadata={"tags": [INSTALL_TAG]})
    nb.cells.insert(0, install)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:03d}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"},
                   "colab": {"provenance": []}}
    nb.nbformat, nb.nbformat_minor = 4, 5
    return nb


def render(chapter: Path, root: Path | None = None) -> str:
    """The text ``notebooks/<stem>.ipynb`` should hold for ``chapter``."""
    import nbformat

    from mlsys.book.site import repository

    url, branch = repository(_root(root) / "_config.yml")
    return nbformat.writes(convert(Path(chapter).read_text(encoding="utf-8"), url, branch)) + "\n"


def write(root: Path | None = None) -> list[Path]:
    """Write every chapter's notebook whose text differs; return the paths written."""
    written = []
    for ch in chapters(root):
        path, text = notebook_path(ch, root), render(ch, root)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def stale(root: Path | None = None) -> list[str]:
    """Problems: chapter notebooks missing or out of date, and notebooks of no chapter (empty when fresh)."""
    problems = []
    expected = set()
    for ch in chapters(root):
        path = notebook_path(ch, root)
        expected.add(path.name)
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.read_text(encoding="utf-8") != render(ch, root):
            problems.append(f"{path}: out of date with {ch.name}")
    folder = _root(root) / FOLDER
    problems += [f"{p}: no chapters/{p.stem}.md" for p in sorted(folder.glob("*.ipynb")) if p.name not in expected]
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["write"]:
        for p in write():
            print(f"wrote {p}")
        return 0
    if args == ["check"]:
        problems = stale()
        for p in problems:
            print(p)
        if problems:
            print("run `python -m mlsys.book.notebooks write`", file=sys.stderr)
        return 1 if problems else 0
    print("usage: python -m mlsys.book.notebooks write|check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
