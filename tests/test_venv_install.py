"""`make venv` asks uv for what pip's configuration asks pip for (scripts/venv_install.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("venv_install", Path(__file__).resolve().parent.parent / "scripts"
                                               / "venv_install.py")
venv_install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(venv_install)

# `pip config list` on the CI machine (2026-12-03), with an index named in the environment on top
LISTING = """global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels /srv/more-wheels'
:env:.index-url='https://mirror.example/simple'
"""


def test_pips_settings_are_read_with_the_environment_over_the_files():
    got = venv_install.pip_settings(LISTING + "not a setting\nuser.x='y'\n")
    assert got == {"cert": "/etc/ssl/certs/ca-certificates.crt", "constraint": "/etc/xdg/pip/constraints.txt",
                   "extra-index-url": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
                   "find-links": "/opt/wheels /srv/more-wheels", "default-timeout": "180",
                   "disable-pip-version-check": "1", "index-url": "https://mirror.example/simple"}


def test_uv_gets_every_index_wheel_folder_constraint_and_the_certificate():
    args, env = venv_install.uv_command(venv_install.pip_settings(LISTING), "/v/bin/python", "req.txt")
    pairs = list(zip(args, args[1:], strict=False))
    assert ("--index-url", "https://mirror.example/simple") in pairs
    assert [v for f, v in pairs if f == "--extra-index-url"] == ["file:///opt/pypi/simple", "file:///opt/pypi-more/simple"]
    assert [v for f, v in pairs if f == "--find-links"] == ["/opt/wheels", "/srv/more-wheels"]
    assert ("--constraint", "/etc/xdg/pip/constraints.txt") in pairs
    assert ("--index-strategy", "unsafe-best-match") in pairs  # pip trusts every index alike
    assert ("--python", "/v/bin/python") in pairs and ("-r", "req.txt") in pairs and "--compile-bytecode" in args
    assert "--no-index" not in args
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "180"}


def test_no_index_is_passed_on():
    args, _ = venv_install.uv_command({"no-index": "true"}, "p", "r")
    assert "--no-index" in args
