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
  the caller, which kills the whole sandbox;
* tasks and memory capped **per sandbox**, not per process, by a cgroup of its own (:class:`Cgroup`:
  ``systemd-run --scope`` where systemd runs the machine, else cgroup v2 or v1 directly); where none
  can be made, :func:`cgroup_note` says so once and the per-process limits above are all there is;
* only what Python needs from ``/etc`` (:data:`ETC_FILES`; a passwd and group of its own), never the
  whole folder.

**A root grader never runs student code as root.** With an unprivileged grader, bwrap maps the
grader's uid to :data:`SANDBOX_UID` in a new user namespace. A root grader's uid would map to root
outside (root-only files bound in readable, ``RLIMIT_NPROC`` not enforced), so there bwrap runs
without a user namespace, keeps only the capabilities to change user, and ``setpriv`` switches to
the real unprivileged uid and gid :data:`SANDBOX_UID` (``nobody``), clears supplementary groups,
empties every capability set and sets ``no_new_privs`` before the student's interpreter starts; the
scratch folder is handed to that uid (:func:`own_scratch`). The grader's own clean side (the verdict process
and its baseline and replay workers) runs in a sandbox of its own as another unprivileged uid,
:data:`CLEAN_UID` (``command(..., uid=CLEAN_UID)``): learner code can neither signal it nor write what it reads
(:mod:`mlsys.grader.learnerbox`). Each sandbox's ``/tmp`` is a size-capped tmpfs holding its compiler caches, and
a root grader mounts a submission's scratch as a size-capped tmpfs too (:func:`mlsys.grader.scratch.scratch_fs`).

Where bubblewrap cannot run, :func:`check` raises :class:`SandboxUnavailable` saying how to install
it; a teacher may grade without it only by asking for ``--no-sandbox``, which is logged loudly.

Where bwrap cannot build the sandbox (user namespaces disabled for an unprivileged grader, no
``setpriv`` for a root one), :func:`check` reports the error with advice.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mlsys.grader import fontcache
from mlsys.grader.siteinstall import pip_install

__all__ = ["SandboxUnavailable", "Limits", "Cgroup", "bwrap_path", "check", "build_site", "command", "INSIDE_HOME",
           "NO_SANDBOX_WARNING", "SANDBOX_UID", "CLEAN_UID", "TMP_BYTES", "ETC_FILES", "own_scratch", "cgroup_note",
           "gpu_nodes"]

SANDBOX_UID = 65534
"""The uid and gid student code runs as (``nobody``/``nogroup`` on Debian), inside and, for a root grader, outside."""

CLEAN_UID = 65533
"""The uid and gid of the grader's clean side in a sandbox (the verdict process and its baseline and replay
workers): another user than :data:`SANDBOX_UID`, so a learner's process can neither signal nor trace them,
nor write a file they read. Its sandbox has its own ``/tmp``, ``HOME`` and compiler caches
(:func:`command`'s ``uid``)."""

TMP_BYTES = 2 * 2**30
"""Size of a sandbox's private ``/tmp`` (a tmpfs, charged to the sandbox's memory cgroup): the file-size
cap alone lets many files under it fill the grader's disk."""

ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "fonts", "nsswitch.conf",
             "host.conf", "gai.conf", "protocols", "services", "mime.types", "os-release")
"""What of ``/etc`` a sandbox sees: the dynamic linker's configuration, the time zone, fonts for plots,
name-service settings (loopback only). Not passwd/shadow/group (the sandbox's own are bound instead)."""

PASSWD_FILE, GROUP_FILE = "sandbox-passwd", "sandbox-group"

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
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            raise SandboxUnavailable(
                "grading runs as root, and student code must not: setpriv (util-linux) is needed to drop to an "
                "unprivileged user inside the sandbox. Install util-linux, or run `make grade` as an ordinary user.")
        probe = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *_namespaces(True), "--die-with-parent",
                 "--", *_drop(), "/bin/true"]
    else:
        probe = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *_namespaces(False),
                 "--die-with-parent", "--", "/bin/true"]
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
    probe_cgroup = Cgroup.create(Limits())  # where none can be made, the note is printed here, once, for the teacher
    if probe_cgroup is not None:
        probe_cgroup.close()
    return path


def _namespaces(as_root: bool, uid: int = SANDBOX_UID) -> list[str]:
    """bwrap's namespace and capability options: see the module doc for the root case."""
    if as_root:  # no user namespace (uid 0 inside would be uid 0 outside); setpriv drops to SANDBOX_UID
        return ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    return ["--unshare-all", "--unshare-user", "--uid", str(uid), "--gid", str(uid), "--cap-drop", "ALL"]


def _drop(uid: int = SANDBOX_UID) -> list[str]:
    """setpriv: become ``uid`` for real, no groups, no capabilities in any set, no way back."""
    return [shutil.which("setpriv") or "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


def own_scratch(folder: Path, uid: int = SANDBOX_UID) -> None:
    """Hand ``folder`` (and everything in it) to ``uid`` when grading as root, so the unprivileged
    sandboxed process can write there; an unprivileged grader's files are already its own inside."""
    if os.geteuid() != 0:
        return
    folder = Path(folder)
    for p in [folder, *folder.rglob("*")]:
        if not p.is_symlink():
            os.chown(p, uid, uid)
    # bwrap enters the folder as root without capabilities (before setpriv drops to ``uid``): a folder made by
    # ``tempfile.mkdtemp`` (mode 0700) would refuse it ("Can't chdir to /home/student"). Search only, no listing.
    os.chmod(folder, folder.stat().st_mode & 0o7777 | 0o111)


# ------------------------------------------------------------------------------------------ cgroups


_CGROUP_NOTE: list[str] = []


SYSTEMD_DIR = Path("/run/systemd/system")
"""Present where systemd runs the machine: a sandbox's cgroup is then a transient scope (``systemd-run``)."""
CGROUP_FS = Path("/sys/fs/cgroup")
"""Where the cgroup file system is mounted (v2 unified, or one folder per v1 controller)."""


def cgroup_note() -> str:
    """Why sandboxes here have no cgroup of their own ("" when they do); printed once per process."""
    return _CGROUP_NOTE[0] if _CGROUP_NOTE else ""


class Cgroup:
    """A cgroup for one sandbox: its tasks (``pids``), memory and cores capped for the whole process tree,
    and a freezer that pauses all of it.

    :meth:`create` returns None where no cgroup can be made (then :func:`cgroup_note` says why);
    :meth:`wrap` prefixes a command line so that its first process joins the cgroup before it starts
    anything; :meth:`freeze` pauses or resumes every process in it (a ``setsid`` child included: leaving
    a session does not leave a cgroup, and an unprivileged process cannot move itself out);
    :meth:`close` kills whatever is left in it and removes it.

    The cores (``cpuset``) are this process's affinity when the cgroup is made (a slot's share of the
    machine, :mod:`mlsys.grader.slots`): ``sched_setaffinity`` (``taskset``) inside cannot reach past them.
    """

    def __init__(self, kind: str, paths: list[Path], unit: str = "") -> None:
        self.kind, self.paths, self.unit = kind, paths, unit

    @classmethod
    def create(cls, limits: Limits) -> Cgroup | None:
        name = f"mlsys-sandbox-{os.getpid()}-{secrets.token_hex(4)}"
        why: list[str] = []
        if SYSTEMD_DIR.is_dir() and shutil.which("systemd-run"):
            return cls("systemd", [], name)
        fs = CGROUP_FS
        try:
            own = {line.split(":", 2)[1]: line.split(":", 2)[2].strip()
                   for line in Path("/proc/self/cgroup").read_text().splitlines() if line.count(":") >= 2}
        except OSError as exc:
            own, why = {}, [f"/proc/self/cgroup: {exc}"]
        if (fs / "cgroup.controllers").is_file() and "" in own:  # cgroup v2, unified
            made = _make_v2(fs / own[""].lstrip("/") / name, limits, why)
            if made is not None:
                return cls("v2", [made])
        elif (fs / "pids").is_dir() and (fs / "memory").is_dir():  # cgroup v1
            made_v1 = _make_v1(fs, own, name, limits, why)
            if made_v1:
                return cls("v1", made_v1)
        else:
            why.append("no cgroup file system at /sys/fs/cgroup")
        if not _CGROUP_NOTE:
            _CGROUP_NOTE.append("no cgroup per sandbox here (" + "; ".join(why) + "): processes and memory are capped "
                                "per process only (RLIMIT_NPROC per user, RLIMIT_AS), not per sandbox")
            print("NOTE: " + _CGROUP_NOTE[0], file=sys.stderr, flush=True)
        return None

    def wrap(self, argv: list[str], limits: Limits) -> list[str]:
        """``argv`` started inside this cgroup."""
        if self.kind == "systemd":
            cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
            return [shutil.which("systemd-run") or "systemd-run", "--scope", "--quiet", "--collect", f"--unit={self.unit}",
                    f"--property=TasksMax={limits.processes}", f"--property=MemoryMax={limits.memory_bytes}",
                    f"--property=AllowedCPUs={cpus}", "--", *argv]
        joins = " && ".join(f"echo $$ > '{p}/cgroup.procs'" for p in self.paths)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "mlsys-cgroup", *argv]

    def _dirs(self) -> list[Path]:
        """The cgroup's folders (a systemd scope's, found once it exists)."""
        if self.kind != "systemd":
            return self.paths
        try:
            out = subprocess.run(["systemctl", "show", "-p", "ControlGroup", "--value", f"{self.unit}.scope"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return []
        return [CGROUP_FS / out.lstrip("/")] if out else []

    def pids(self) -> list[int]:
        """Every process in the cgroup now (as this process's PID namespace numbers them)."""
        found: set[int] = set()
        for path in self._dirs():
            try:
                found |= {int(x) for x in (path / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                continue
        return sorted(found)

    def freeze(self, stop: bool, timeout: float = 5.0) -> bool:
        """Pause (``stop``) or resume every process in the cgroup; True once the kernel says it is done.

        cgroup v2: ``cgroup.freeze`` and ``cgroup.events``; v1: the ``freezer`` controller's
        ``freezer.state``. False where this cgroup has no freezer (the caller falls back on signals)."""
        import time

        for path in self._dirs():
            if (path / "cgroup.freeze").is_file():
                file, value, done = path / "cgroup.freeze", "1" if stop else "0", ("frozen 1" if stop else "frozen 0")
                state = path / "cgroup.events"
            elif (path / "freezer.state").is_file():
                file = state = path / "freezer.state"
                value = done = "FROZEN" if stop else "THAWED"
            else:
                continue
            try:
                file.write_text(value)
                end = time.monotonic() + timeout
                while time.monotonic() < end:
                    if done in state.read_text():
                        return True
                    time.sleep(0.001)
            except OSError:
                return False
            return False
        return False

    def close(self) -> None:
        """Kill every process still in the cgroup and remove it."""
        import signal
        import time

        self.freeze(False, timeout=1.0)  # a frozen process cannot die until it is thawed
        for path in self.paths:
            for _ in range(50):
                try:
                    pids = [int(x) for x in (path / "cgroup.procs").read_text().split()]
                except (OSError, ValueError):
                    break
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.02)
            _rmdir(path)


def _cpus() -> str:
    """This process's cores as a cpuset list ("0,1")."""
    return ",".join(map(str, sorted(os.sched_getaffinity(0))))


def _make_v2(path: Path, limits: Limits, why: list[str]) -> Path | None:
    """A cgroup v2 folder with the caps (pids, memory; cpuset where the parent delegates it), or None."""
    try:
        path.mkdir()
        (path / "pids.max").write_text(str(limits.processes))
        (path / "memory.max").write_text(str(limits.memory_bytes))
        if (path / "cpuset.cpus").is_file():
            (path / "cpuset.cpus").write_text(_cpus())
        return path
    except OSError as exc:
        why.append(f"cgroup v2 at {path.parent}: {exc}")
        _rmdir(path)
        return None


def _make_v1(fs: Path, own: dict[str, str], name: str, limits: Limits, why: list[str]) -> list[Path]:
    """cgroup v1 folders: pids and memory capped; the freezer and a cpuset where those controllers are mounted."""
    made: list[Path] = []
    required: list[tuple[str, list[tuple[str, str]]]] = [
        ("pids", [("pids.max", str(limits.processes))]), ("memory", [("memory.limit_in_bytes", str(limits.memory_bytes))])]
    optional: list[tuple[str, list[tuple[str, str]]]] = [("freezer", []), ("cpuset", [("cpuset.mems", ""),
                                                                                     ("cpuset.cpus", _cpus())])]
    for ctl, keys in required + [o for o in optional if (fs / o[0]).is_dir()]:
        path = fs / ctl / own.get(ctl, "/").lstrip("/") / name
        try:
            path.mkdir()
            made.append(path)
            for key, value in keys:
                if key == "cpuset.mems":  # a v1 cpuset starts empty: its memory nodes are its parent's
                    value = (path.parent / "cpuset.mems").read_text().strip()
                (path / key).write_text(value)
        except OSError as exc:
            if made and made[-1] == path:
                made.pop()
                _rmdir(path)
            if ctl in ("pids", "memory"):
                why.append(f"cgroup v1: {exc}")
                for done in made:
                    _rmdir(done)
                return []
    return made


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _package_dir() -> Path:
    import mlsys

    return Path(mlsys.__file__).resolve().parent


def build_site(dest: Path) -> Path:
    """Install ``mlsys`` (without dependencies) into the folder ``dest``; return ``dest``.

    Built once per grading run and bound read-only into every sandbox. From a source checkout it is
    ``pip install --no-deps --target`` of the package (a real install, with its metadata; kept by the sources'
    digest, :func:`mlsys.grader.siteinstall.pip_install`); where
    that is not possible (an installed course, no build backend) the installed package is copied.
    Only the ``mlsys`` package, the recorded measurements (``data/measurements``, public) and the grader's matplotlib
    font list (:mod:`mlsys.grader.fontcache`) go in: nothing of ``labs/`` (solutions, hidden tests) ever does.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    from mlsys.runtime.paths import checkout

    pkg = _package_dir()
    repo = checkout()  # the folder the package sits in: a checkout has pyproject.toml there
    # the recorded GPU measurements (public data the labs plot) sit where mlsys.bench.records looks for them
    from mlsys.bench.records import data_dir

    measured = data_dir()
    if measured.is_dir():
        shutil.copytree(measured, dest / "data" / "measurements", dirs_exist_ok=True)
    if (repo / "pyproject.toml").is_file() and not pip_install(repo / "pyproject.toml", pkg, dest):
        shutil.rmtree(dest / "mlsys", ignore_errors=True)
    # the package's own files over the install: data files a build configuration might leave out are there too
    shutil.copytree(pkg, dest / "mlsys", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    fontcache.keep_in(dest)  # the grader's matplotlib font list, which each kernel would otherwise make again
    # the sandbox's host name resolves to loopback (torch.distributed's gloo looks itself up by name)
    (dest / HOSTS_FILE).write_text("127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost ip6-loopback\n")
    # the only user and group the sandbox knows (getpass, ~ expansion): no system account is listed
    (dest / PASSWD_FILE).write_text(f"student:x:{SANDBOX_UID}:{SANDBOX_UID}:student:{INSIDE_HOME}:/bin/false\n"
                                    f"grader:x:{CLEAN_UID}:{CLEAN_UID}:grader:{INSIDE_HOME}:/bin/false\n")
    (dest / GROUP_FILE).write_text(f"student:x:{SANDBOX_UID}:\ngrader:x:{CLEAN_UID}:\n")
    for p in [dest, *dest.rglob("*")]:  # readable by the unprivileged uid a root grader's sandbox runs as
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)
    return dest


GPU_CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
"""The NVIDIA driver's shared control nodes every CUDA process opens (not a GPU of its own)."""


def gpu_nodes(visible: str | None = None) -> list[str]:
    """The ``/dev`` nodes a sandbox gets: the driver's control nodes and only the GPUs ``visible`` (a
    ``CUDA_VISIBLE_DEVICES`` list of indices, default this process's) names, so under ``--jobs N`` a
    submission cannot open its neighbour's GPU. Where ``visible`` is unset or names GPUs by UUID, every
    ``/dev/nvidiaN`` (no slot to keep to)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    ids = [x.strip() for x in (visible or "").split(",") if x.strip()]
    every = sorted(str(p) for p in Path("/dev").glob("nvidia*"))
    if visible is None or not all(x.isdigit() for x in ids):
        return every
    keep = {f"/dev/{n}" for n in GPU_CONTROL_NODES} | {f"/dev/nvidia{int(x)}" for x in ids}
    return [p for p in every if p in keep or p.startswith("/dev/nvidia-caps")]


def _nproc_now(uid: int = SANDBOX_UID) -> int:
    """Processes the sandbox's user already runs (RLIMIT_NPROC counts per user id, system-wide)."""
    uid = uid if os.geteuid() == 0 else os.getuid()
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
            env: dict[str, str] | None = None, bwrap: str | None = None, cgroup: Cgroup | None = None,
            as_root: bool | None = None, uid: int = SANDBOX_UID, tmp_bytes: int = TMP_BYTES) -> list[str]:
    """The bwrap command line that runs ``argv`` in a sandbox over ``scratch`` (read-write).

    ``site`` (from :func:`build_site`) is put first on ``PYTHONPATH``, read-only. ``gpu`` passes
    the NVIDIA device nodes in and lifts the address-space cap. ``env`` adds variables
    to the otherwise cleared environment. ``cgroup`` (from :meth:`Cgroup.create`) caps the whole
    sandbox; ``as_root`` (default: whether this process is root) picks how the uid is dropped; ``uid`` is
    who runs inside (:data:`SANDBOX_UID` for learner code, :data:`CLEAN_UID` for the grader's clean side).
    Every sandbox has its own ``/tmp`` (``tmp_bytes`` of tmpfs) holding its compiler caches (Triton,
    Inductor, CUDA's JIT, XDG): nothing one sandbox compiles is loaded by another.
    """
    bwrap = bwrap or check()
    limits = limits or Limits()
    scratch, site = Path(scratch).resolve(), Path(site).resolve()
    as_root = os.geteuid() == 0 if as_root is None else as_root
    args = [bwrap, *_namespaces(as_root, uid), "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    args += _file_system(scratch, site, tmp_bytes, gpu)
    args.append("--clearenv")
    for key, value in _environment(uid, env).items():
        args += ["--setenv", key, value]
    caps = [f"--fsize={limits.file_bytes}", f"--nofile={limits.open_files}", "--core=0"]
    if cgroup is None:  # the per-user process cap stands in for the cgroup's per-sandbox one
        caps.insert(0, f"--nproc={_nproc_now(uid) + limits.processes}")
    if not gpu:
        caps.append(f"--as={limits.memory_bytes}")
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        raise SandboxUnavailable("prlimit (util-linux) is missing: it sets the sandbox's resource limits")
    inner = [*(_drop(uid) if as_root else []), prlimit, *caps, "--", *argv]
    full = [*args, "--", *inner]
    return cgroup.wrap(full, limits) if cgroup is not None else full


def _file_system(scratch: Path, site: Path, tmp_bytes: int, gpu: bool) -> list[str]:
    """bwrap's mounts: a private /tmp, the system and Python read-only, the site, the scratch, the GPU's nodes."""
    # Empty /tmp and /home first: a Python (a venv) that lives under them is bound on top below. Mounted
    # after the binds, the tmpfs would hide a course checked out in /tmp or in a home folder, and every
    # submission would fail to start (found by CI on a clone in /tmp/ci).
    args = ["--perms", "1777", "--size", str(tmp_bytes), "--tmpfs", "/tmp", "--tmpfs", "/home"]  # /tmp: the uid's
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"):
        if Path(path).exists():
            args += ["--ro-bind", path, path] if not Path(path).is_symlink() else ["--symlink", os.readlink(path), path]
    args += ["--perms", "0755", "--dir", "/etc"]
    for name in ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    prefixes = sorted(p for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).resolve().parents[1])}
                      if p and Path(p).exists() and not any(p.startswith(q + "/") or p == q
                                                            for q in ("/usr", "/bin", "/lib", "/opt")))
    # the folders above a bound prefix (and /sandbox) are made traversable: bwrap, run by root, makes them 0700,
    # which the unprivileged uid could not pass (a Python under /root/.pyenv)
    made: list[str] = []
    for target in [*prefixes, "/sandbox/site"]:
        for parent in reversed(Path(target).parents[:-1]):
            if str(parent) not in made and str(parent) not in ("/tmp", "/home"):
                made.append(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
    for prefix in prefixes:
        args += ["--ro-bind", prefix, prefix]
    args += ["--dev", "/dev", "--proc", "/proc",
             "--ro-bind", str(site), "/sandbox/site", "--bind", str(scratch), INSIDE_HOME, "--chdir", INSIDE_HOME]
    args += ["--ro-bind", "/sys", "/sys"]  # CPU topology for OpenMP/torch threads, GPU discovery; read-only
    for name, where in ((HOSTS_FILE, "/etc/hosts"), (PASSWD_FILE, "/etc/passwd"), (GROUP_FILE, "/etc/group")):
        if (site / name).is_file():
            args += ["--ro-bind", str(site / name), where]
    if gpu:
        for node in [*gpu_nodes(), *(p for p in ("/dev/dri",) if Path(p).exists())]:
            args += ["--dev-bind", node, node]
    return args


def _environment(uid: int, env: dict[str, str] | None) -> dict[str, str]:
    """The sandbox's whole environment: every cache in its private /tmp, torch.compile in-process (no compile
    workers for the census to take on trust), the slot's GPU and threads, then ``env``."""
    variables = {
        "HOME": INSIDE_HOME, "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": "/sandbox/site", "PYTHONNOUSERSITE": "1", "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg",
        "TMPDIR": "/tmp", "JUPYTER_RUNTIME_DIR": "/tmp/jupyter-runtime", "JUPYTER_PLATFORM_DIRS": "1",
        "IPYTHONDIR": "/tmp/ipython", "MPLCONFIGDIR": "/tmp/mpl", "TRITON_CACHE_DIR": "/tmp/triton",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/inductor", "XDG_CACHE_HOME": "/tmp/cache", "CUDA_CACHE_PATH": "/tmp/nv",
        "TRITON_HOME": "/tmp/triton-home", "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "USER": "grader" if uid == CLEAN_UID else "student",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1", "LANG": "C.UTF-8",
        "TORCH_CPP_LOG_LEVEL": "ERROR",  # c10d warns on stderr that it cannot name the sandbox (stderr costs a cell)
    }
    for key in ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES", "MLSYS_FAKE_TIMER", "OMP_NUM_THREADS"):
        if key in os.environ:
            variables[key] = os.environ[key]
    variables.update(env or {})
    return variables
