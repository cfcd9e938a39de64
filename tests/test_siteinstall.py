"""The sandbox site's install kept by its sources' digest (mlsys.grader.siteinstall): the same sources are installed
once, any changed byte installs again, a failed install keeps nothing, and the cache stays bounded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlsys.grader import siteinstall


@pytest.fixture
def sources(tmp_path: Path) -> tuple[Path, Path]:
    pkg = tmp_path / "src" / "mlsys"
    (pkg / "models").mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    (pkg / "models" / "roofline.py").write_text("RIDGE = 295\n")
    pyproject = tmp_path / "src" / "pyproject.toml"
    pyproject.write_text("[project]\nname = 'demo'\n")
    return pyproject, pkg


@pytest.fixture
def fake_pip(monkeypatch, tmp_path: Path) -> list[Path]:
    """pip replaced by a writer of one file naming the sources it saw; returns the list of its calls."""
    calls: list[Path] = []

    def pip(src: Path, target: Path) -> bool:
        calls.append(src)
        target.mkdir(parents=True)
        (target / "demo.dist-info").mkdir()
        (target / "demo.dist-info" / "RECORD").write_text((src / "mlsys" / "__init__.py").read_text())
        return True

    monkeypatch.setattr(siteinstall, "_pip", pip)
    monkeypatch.setenv("MLSYS_SITE_CACHE", str(tmp_path / "cache"))
    return calls


def test_the_digest_follows_every_source_byte_and_nothing_else(sources):
    pyproject, pkg = sources
    first = siteinstall.source_digest(pyproject, pkg)
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0compiled")
    assert siteinstall.source_digest(pyproject, pkg) == first  # a bytecode cache is not a source
    (pkg / "models" / "roofline.py").write_text("RIDGE = 296\n")
    second = siteinstall.source_digest(pyproject, pkg)
    assert second != first
    pyproject.write_text("[project]\nname = 'demo2'\n")
    assert siteinstall.source_digest(pyproject, pkg) not in (first, second)


def test_the_same_sources_are_installed_once_and_a_change_installs_again(sources, fake_pip, tmp_path):
    pyproject, pkg = sources
    assert siteinstall.pip_install(pyproject, pkg, tmp_path / "a")
    assert siteinstall.pip_install(pyproject, pkg, tmp_path / "b")
    assert len(fake_pip) == 1
    assert (tmp_path / "b" / "demo.dist-info" / "RECORD").read_text() == "x = 1\n"
    (pkg / "__init__.py").write_text("x = 2\n")
    assert siteinstall.pip_install(pyproject, pkg, tmp_path / "c")
    assert len(fake_pip) == 2
    assert (tmp_path / "c" / "demo.dist-info" / "RECORD").read_text() == "x = 2\n"


def test_a_failed_install_keeps_nothing(sources, monkeypatch, tmp_path):
    pyproject, pkg = sources
    monkeypatch.setenv("MLSYS_SITE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(siteinstall, "_pip", lambda src, target: False)
    assert not siteinstall.pip_install(pyproject, pkg, tmp_path / "a")
    assert list((tmp_path / "cache").iterdir()) == []


def test_the_cache_keeps_the_newest_installs_only(sources, fake_pip, tmp_path):
    pyproject, pkg = sources
    for i in range(siteinstall.KEEP + 3):
        (pkg / "__init__.py").write_text(f"x = {i}\n")
        assert siteinstall.pip_install(pyproject, pkg, tmp_path / f"site{i}")
    kept = sorted((tmp_path / "cache").iterdir())
    assert len(kept) == siteinstall.KEEP
    assert not any(p.name.startswith(".") for p in kept)  # no half-stored copy left behind
    newest = siteinstall.source_digest(pyproject, pkg)
    assert newest in {p.name for p in kept}


def test_no_writable_cache_means_no_cache(monkeypatch, tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("MLSYS_SITE_CACHE", str(blocked / "cache"))
    assert siteinstall.cache_root() is None


def test_an_install_carries_bytecode_checked_by_its_sources_hash(sources, monkeypatch, tmp_path):
    """A sandbox's site is read-only: its modules are compiled when the install is made, checked by the source's
    hash (a copy's times do not matter), and the bytecode travels with the cached install."""
    import importlib.util

    pyproject, pkg = sources

    def pip(src: Path, target: Path) -> bool:  # an install of the sources as they are, as pip's --target makes it
        shutil.copytree(src / "mlsys", target / "mlsys")
        return True

    monkeypatch.setattr(siteinstall, "_pip", pip)
    monkeypatch.setenv("MLSYS_SITE_CACHE", str(tmp_path / "cache"))
    for dest in (tmp_path / "a", tmp_path / "b"):  # made, then copied from the cache
        assert siteinstall.pip_install(pyproject, pkg, dest)
        for source in (dest / "mlsys" / "__init__.py", dest / "mlsys" / "models" / "roofline.py"):
            header = Path(importlib.util.cache_from_source(str(source))).read_bytes()[:16]
            assert header[:4] == importlib.util.MAGIC_NUMBER
            assert int.from_bytes(header[4:8], "little") == 0b11  # hash-based, checked against the source
            assert header[8:16] == importlib.util.source_hash(source.read_bytes())
    broken = tmp_path / "broken"
    (broken / "mlsys").mkdir(parents=True)
    (broken / "mlsys" / "__init__.py").write_text("def (:\n")
    assert not siteinstall.compile_site(broken)  # a module that does not compile: no install
