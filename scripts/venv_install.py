"""Install requirements.txt into the course's .venv with uv, under pip's own configuration; with pip where uv cannot.

``make venv`` runs it with the venv's python: ``.venv/bin/python scripts/venv_install.py``. uv resolves, unpacks
and byte-compiles on every core; pip does it on one (on the 2-core CI machine: about 26 s against 71 s for the
same packages, 2026-12-03). The installed versions are the same: requirements.txt pins the course's packages and
both take the highest release of the rest.

pip's configuration (files and ``PIP_*`` variables, as ``pip config list`` reports them) is what this machine says
about where packages come from, so uv gets the same: index and extra indexes (every index equally trusted, as pip
treats them), local wheel folders, constraints, the certificate bundle and the timeout. Where uv cannot be
installed or fails, pip installs the requirements and says why uv was not used.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

UV = "uv==0.13.9"
REPO = Path(__file__).resolve().parent.parent
_LISTS = {"extra-index-url": "--extra-index-url", "find-links": "--find-links", "constraint": "--constraint",
          "trusted-host": "--allow-insecure-host"}


def pip_settings(listing: str) -> dict[str, str]:
    """``pip config list``'s lines (``global.find-links='/opt/wheels'``, ``:env:.cert='...'``) as {key: value}; a
    later source wins (pip lists files first, then the environment), and ``install.`` settings count as ``global.``."""
    out: dict[str, str] = {}
    for line in listing.splitlines():
        name, sep, value = line.partition("=")
        if not sep or "." not in name:
            continue
        section, key = name.split(".", 1)
        if section in ("global", "install", ":env:"):
            out[key] = " ".join(shlex.split(value))
    return out


def uv_command(settings: dict[str, str], python: str, requirements: str) -> tuple[list[str], dict[str, str]]:
    """The ``uv pip install`` arguments and extra environment that ask for what ``settings`` ask pip for."""
    args = ["pip", "install", "--quiet", "--python", python, "--index-strategy", "unsafe-best-match",
            "--compile-bytecode", "-r", requirements]
    env: dict[str, str] = {}
    if "index-url" in settings:
        args += ["--index-url", settings["index-url"]]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        args.append("--no-index")
    for key, flag in _LISTS.items():
        for value in settings.get(key, "").split():
            args += [flag, value]
    if "cert" in settings:
        env["SSL_CERT_FILE"] = settings["cert"]
    if "default-timeout" in settings:
        env["UV_HTTP_TIMEOUT"] = settings["default-timeout"].split(".")[0]
    return args, env


def main() -> int:
    python = sys.executable
    requirements = str(REPO / "requirements.txt")
    pip = [python, "-m", "pip"]
    listing = subprocess.run([*pip, "config", "list"], capture_output=True, text=True, check=False).stdout
    args, env = uv_command(pip_settings(listing), python, requirements)
    uv = Path(python).parent / "uv"
    try:
        subprocess.run([*pip, "install", "--quiet", UV], check=True)
        subprocess.run([str(uv), *args], check=True, env={**os.environ, **env})
        return 0
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"venv_install: uv did not install the requirements ({exc}); pip installs them", file=sys.stderr)
    return subprocess.run([*pip, "install", "--quiet", "-r", requirements], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
