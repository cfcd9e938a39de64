"""A new gradebook is stamped with nbgrader's schema revision read in-process, the same one ``alembic heads`` prints."""

from __future__ import annotations

import sqlite3
import subprocess

import pytest

from mlsys.grader import gradebook


@pytest.fixture
def fresh_api(monkeypatch):
    """nbgrader.api with its own ``get_alembic_version`` back after the test (whatever an earlier test installed)."""
    import nbgrader.api

    original = getattr(nbgrader.api.get_alembic_version, "__wrapped__", nbgrader.api.get_alembic_version)
    monkeypatch.setattr(nbgrader.api, "get_alembic_version", original)
    return nbgrader.api


def test_the_head_is_what_alembic_heads_prints(fresh_api):
    """The oracle: nbgrader's own way, the ``alembic`` script in a new process."""
    gradebook.alembic_on_path()  # the script of this environment, where the venv is not activated
    assert gradebook.schema_head() == fresh_api.get_alembic_version.__wrapped__()


def test_a_new_gradebook_starts_no_process_and_has_the_head(fresh_api, tmp_path, monkeypatch):
    gradebook.schema_head_in_process()
    gradebook.schema_head_in_process()  # a second call wraps nothing twice
    assert fresh_api.get_alembic_version.__wrapped__.__module__ == "nbgrader.api"

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    with fresh_api.Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        gb.add_student("ada")
    monkeypatch.undo()
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(gradebook.schema_head(),)]


def test_nbgraders_own_way_where_the_scripts_cannot_be_read(fresh_api, monkeypatch):
    def unreadable() -> str:
        raise OSError("no migration scripts")

    gradebook.schema_head_in_process()
    monkeypatch.setattr(gradebook, "schema_head", unreadable)
    monkeypatch.setattr(fresh_api.sp, "check_output", lambda cmd, **kw: b"0123abcd (head)\n" if "heads" in cmd else b"")
    assert fresh_api.get_alembic_version() == "0123abcd"
