"""One sandbox per submission: bubblewrap, a private scratch folder, capped resources.

Why bubblewrap (``bwrap``, Debian package ``bubblewrap``): it is the small, audited setuid-free
namespace tool that Flatpak is built on; it needs no daemon and no image, and it starts in a few
milliseconds, so a sandbox per submission costs nothing noticeable. What a sandboxed process sees
(:func:`command`):

* the system's programs and libraries and the Python environment, **read-only**;
* ``mlsys`` as an installed package in a read-only site folder built once per grading run from the
  package itself (:func:`build_site`), never a path into the repository;
* its own scratch folder (the submission's files), the only writable place besides a private
  ``/tmp``; the instructor notebooks, the gradebook, the repository, other students' folders and
  the teacher's home are simply not there;
* no network (a new network namespace with only loopback), its own process ids (the sandbox's
  processes end with it: nothing it starts outlives it), a fresh session (no terminal to inject
  into), every capability dropped, an unprivileged user id;
* limits set with ``prlimit`` inside: address space (CPU runs only: CUDA reserves more virtual
  memory than any sane cap), processes, file size, open files. Wall time is enforced from outside by
  the caller, which kills the whole sandbox.

Where bubblewrap cannot run, :func:`check` raises :class:`SandboxUnavailable` saying how to install
it; a teacher may grade without it only by asking for ``--no-sandbox``, which is logged loudly.

On this course's Debian containers, running as root, ``bwrap --unshare-all --unshare-user --uid
1000 --gid 1000 --cap-drop ALL`` works (user namespaces are allowed); where user namespaces are
disabled for root, :func:`check` reports bwrap's own error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SandboxUnavailable", "Limits", "bwrap_path", "check", "build_site", "command", "INSIDE_HOME",
           "NO_SANDBOX_WARNING"]

HOSTS_FILE = "sandbox-hosts"
"""File in the site folder bound over /etc/hosts inside the sandbox."""

INSIDE_HOME = "/home/student"
"""Where the scratch folder appears inside the sandbox (also ``HOME`` and the working directory)."""

NO_SANDBOX_WARNING = (
    "WARNING: --no-sandbox: student code runs with YOUR permissions. It can read the instructor notebooks "
    "(solutions and hidden tests), change the gradebook and other students' files, and use the network. "
    "Grades from this run are not trustworthy; use it only on machines that cannot run bubblewrap and only "
    "for submissions you trust."
)


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create namespaces here."""


@dataclass(frozen=True)
class Limits:
    """Resource caps for one sandboxed process tree.

    ``memory_bytes`` caps the address space (RLIMIT_AS; not applied when a GPU is passed in),
    ``processes`` the extra processes it may start (RLIMIT_NPROC is per user id system-wide, so the
    cap is this many above what the grading user already runs), ``file_bytes`` the largest file it
    may write, ``open_files`` its descriptors.
    """

    memory_bytes: int = 8 * 2**30
    processes: int = 256
    file_bytes: int = 1 * 2**30
    open_files: int = 1024

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "processes", "file_bytes", "open_files"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"Limits.{name}: expected a positive integer, got {value!r}")


def bwrap_path() -> str | None:
    """The bwrap executable on PATH, or None."""
    return shutil.which("bwrap")


_CHECKED: dict[str, str] = {}


def check() -> str:
    """Return the bwrap path after proving it can build a sandbox here; else raise :class:`SandboxUnavailable`."""
    path = bwrap_path()
    if path is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed, so submissions cannot be sandboxed. Install it "
            "(Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf install bubblewrap`) "
            "or, only for submissions you trust, grade with --no-sandbox.")
    if path in _CHECKED:
        return path
    probe = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--unshare-user",
             "--uid", "1000", "--gid", "1000", "--cap-drop", "ALL", "--die-with-parent", "--", "/bin/true"]
    try:
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"bwrap ({path}) could not be started: {exc}") from exc
    if proc.returncode != 0:
        raise SandboxUnavailable(
            f"bwrap ({path}) cannot create a sandbox here: {proc.stderr.strip()[:300]}. User namespaces may be "
            "disabled (sysctl kernel.unprivileged_userns_clone / user.max_user_namespaces) or the container "
            "forbids them; enable them, or grade with --no-sandbox for submissions you trust.")
    _CHECKED[path] = path
    return path


def _package_dir() -> Path:
    import mlsys

    return Path(mlsys.__file__).resolve().parent


def build_site(dest: Path) -> Path:
    """Install ``mlsys`` (without dependencies) into the folder ``dest``; return ``dest``.

    Built once per grading run and bound read-only into every sandbox. From a source checkout it is
    ``pip install --no-deps --target`` of the package (a real install, with its metadata); where
    that is not possible (an installed course, no build backend) the installed package is copied.
    Only the ``mlsys`` package and the recorded measurements (``data/measurements``, public) go in:
    nothing of ``labs/`` (solutions, hidden tests) ever does.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    pkg = _package_dir()
    repo = pkg.parent
    # the recorded GPU measurements (public data the labs plot) sit where mlsys.bench.records looks for them
    from mlsys.bench.records import data_dir

    measured = data_dir()
    if measured.is_dir():
        shutil.copytree(measured, dest / "data" / "measurements", dirs_exist_ok=True)
    if (repo / "pyproject.toml").is_file():
        with tempfile.TemporaryDirectory(prefix="mlsys-src-") as tmp:
            # copy the sources first so that a build writes nothing into the repository
            src = Path(tmp) / "src"
            src.mkdir()
            shutil.copy2(repo / "pyproject.toml", src / "pyproject.toml")
            shutil.copytree(pkg, src / "mlsys", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                 "--no-compile", "--no-index", "--disable-pip-version-check", "--target", str(dest), str(src)],
                capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            shutil.rmtree(dest / "mlsys", ignore_errors=True)
    # the package's own files over the install: data files a build configuration might leave out are there too
    shutil.copytree(pkg, dest / "mlsys", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    # the sandbox's host name resolves to loopback (torch.distributed's gloo looks itself up by name)
    (dest / HOSTS_FILE).write_text("127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n")
    return dest


def _gpu_nodes() -> list[str]:
    return sorted(str(p) for p in Path("/dev").glob("nvidia*")) + [p for p in ("/dev/dri",) if Path(p).exists()]


def _nproc_now() -> int:
    uid = os.getuid()
    n = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            for line in status.read_text().splitlines():
                if line.startswith("Uid:"):
                    n += int(line.split()[1]) == uid
                    break
        except (OSError, ValueError, IndexError):
            continue
    return n


def command(argv: list[str], scratch: Path, site: Path, *, limits: Limits | None = None, gpu: bool = False,
            env: dict[str, str] | None = None, bwrap: str | None = None) -> list[str]:
    """The bwrap command line that runs ``argv`` in a sandbox over ``scratch`` (read-write).

    ``site`` (from :func:`build_site`) is put first on ``PYTHONPATH``, read-only. ``gpu`` passes
    the NVIDIA device nodes in and lifts the address-space cap. ``env`` adds variables
    to the otherwise cleared environment.
    """
    bwrap = bwrap or check()
    limits = limits or Limits()
    scratch, site = Path(scratch).resolve(), Path(site).resolve()
    args = [bwrap, "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000", "--cap-drop", "ALL",
            "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    # Empty /tmp and /home first: a Python (a venv) that lives under them is bound on top below. Mounted
    # after the binds, the tmpfs would hide a course checked out in /tmp or in a home folder, and every
    # submission would fail to start (found by CI on a clone in /tmp/ci).
    args += ["--tmpfs", "/tmp", "--tmpfs", "/home"]
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"):
        if Path(path).exists():
            args += ["--ro-bind", path, path] if not Path(path).is_symlink() else ["--symlink", os.readlink(path), path]
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).resolve().parents[1])}:
        if prefix and Path(prefix).exists() and not any(prefix.startswith(p + "/") or prefix == p
                                                        for p in ("/usr", "/bin", "/lib", "/opt")):
            args += ["--ro-bind", prefix, prefix]
    args += ["--dev", "/dev", "--proc", "/proc",
             "--ro-bind", str(site), "/sandbox/site", "--bind", str(scratch), INSIDE_HOME, "--chdir", INSIDE_HOME]
    args += ["--ro-bind", "/sys", "/sys"]  # CPU topology for OpenMP/torch threads, GPU discovery; read-only
    if (site / HOSTS_FILE).is_file():
        args += ["--ro-bind", str(site / HOSTS_FILE), "/etc/hosts"]
    if gpu:
        for node in _gpu_nodes():
            args += ["--dev-bind", node, node]
    variables = {
        "HOME": INSIDE_HOME, "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": "/sandbox/site", "PYTHONNOUSERSITE": "1", "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg",
        "TMPDIR": "/tmp", "JUPYTER_RUNTIME_DIR": "/tmp/jupyter-runtime", "JUPYTER_PLATFORM_DIRS": "1",
        "IPYTHONDIR": "/tmp/ipython", "MPLCONFIGDIR": "/tmp/mpl", "TRITON_CACHE_DIR": "/tmp/triton",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1", "LANG": "C.UTF-8",
        "TORCH_CPP_LOG_LEVEL": "ERROR",  # c10d warns on stderr that it cannot name the sandbox (stderr costs a cell)
    }
    for key in ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES", "MLSYS_FAKE_TIMER", "OMP_NUM_THREADS"):
        if key in os.environ:
            variables[key] = os.environ[key]
    variables.update(env or {})
    args.append("--clearenv")
    for key, value in variables.items():
        args += ["--setenv", key, value]
    caps = [f"--nproc={_nproc_now() + limits.processes}", f"--fsize={limits.file_bytes}",
            f"--nofile={limits.open_files}", "--core=0"]
    if not gpu:
        caps.append(f"--as={limits.memory_bytes}")
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        raise SandboxUnavailable("prlimit (util-linux) is missing: it sets the sandbox's resource limits")
    return [*args, "--", prlimit, *caps, "--", *argv]
