"""Chapters a reader can run: notebooks/<chapter>.ipynb, generated from chapters/*.md with the course's
install cell first, kept fresh, opened by Colab from the repository, and (Part I) executing on a CPU."""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest

from mlsys.book import notebooks, site

ROOT = Path(__file__).resolve().parents[1]
PART1 = ["01_why_accelerators", "02_journey_of_a_matmul", "03_host_and_device", "04_execution_model",
         "05_memory_hierarchy"]

MD = """---
jupytext:
  text_representation:
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A chapter

Some text.

```{code-cell} ipython3
:tags: [remove-cell]
x = 1
```

More text.

```{code-cell} ipython3
print(x + 1)
```
"""


def test_a_chapter_converts_to_install_cell_then_its_own_cells():
    nb = notebooks.convert(MD, "https://github.com/someone/my-fork", "course")
    kinds = [c.cell_type for c in nb.cells]
    assert kinds == ["code", "markdown", "code", "markdown", "code"]
    assert nb.cells[0].metadata["tags"] == [notebooks.INSTALL_TAG]
    assert "git+https://github.com/someone/my-fork@course" in nb.cells[0].source
    assert nb.cells[0].source == "import sys\n\n" + site.install_block("https://github.com/someone/my-fork", "course")
    assert nb.cells[2].source == "x = 1" and nb.cells[2].metadata["tags"] == ["remove-cell"]
    assert [c["id"] for c in nb.cells] == ["cell-000", "cell-001", "cell-002", "cell-003", "cell-004"]
    assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")
    nbformat.validate(nb)


def test_colab_opens_the_committed_notebook_on_github():
    assert notebooks.colab_url("04_execution_model", "https://github.com/someone/my-fork", "course") == (
        "https://colab.research.google.com/github/someone/my-fork/blob/course/notebooks/04_execution_model.ipynb")
    with pytest.raises(ValueError, match="github.com"):
        notebooks.colab_url("04_execution_model", "https://gitlab.com/a/b", "main")


def test_every_chapter_has_a_fresh_notebook():
    problems = notebooks.stale(ROOT)
    assert not problems, "\n".join(problems) + "\nrun `python -m mlsys.book.notebooks write`"
    assert len(list((ROOT / "notebooks").glob("*.ipynb"))) == len(list((ROOT / "chapters").glob("*.md")))


def test_a_stale_notebook_is_found(tmp_path):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "_config.yml").write_text((ROOT / "_config.yml").read_text())
    (tmp_path / "chapters" / "01_a.md").write_text(MD)
    assert notebooks.stale(tmp_path) == [f"{tmp_path / 'notebooks' / '01_a.ipynb'}: missing"]
    assert [p.name for p in notebooks.write(tmp_path)] == ["01_a.ipynb"]
    assert notebooks.stale(tmp_path) == [] and notebooks.write(tmp_path) == []
    (tmp_path / "chapters" / "01_a.md").write_text(MD.replace("More text.", "Changed text."))
    assert notebooks.stale(tmp_path) == [f"{tmp_path / 'notebooks' / '01_a.ipynb'}: out of date with 01_a.md"]
    (tmp_path / "notebooks" / "99_gone.ipynb").write_text("{}")
    assert f"{tmp_path / 'notebooks' / '99_gone.ipynb'}: no chapters/99_gone.md" in notebooks.stale(tmp_path)


@pytest.mark.slow  # executes the five notebooks of Part I: about a CPU-minute or two
def test_part1_notebooks_execute_on_a_cpu(tmp_path):
    """A reader's download, run outside the checkout: the install cell does nothing off Colab, the rest runs."""
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    took = {}
    for stem in PART1:
        nb = nbformat.read(ROOT / "notebooks" / f"{stem}.ipynb", as_version=4)
        km = KernelManager(kernel_name="python3")
        km.start_kernel(env=env, cwd=str(tmp_path))
        start = time.perf_counter()
        try:
            NotebookClient(nb, km=km, timeout=240, resources={"metadata": {"path": str(tmp_path)}}).execute()
        finally:
            km.shutdown_kernel(now=True)
        took[stem] = time.perf_counter() - start
        errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{stem}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    print("seconds per notebook:", {k: round(v, 1) for k, v in took.items()})


def test_roles_become_text_jupyter_can_show():
    site_ = "https://someone.github.io/my-fork/"
    md = ("A copy runs at {glue:text}`ch3_bw`; see {doc}`04_execution_model`, {doc}`the glossary <../glossary>`, "
          "{term}`warps <warp>`, {term}`SM` and {numref}`fig-ch03-x`, or {numref}`Figure %s <fig-ch03-y>`.")
    assert notebooks.readable(md, site_) == (
        "A copy runs at `ch3_bw`; see [04_execution_model](https://someone.github.io/my-fork/chapters/"
        "04_execution_model.html), [the glossary](https://someone.github.io/my-fork/glossary.html), warps, SM and "
        "the figure, or Figure.")
