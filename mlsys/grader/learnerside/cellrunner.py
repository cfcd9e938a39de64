"""Run a notebook cell by cell inside the sandbox and stream each executed cell to the grader.

``python -m mlsys.grader.learnerside.cellrunner`` reads one JSON job on stdin::

    {"notebook": "lab.ipynb", "skip": [indices not to run], "timeout": 600, "interrupt_on_timeout": true,
     "startup_timeout": 120, "error_on_timeout": {...}, "nonce": "..."}

and writes one line per executed code cell, ``<nonce> {"index": i, "outputs": [...], "execution_count": n}``,
then ``<nonce> {"done": true, "kernel_died": i | null}``, to its **original** standard output.
Before the kernel starts, that output is moved to a private descriptor, standard input, output and
error are pointed at ``/dev/null`` and the process makes itself non-dumpable, so code in the kernel
(the same user id, without capabilities) can neither write forged lines into the stream nor open
this process's descriptors through ``/proc``. A cell's result is sent as soon as it finishes, so a
kernel that dies, or a sandbox killed at its time limit, loses only the cells after it.

A hang costs its own cell only: when the kernel was ended by :mod:`mlsys.labkit.watchdog` (a GPU
kernel that never finished, the message holds :data:`mlsys.labkit.watchdog.MARK`), or no longer
answers 10 s after a cell ran past its time limit (then it is ended here), a fresh kernel re-runs the
cells before that one, outputs discarded, and the run goes on (at most :data:`MAX_RESTARTS` times).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from mlsys.runtime.notebook import error_output
from mlsys.runtime.processes import private_stdout

DIED = "the kernel died while running this cell (a crash such as an out-of-bounds access, os._exit or running out of memory)"
NOT_RUN = "not run: the kernel died in an earlier cell ({where}); cells graded before it keep their points"
RESTARTED = ("the kernel was ended in this cell because a GPU kernel hung (the message above); the grader started a "
             "fresh kernel, ran the cells before this one again and went on: only this cell's points are lost")
MAX_RESTARTS = 3
"""Hung cells after which the grader stops restarting the kernel (each restart re-runs the cells before)."""
KERNEL_START_TRIES = 3
"""Kernels started before the grader gives up on a notebook: a kernel that does not answer within the
start-up limit (a loaded grading machine) is shut down and a fresh one started; no learner code has run yet."""


def start_kernel(client: Any, tries: int = KERNEL_START_TRIES) -> int:
    """Start ``client``'s kernel and its channels, trying ``tries`` times; returns the tries it took.

    Only the start is retried (nothing of the notebook has run in that kernel), so a retry costs no cell. The
    last failure is raised, and the caller reports it as the notebook's fatal error."""
    for attempt in range(1, tries + 1):
        try:
            if client.km is None:
                client.km = client.create_kernel_manager()
            if not client.km.has_kernel:
                client.start_new_kernel()
            if client.kc is None:
                client.start_new_kernel_client()
            return attempt
        except Exception:
            if attempt == tries:
                raise
            try:  # nbclient cleans up after a failed client start; a failed kernel start may leave the kernel
                client._cleanup_kernel()
            except Exception:  # noqa: BLE001 - already gone
                pass
            client.km = client.kc = None
    raise ValueError(f"tries must be at least 1, got {tries}")


def _hung(cell: Any) -> bool:
    """Whether the cell's outputs hold the watchdog's message (:data:`mlsys.labkit.watchdog.MARK`)."""
    from mlsys.labkit.watchdog import MARK

    return any(MARK in str(o.get("text", "")) + str(o.get("evalue", "")) for o in cell.get("outputs", []))


STUCK = ("GPU kernel hung, or a loop that ignores interrupts: the cell ran past the per-cell time limit of "
         "{limit:g} s and the kernel no longer answers after the interrupt (a GPU kernel that never finishes cannot "
         "be interrupted), so the grader ended it\n")


def _stuck(client: Any, wait: float = 10.0) -> bool:
    """After a cell timed out: True (and the kernel is ended) if the kernel does not answer within ``wait`` s."""
    from jupyter_core.utils import run_sync

    try:
        run_sync(client.kc.wait_for_ready)(timeout=wait)
        return False
    except RuntimeError:
        run_sync(client.km.shutdown_kernel)(now=True)
        return True


def _replay(client: Any, nb: Any, indices: list[int], nbformat: Any) -> None:
    """Run the cells ``indices`` again in a fresh kernel, outputs discarded: the state later cells need.

    Each cell runs as a copy, so the outputs already sent for it stand; a cell that fails now fails
    quietly (its own outcome was recorded the first time)."""
    for i in indices:
        copy = nbformat.from_dict(dict(nb.cells[i], outputs=[]))
        try:
            client.execute_cell(copy, i)
        except Exception as exc:  # noqa: BLE001 - DeadKernelError included: the next cell's run reports it
            if type(exc).__name__ == "DeadKernelError":
                raise


def _fresh_random() -> None:
    """Seed the grader's global random generators (torch's, NumPy's, Python's) from the OS before a test cell.

    The course cells the grader ran before it may seed them (``torch.manual_seed(0)``), and the learner's kernel
    ran the same cells: without this, an answer cell could replay the draws and cache the expected results of
    every test input taken from them."""
    seed = int.from_bytes(os.urandom(8), "little")
    import random

    random.seed(seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(seed % 2**32)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed % 2**63)


class _Run:
    """One notebook's run: its client and kernel, the grader's side of the test cells, and what each cell did.

    Cells run in order; a test cell runs here (:mod:`mlsys.grader.learnerside.testcells`), an answer cell in the
    learner's kernel. A kernel that died in a cell costs the cells after it (:data:`NOT_RUN`); one a hung GPU kernel
    ended is replaced by a fresh one that re-runs the cells before (at most :data:`MAX_RESTARTS` times)."""

    def __init__(self, job: dict[str, Any], emit: Any, nbformat: Any, NotebookClient: Any, template: Any = None) -> None:
        self.emit, self.nbformat = emit, nbformat
        self.nb = nbformat.read(job["notebook"], as_version=4)
        os.remove(job["notebook"])  # the restored hidden tests are not left on disk for the answer cells to read
        skip = set(job.get("skip", []))
        self.in_grader = {int(i) for i in job.get("grader_cells", [])}  # test cells run here, not in the kernel
        self.client = _client(NotebookClient, self.nb, job, template)
        self.client.on_cell_executed = self._on_executed
        self.status: dict[int, str] = {}
        self.died: int | None = None
        self.limit = float(job.get("timeout") or 600)
        self.course: dict[str, Any] | None = None
        self.rpc: Any = None
        self.grader_only: frozenset[str] = frozenset()
        self.course_cells = [c for c in job.get("course_cells", []) if isinstance(c, dict)]
        self.test_order = [str(t) for t in job.get("test_order", [])]  # the instructor notebook's test cells, in order
        if self.in_grader:
            from mlsys.grader.learnerside import testcells

            self.course, self.rpc = _grader(self.nb, job, self.client, nbformat, self.in_grader)
            self.grader_only = testcells.grader_only_names([str(c.get("source", "")) for c in self.course_cells])
        self.learner_names = frozenset(str(n) for n in job.get("answer_names", []))
        self.census = self._census() if job.get("census") and self.in_grader else None
        self.order = [i for i, c in enumerate(self.nb.cells) if c.cell_type == "code" and i not in skip]
        self.lost: list[int] = []  # cells in which a kernel died: each costs its own points only (see _replay)
        self.pos = 0

    def _on_executed(self, cell: Any, cell_index: int, execute_reply: dict[str, Any], **_: Any) -> None:
        """nbclient's hook: the reply's status kept; an error whose traceback was hidden (a custom exception
        handler, a cleared output) still costs the cell."""
        content = (execute_reply or {}).get("content", {})
        self.status[cell_index] = str(content.get("status", "unknown"))
        if content.get("status") == "error" and not any(o.get("output_type") == "error" for o in cell.outputs):
            ename = content.get("ename") or "Error"
            why = ("the cell ran past the per-cell time limit and did not stop when interrupted"
                   if ename == "CellTimeoutError" else f"{content.get('evalue', '')} (the cell raised; its traceback was hidden)")
            cell.outputs.append(self.nbformat.from_dict(error_output(ename, why)))

    def _census(self) -> Any:
        """The census of the sandbox's own PID namespace (every process it holds is ours to see), started."""
        from mlsys.grader.learnerside.census import Census

        return Census(lambda p, test: self.emit({"stranger": {"pid": p.pid, "ppid": p.ppid, "cmd": p.cmd[:160],
                                                              "exe": os.path.basename(p.exe), "test": test}})).start()

    def kernel_pid(self) -> int | None:
        try:
            return int(self.client.km.provisioner.pid)
        except (AttributeError, TypeError, ValueError):
            return None

    def run_course_cells(self, grade_id: str | None) -> None:
        """The course cells the grader runs itself, up to the test cell ``grade_id`` (outputs discarded:
        the kernel ran the same cells for the learner; a failure here shows in the tests that need them)."""
        from mlsys.grader.learnerside import testcells

        upto = self.test_order.index(grade_id) if grade_id in self.test_order else len(self.test_order)
        while self.course_cells:
            before = self.course_cells[0].get("before")
            if before not in self.test_order or self.test_order.index(before) > upto:
                return
            testcells.run_test_cell(str(self.course_cells.pop(0).get("source", "")), self.course, self.rpc,
                                    grader_only=self.grader_only, learner_names=self.learner_names,
                                    filename="<course cell>")

    def run_all(self) -> None:
        """Every cell, in kernels started one after another (a fresh one after a hung GPU kernel)."""
        while self.pos < len(self.order):
            with _kernel(self.client):
                if self.census is not None:
                    self.census.cell()  # a fresh kernel: the cells before are run again
                if self.lost:
                    _replay(self.client, self.nb, [i for i in self.order[:self.pos]
                                                   if i not in self.lost and i not in self.in_grader], self.nbformat)
                for index in self.order[self.pos:]:
                    self.pos += 1
                    if self._cell(index):
                        break  # a fresh kernel goes on after this cell

    def _cell(self, index: int) -> bool:
        """Run cell ``index`` and send its outcome; True where its kernel was ended and a fresh one must go on."""
        cell = self.nb.cells[index]
        if self.died is not None:
            self.emit({"index": index, "execution_count": None,
                       "outputs": [error_output("KernelDied", NOT_RUN.format(where=f"cell {self.died}"))]})
            return False
        grader_side = index in self.in_grader
        dead = self._test_cell(cell) if grader_side else self._answer_cell(cell, index)
        restart = dead and _hung(cell) and len(self.lost) < MAX_RESTARTS
        if dead and (restart or not grader_side):
            cell.outputs.append(self.nbformat.from_dict(error_output("KernelDied", RESTARTED if restart else DIED)))
        self.emit({"index": index, "outputs": cell.outputs,
                   "execution_count": None if grader_side else cell.get("execution_count"),
                   "status": "ok" if grader_side else self.status.get(index, "no reply")})
        if restart:
            self.lost.append(index)
            return True
        if dead:
            self.died = index
        return False

    def _test_cell(self, cell: Any) -> bool:
        """A test cell, run here on fresh random generators after the course cells it needs; True where the
        learner's kernel died under it."""
        from mlsys.grader.learnerside import testcells

        gid = str((cell.metadata.get("nbgrader", {}) or {}).get("grade_id", ""))
        if self.census is not None:
            self.census.test(gid, self.kernel_pid())
        self.run_course_cells(gid)
        _fresh_random()
        cell.outputs = [self.nbformat.from_dict(o) for o in testcells.run_test_cell(
            cell.source, self.course, self.rpc, grader_only=self.grader_only, learner_names=self.learner_names)]
        return any(o.get("ename") == "DeadKernelError" for o in cell.outputs)

    def _answer_cell(self, cell: Any, index: int) -> bool:
        if self.census is not None:
            self.census.cell()
        return _run_answer_cell(self.client, cell, index, self.limit, self.nbformat)


def main() -> int:
    """The job from stdin; one line per executed cell, then ``done``, on the private descriptor (module docstring).

    ``--preload MODULES`` (comma-separated, maybe none: ``torch`` where the course imports it): kernels are forked
    (:mod:`.kernelfork`), from a template forked after those imports and before the job is read."""
    from mlsys.grader import fontcache

    fontcache.prime(Path(__file__).resolve().parents[3], os.environ.get("MPLCONFIGDIR"))  # the site: before any kernel
    template = _template(sys.argv[1:])
    job = json.loads(sys.stdin.read())
    out = private_stdout()
    nonce = job["nonce"]
    lock = threading.Lock()  # the census thread emits too

    def emit(obj: dict[str, Any]) -> None:
        with lock:
            out.write(f"{nonce} {json.dumps(obj)}\n")
            out.flush()

    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    run = _Run(job, emit, nbformat, NotebookClient, template)
    try:
        run.run_all()
    except DeadKernelError:
        run.died = -1 if run.died is None else run.died
    except Exception as exc:  # the kernel did not start, say why
        emit({"fatal": f"{type(exc).__name__}: {str(exc)[:500]}"})
    if run.census is not None:
        run.census.stop()
    emit({"done": True, "kernel_died": run.died})
    return 0


def _template(args: list[str]) -> Any:
    """The kernels' template (:class:`.kernelfork.Template`) where ``args`` ask for one and forking is possible."""
    from mlsys.grader.learnerside import kernelfork

    if args[:1] != ["--preload"] or len(args) != 2 or not kernelfork.may_fork():
        return None
    return kernelfork.Template.start([m for m in args[1].split(",") if m])


def _kernel(client: Any) -> Any:
    """nbclient's ``setup_kernel`` block over a kernel :func:`start_kernel` started (retried if it never answered):
    the block finds it running, and shuts it down at its end."""
    start_kernel(client)
    return client.setup_kernel()


def _client(NotebookClient: Any, nb: Any, job: dict[str, Any], template: Any = None) -> Any:
    """The notebook client that runs the answer cells in a kernel: the job's time limits, errors kept as outputs,
    no history file, the working folder as the notebook's path; its kernels forked from ``template`` if one is given
    (:mod:`.kernelfork`)."""
    forked: dict[str, Any] = {}
    if template is not None:
        from mlsys.grader.learnerside import kernelfork

        forked["kernel_manager_class"] = kernelfork.manager_class(template)
    return NotebookClient(
        nb, **forked, timeout=job.get("timeout", 600), startup_timeout=job.get("startup_timeout", 120),
        interrupt_on_timeout=job.get("interrupt_on_timeout", True), allow_errors=True, kernel_name="python3",
        error_on_timeout=job.get("error_on_timeout"), extra_arguments=["--HistoryManager.hist_file=:memory:"],
        resources={"metadata": {"path": os.getcwd()}}, record_timing=False,
    )


def _run_answer_cell(client: Any, cell: Any, index: int, limit: float, nbformat: Any) -> bool:
    """Run one cell in the learner's kernel; a cell past the per-cell limit gets a CellTimeoutError output (if
    nbclient gave none) and, if the kernel stays stuck, the STUCK note. Returns whether the kernel is dead; an
    error of nbclient's own costs this cell, not the notebook."""
    from nbclient.exceptions import DeadKernelError

    dead = False
    started = time.monotonic()
    try:
        client.execute_cell(cell, index)
        if time.monotonic() - started >= limit and not any(
                o.get("output_type") == "error" and o.get("ename") == "CellTimeoutError" for o in cell.outputs):
            cell.outputs.append(nbformat.from_dict(error_output(
                "CellTimeoutError", f"the cell ran past the per-cell time limit of {limit:g} s and was interrupted")))
        if time.monotonic() - started >= limit and _stuck(client):
            cell.outputs.append(nbformat.from_dict({"output_type": "stream", "name": "stdout",
                                                    "text": STUCK.format(limit=limit)}))
            dead = True
    except DeadKernelError:
        dead = True
    except Exception as exc:  # nbclient's own failures cost this cell, not the notebook
        cell.outputs.append(nbformat.from_dict(error_output(type(exc).__name__, str(exc)[:500])))
    return dead


def _grader(nb: Any, job: dict[str, Any], client: Any, nbformat: Any, in_grader: set[int]) -> tuple[dict[str, Any], Any]:
    """The grader's side of the test cells: the course's imports (from the instructor notebook, sent by
    the grading process), executed here, and a channel to the kernel that knows where each of the
    learner's functions is defined in the notebook as submitted (see :mod:`mlsys.grader.learnerside.testcells`)."""
    import ast

    from mlsys.grader.learnerside import testcells
    from mlsys.labkit import grading

    course: dict[str, Any] = {"__name__": "__grader__"}
    for line in str(job.get("course_imports", "")).splitlines():
        try:
            exec(compile(line, "<course imports>", "exec"), course)  # noqa: S102 - the instructor notebook's imports
        except Exception:  # noqa: BLE001 - an import this machine lacks: a test that needs it fails by itself
            continue
    answers = [c.source for i, c in enumerate(nb.cells) if c.cell_type == "code" and i not in in_grader]
    defs, module = testcells.answer_definitions(answers)
    scope = {k: v for k, v in course.items() if not k.startswith("__")}
    scope.update(grading._local_imports(module))
    static = {name: (ast.Module(body=[node], type_ignores=[]), scope) for name, node in defs.items()}
    return course, testcells.Rpc(client, nbformat, static=static)


if __name__ == "__main__":
    sys.exit(main())
