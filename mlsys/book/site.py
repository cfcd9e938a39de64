"""The course's repository URL, set once in ``_config.yml``, and what the labs generate from it.

``_config.yml``'s ``repository.url`` (and ``repository.branch``) is the one place a fork changes.
From it this module generates, in every lab notebook:

* the **Open in Colab** badge in the first markdown cell, pointing at the lab's *release* notebook
  (``https://colab.research.google.com/github/<owner>/<repo>/blob/<branch>/labs/release/<lab>/<lab>.ipynb``);
* the **chapter line** under the badge, linking the lab to the chapter that teaches it (``mlsys.plan``'s
  ``LABS``, numbered as ``_toc.yml`` numbers it): a relative link that the book resolves, and the
  same page on the published site (``https://<owner>.github.io/<repo>/``) for Colab and Jupyter;
* the **install block** of the setup cell (the first code cell), between the lines
  :data:`BEGIN` and :data:`END`: in Colab it runs
  ``pip install "gpus-for-ml-mlsys @ git+<url>@<release>"`` (``repository.release``, the course release's
  tag; the branch where none is set), which brings the course package and the
  runtime needs Colab lacks (pint and its small dependencies; numpy, matplotlib, torch and triton are
  already there and are left alone, since pip keeps a dependency that is already satisfied).

``python -m mlsys.book.site sync`` rewrites the instructor notebooks (``labs/source``) and the
releases in place; ``python -m mlsys.book.site check`` exits 1 when any copy differs from what the
configuration generates (a test runs it). ``mlsys.grader.teach release`` calls :func:`apply` on each
release notebook, so a release always carries the configured URL.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from mlsys.runtime.notebook import cell_source
from mlsys.runtime.paths import checkout

__all__ = [
    "BEGIN",
    "END",
    "PACKAGE",
    "repo_root",
    "repository",
    "colab_url",
    "colab_badge",
    "site_url",
    "lab_chapters",
    "chapter_line",
    "install_block",
    "install_ref",
    "apply",
    "notebooks",
    "sync",
    "check",
    "main",
]

BEGIN = "# -- course install (generated from _config.yml by mlsys.book.site: do not edit) --"
END = "# -- end of course install --"
PACKAGE = "gpus-for-ml-mlsys"  # the distribution name in pyproject.toml

# The badge is a plain link: an image from colab.research.google.com would make every lab page of the
# published book depend on a third-party host (the browser test loads pages with no network).
_BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)|\[\*\*Open in Colab\*\*\]\([^)]*\)")
_CHAPTER = re.compile(r"^\*\*Taught in\*\*: .*$", re.M)
_GITHUB = re.compile(r"^https://github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$")


def repo_root() -> Path:
    """The repository checkout this package lives in (the folder holding ``_config.yml``)."""
    return checkout()


def repository(config: Path | None = None) -> tuple[str, str]:
    """``(url, branch)`` from ``_config.yml``'s ``repository`` section.

    Raises ``ValueError`` when the file has no ``repository.url`` or the URL is not of the form
    ``https://github.com/<owner>/<repo>`` (Colab opens notebooks from GitHub only).
    """
    import yaml

    path = config or repo_root() / "_config.yml"
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    repo = data.get("repository") or {}
    url = str(repo.get("url", "")).strip()
    if not _GITHUB.match(url):
        raise ValueError(f"{path}: expected repository.url of the form https://github.com/<owner>/<repo>, got {url!r}")
    branch = str(repo.get("branch") or "main").strip()
    return url.rstrip("/").removesuffix(".git"), branch


def install_ref(config: Path | None = None) -> str:
    """What the labs' install cells pip-install: ``repository.release`` (the course release, a tag) if set, else
    the branch. A tag keeps a notebook saved to Drive installing the package it was written for."""
    import yaml

    path = config or repo_root() / "_config.yml"
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    release = str((data.get("repository") or {}).get("release") or "").strip()
    return release or repository(path)[1]


def colab_url(lab: str, url: str, branch: str) -> str:
    """The Colab address of ``labs/release/<lab>/<lab>.ipynb`` in the repository at ``url``."""
    owner, name = _GITHUB.match(url).groups()
    return f"https://colab.research.google.com/github/{owner}/{name}/blob/{branch}/labs/release/{lab}/{lab}.ipynb"


def colab_badge(lab: str, url: str, branch: str) -> str:
    """The Markdown link that opens the lab's release in Colab (text, not a third-party image)."""
    return f"[**Open in Colab**]({colab_url(lab, url, branch)})"


def site_url(url: str) -> str:
    """Where the deploy workflow publishes the book: the repository's GitHub Pages address."""
    owner, name = _GITHUB.match(url).groups()
    return f"https://{owner.lower()}.github.io/{name}/"


def lab_chapters(root: Path | None = None) -> dict[str, tuple[int, str, str]]:
    """``lab -> (chapter number, chapter title, chapter path)``: the chapter that teaches each lab
    (:data:`mlsys.plan.LABS`), numbered as the book numbers it (``_toc.yml``'s numbered parts)."""
    from mlsys import plan

    root = root or repo_root()
    numbers = plan.chapter_numbers(root)
    out: dict[str, tuple[int, str, str]] = {}
    for lab in plan.LABS:
        path = lab.chapter
        src = next((root / f"{path}{ext}" for ext in (".md", ".ipynb") if (root / f"{path}{ext}").is_file()), None)
        if src is None or path not in numbers:
            raise ValueError(f"{lab.folder} is taught in {path}, which is no .md or .ipynb file in a numbered "
                             "part of _toc.yml")
        title = next((line[2:].strip() for line in src.read_text(encoding="utf-8").splitlines()
                      if line.startswith("# ")), path)
        out[lab.folder] = (numbers[path], title, path)
    return out


def chapter_line(lab: str, url: str, chapters: dict[str, tuple[int, str, str]]) -> str:
    """The lab's link back to its chapter: relative (the book and a checkout) and on the published site."""
    if lab not in chapters:
        raise ValueError(f"{lab}: no chapter teaches it (add it to mlsys.plan.LABS)")
    number, title, path = chapters[lab]
    return (f"**Taught in**: chapter {number}, [{title}](../../../{path}.md) "
            f"([on the course site]({site_url(url)}{path}.html)).")


def install_block(url: str, ref: str) -> str:
    """The setup cell's install lines: in Colab only, pip-install the course package from the repository at
    ``ref`` (the course release), with the supported versions of what Colab brings stated (setup() checks them)."""
    from mlsys.labkit.versions import supported_line

    return "\n".join([
        BEGIN,
        'if "google.colab" in sys.modules:  # Colab has torch, triton, numpy and matplotlib; this adds the rest',
        f"    # the course release {ref}; {supported_line()} (setup() below checks them)",
        "    import subprocess",
        "",
        '    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",',
        f'                    "{PACKAGE} @ git+{url}@{ref}"], check=True)',
        END,
    ])


_src = cell_source


def apply(nb: dict[str, Any], lab: str, url: str | None = None, branch: str | None = None,
          chapters: dict[str, tuple[int, str, str]] | None = None, ref: str | None = None) -> dict[str, Any]:
    """Write the configured badge, chapter line and install block into notebook ``nb`` (in place); return it.

    Raises ``ValueError`` if the first markdown cell has no Colab badge or the first code cell has
    no install block between :data:`BEGIN` and :data:`END` (a lab must have both).
    """
    if url is None or branch is None:
        url, branch = repository()
        ref = ref or install_ref()
    ref = ref or branch  # what the install cell pins (the badge opens the branch)
    cells = nb.get("cells", [])
    md = next((c for c in cells if c.get("cell_type") == "markdown"), None)
    code = next((c for c in cells if c.get("cell_type") == "code"), None)
    if md is None or not _BADGE.search(_src(md)):
        raise ValueError(f"{lab}: expected an 'Open In Colab' badge in the first markdown cell")
    if code is None or BEGIN not in _src(code) or END not in _src(code):
        raise ValueError(f"{lab}: expected the first code cell to hold the install block ({BEGIN!r} ... {END!r})")
    text = _BADGE.sub(lambda _m: colab_badge(lab, url, branch), _src(md), count=1)
    line = chapter_line(lab, url, lab_chapters() if chapters is None else chapters)
    if _CHAPTER.search(text):
        text = _CHAPTER.sub(lambda _m: line, text, count=1)
    else:
        badge = _BADGE.search(text)
        text = text[:badge.end()] + "\n\n" + line + text[badge.end():]
    _set(md, text)
    src = _src(code)
    start, stop = src.index(BEGIN), src.index(END) + len(END)
    _set(code, src[:start] + install_block(url, ref) + src[stop:])
    return nb


def _set(cell: dict[str, Any], text: str) -> None:
    """Set a cell's source, keeping its form (one string, or a list of lines as nbgrader writes it)."""
    cell["source"] = text.splitlines(keepends=True) if isinstance(cell["source"], list) else text


def notebooks(root: Path | None = None, kinds: tuple[str, ...] = ("source", "release")) -> list[tuple[str, Path]]:
    """``(lab, path)`` of every instructor (``source``) and student (``release``) notebook under ``labs/``."""
    labs = (root or repo_root()) / "labs"
    out = []
    for kind in kinds:
        for path in sorted((labs / kind).glob("*/*.ipynb")):
            if path.stem == path.parent.name:
                out.append((path.stem, path))
    return out


def going_further(root: Path | None = None) -> list[Path]:
    """The optional notebooks under ``labs/going_further/``: no badge or chapter line of a lab, only its install
    block, which must follow the configuration as the labs' does."""
    return sorted(((root or repo_root()) / "labs" / "going_further").glob("*.ipynb"))


def apply_install(nb: dict[str, Any], name: str, url: str, ref: str) -> dict[str, Any]:
    """Write the configured install block into the first code cell of ``nb`` (in place); return it. Raises
    ``ValueError`` if that cell has no block between :data:`BEGIN` and :data:`END`."""
    code = next((c for c in nb.get("cells", []) if c.get("cell_type") == "code"), None)
    if code is None or BEGIN not in _src(code) or END not in _src(code):
        raise ValueError(f"{name}: expected the first code cell to hold the install block ({BEGIN!r} ... {END!r})")
    src = _src(code)
    start, stop = src.index(BEGIN), src.index(END) + len(END)
    _set(code, src[:start] + install_block(url, ref) + src[stop:])
    return nb


def _dump(nb: dict[str, Any]) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def sync(root: Path | None = None, kinds: tuple[str, ...] = ("source", "release")) -> list[Path]:
    """Rewrite every lab notebook whose badge or install block differs from the configuration.

    Releases are regenerated from the sources by ``mlsys.grader.teach release``, which applies the
    same substitution; syncing them here keeps a committed release in step without nbgrader.
    """
    url, branch = repository((root or repo_root()) / "_config.yml")
    ref = install_ref((root or repo_root()) / "_config.yml")
    chapters = lab_chapters(root)
    changed = []
    for lab, path in notebooks(root, kinds):
        text = path.read_text(encoding="utf-8")
        new = _dump(apply(json.loads(text), lab, url, branch, chapters, ref))
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    for path in going_further(root):
        text = path.read_text(encoding="utf-8")
        new = _dump(apply_install(json.loads(text), path.stem, url, ref or branch))
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


def check(root: Path | None = None) -> list[str]:
    """Problems: notebooks whose badge or install block differ from ``_config.yml`` (empty when in sync)."""
    url, branch = repository((root or repo_root()) / "_config.yml")
    ref = install_ref((root or repo_root()) / "_config.yml")
    chapters = lab_chapters(root)
    problems = []
    for lab, path in notebooks(root):
        nb = json.loads(path.read_text(encoding="utf-8"))
        before = json.dumps(nb, sort_keys=True)
        try:
            after = json.dumps(apply(nb, lab, url, branch, chapters, ref), sort_keys=True)
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
            continue
        if before != after:
            problems.append(f"{path}: its Colab badge, chapter line or install block differs from _config.yml and "
                            "_toc.yml "
                            "(run `python -m mlsys.book.site sync`)")
    for path in going_further(root):
        nb = json.loads(path.read_text(encoding="utf-8"))
        before = json.dumps(nb, sort_keys=True)
        try:
            after = json.dumps(apply_install(nb, path.stem, url, ref or branch), sort_keys=True)
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
            continue
        if before != after:
            problems.append(f"{path}: its install block differs from _config.yml (run `python -m mlsys.book.site sync`)")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mlsys.book.site", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["sync", "check", "url"])
    args = parser.parse_args(argv)
    if args.command == "url":
        print(*repository())
        return 0
    if args.command == "sync":
        for path in sync(kinds=("source",)) + sync(kinds=("release",)):
            print(f"updated {path}")
        return 0
    problems = check()
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
