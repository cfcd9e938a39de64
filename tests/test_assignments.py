"""A grading run's generated assignments kept by the digest of what makes them (mlsys.grader.assignments): the same
labs, sources, configuration and package are generated once; any changed byte generates again; a failed generation
keeps nothing; the store stays bounded and the sandbox site's cache beside it leaves it alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlsys.grader import assignments, siteinstall


def _course(where: Path, text: str = "cell 1") -> Path:
    """A scratch course as a grading run makes it: nbgrader_config.py and source/<lab>/ for two labs."""
    for lab in ("labA", "labB"):
        (where / "source" / lab).mkdir(parents=True)
        (where / "source" / lab / f"{lab}.ipynb").write_text(f"{lab}: {text}")
    (where / "nbgrader_config.py").write_text("c = get_config()\n")
    return where


@pytest.fixture
def generate(monkeypatch, tmp_path: Path) -> list[tuple[Path, str]]:
    """nbgrader's generation replaced by a writer of a gradebook naming what it saw and a release copy of the source;
    returns the list of its calls."""
    calls: list[tuple[Path, str]] = []

    def gen(course: Path, lab: str) -> None:
        calls.append((course, lab))
        seen = (course / "source" / lab / f"{lab}.ipynb").read_text()
        db = course / "gradebook.db"
        db.write_text((db.read_text() if db.exists() else "") + seen + "\n")
        (course / "release" / lab).mkdir(parents=True)
        shutil.copy2(course / "source" / lab / f"{lab}.ipynb", course / "release" / lab / f"{lab}.ipynb")

    monkeypatch.setenv("MLSYS_SITE_CACHE", str(tmp_path / "cache"))
    gen.calls = calls  # type: ignore[attr-defined]
    return gen  # type: ignore[return-value]


def test_the_digest_follows_the_sources_the_config_and_the_labs(tmp_path):
    course = _course(tmp_path / "c")
    first = assignments.digest(course, ["labA"])
    (course / "source" / "labA" / "__pycache__").mkdir()
    (course / "source" / "labA" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert assignments.digest(course, ["labA"]) == first  # a bytecode cache is not a source
    assert assignments.digest(course, ["labA", "labB"]) != first
    (course / "source" / "labA" / "labA.ipynb").write_text("labA: cell 2")
    second = assignments.digest(course, ["labA"])
    assert second != first
    (course / "nbgrader_config.py").write_text("c = get_config()\nc.X = 1\n")
    assert assignments.digest(course, ["labA"]) not in (first, second)


def test_the_same_inputs_are_generated_once_and_a_change_generates_again(generate, tmp_path):
    one, two = _course(tmp_path / "run1"), _course(tmp_path / "run2")
    assert assignments.generate_all(one, ["labA", "labB"], generate) is False
    assert assignments.generate_all(two, ["labA", "labB"], generate) is True
    assert len(generate.calls) == 2  # labA and labB, once
    assert (two / "gradebook.db").read_text() == "labA: cell 1\nlabB: cell 1\n"
    assert (two / "release" / "labB" / "labB.ipynb").read_text() == "labB: cell 1"
    three = _course(tmp_path / "run3", text="cell 2")
    assert assignments.generate_all(three, ["labA", "labB"], generate) is False
    assert len(generate.calls) == 4
    assert (three / "gradebook.db").read_text() == "labA: cell 2\nlabB: cell 2\n"


def test_a_failed_generation_raises_and_keeps_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("MLSYS_SITE_CACHE", str(tmp_path / "cache"))

    def broken(course: Path, lab: str) -> None:
        (course / "gradebook.db").write_text("half")
        raise RuntimeError("nbgrader generate_assignment labA failed (exit 1)")

    with pytest.raises(RuntimeError, match="generate_assignment"):
        assignments.generate_all(_course(tmp_path / "c"), ["labA"], broken)
    store = tmp_path / "cache" / "assignments"
    assert not store.exists() or list(store.iterdir()) == []


def test_the_store_keeps_the_newest_only_and_the_site_cache_leaves_it_alone(generate, monkeypatch, tmp_path):
    monkeypatch.setattr(assignments, "KEEP", 3)
    for i in range(5):
        assignments.generate_all(_course(tmp_path / f"run{i}", text=f"cell {i}"), ["labA"], generate)
    store = tmp_path / "cache" / "assignments"
    kept = sorted(p.name for p in store.iterdir())
    assert len(kept) == 3 and not any(k.startswith(".") for k in kept)
    newest = assignments.digest(_course(tmp_path / "again", text="cell 4"), ["labA"])
    assert newest in kept
    # the site cache prunes its own entries (64 hex digits) in the same root, never the assignments folder
    site = tmp_path / "built"
    site.mkdir()
    for i in range(siteinstall.KEEP + 1):
        siteinstall.keep(tmp_path / "cache", f"{i:064x}", site)
    assert sorted(p.name for p in store.iterdir()) == kept
    assert len([p for p in (tmp_path / "cache").iterdir() if p.name != "assignments"]) == siteinstall.KEEP
