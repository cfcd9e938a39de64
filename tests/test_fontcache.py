"""The grader's matplotlib font list reaches each sandbox's cache folder, so that no kernel makes it again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mlsys.grader import fontcache


def test_own_cache_dir_is_where_matplotlib_keeps_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MPLCONFIGDIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert fontcache.own_cache_dir() == tmp_path / "home" / ".cache" / "matplotlib"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert fontcache.own_cache_dir() == tmp_path / "xdg" / "matplotlib"
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    assert fontcache.own_cache_dir() == tmp_path / "mpl"


def test_the_site_gets_the_lists_and_a_sandbox_a_copy_of_its_own(tmp_path):
    cache, site, sandbox = tmp_path / "cache", tmp_path / "site", tmp_path / "sandbox" / "mpl"
    cache.mkdir()
    assert fontcache.keep_in(site, cache) == [] and not (site / fontcache.SITE_FOLDER).exists()  # none made yet
    (cache / "fontlist-v390.json").write_text('{"_version": 390}')
    (cache / "tex.cache").mkdir()  # matplotlib's other caches stay where they are
    (cache / "fontlist-v390.json.matplotlib-lock").write_text("")
    assert [p.name for p in fontcache.keep_in(site, cache)] == ["fontlist-v390.json"]
    assert sorted(p.name for p in (site / fontcache.SITE_FOLDER).iterdir()) == ["fontlist-v390.json"]
    assert fontcache.prime(site, None) == []  # no MPLCONFIGDIR: nothing to fill
    assert [p.name for p in fontcache.prime(site, str(sandbox))] == ["fontlist-v390.json"]
    assert (sandbox / "fontlist-v390.json").read_text() == '{"_version": 390}'
    (sandbox / "fontlist-v390.json").write_text("the sandbox's own")  # made there since: left as it is
    assert fontcache.prime(site, str(sandbox)) == [] and (sandbox / "fontlist-v390.json").read_text() == "the sandbox's own"
    assert fontcache.prime(tmp_path / "no-site", str(sandbox)) == []


@pytest.mark.slow  # three processes that import matplotlib
def test_a_primed_sandbox_cache_spares_matplotlib_its_font_scan(tmp_path):
    """The oracle is matplotlib itself: an ``fc-list`` first on PATH leaves a mark when matplotlib lists the fonts."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    mark = tmp_path / "scanned"
    (bin_ / "fc-list").write_text(f"#!/bin/sh\necho >> {mark}\nexec /usr/bin/fc-list \"$@\"\n")
    (bin_ / "fc-list").chmod(0o755)
    code = textwrap.dedent("""
        import matplotlib
        from matplotlib import font_manager
        print(matplotlib.get_cachedir())
    """)

    def imports_matplotlib(cache: Path) -> str:
        env = {**os.environ, "MPLCONFIGDIR": str(cache), "PATH": f"{bin_}:{os.environ['PATH']}", "MPLBACKEND": "Agg"}
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout

    grader = tmp_path / "grader-cache"
    assert imports_matplotlib(grader).strip() == str(grader)  # own_cache_dir's answer under MPLCONFIGDIR is matplotlib's
    assert mark.is_file(), "matplotlib made its first list without fc-list: this test could not tell a scan"
    mark.unlink()
    site = tmp_path / "site"
    assert fontcache.keep_in(site, grader)
    sandbox = tmp_path / "sandbox-tmp" / "mpl"
    assert fontcache.prime(site, str(sandbox))
    imports_matplotlib(sandbox)
    assert not mark.exists(), "matplotlib listed the fonts again in a primed cache folder"
