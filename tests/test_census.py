"""The grader's census of the sandbox's processes (mlsys.grader.learnerside.census), on a hand-made /proc.

The process trees below are written out by hand: PID 1 (the sandbox's init) -> 2 (the grader, "me") ->
3 (the learner's kernel) -> children. Which of them is a stranger follows from the module's rules, read
off each tree, not from running the code. tests/bad_submissions/helper_process.nb.json checks the
same in a real sandbox (a helper forked by an answer cell is flagged).
"""

from __future__ import annotations

import os
from pathlib import Path

from mlsys.grader.learnerside import census as c
from mlsys.grader.teach import _stranger_flags


def _proc(root: Path, pid: int, ppid: int, argv: list[str], exe: str | None = None, state: str = "S") -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} (odd name) with) {state} {ppid} {pid} 0 0\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    if exe is not None:
        os.symlink(exe, d / "exe")


def _tree(root: Path) -> None:
    _proc(root, 1, 0, ["bwrap"], "/usr/bin/bwrap")
    _proc(root, 2, 1, ["python", "-m", "mlsys.grader.learnerside.cellrunner"], "/usr/bin/python3.11")
    _proc(root, 3, 2, ["python", "-m", "ipykernel_launcher"], "/usr/bin/python3.11")


def _census(root: Path) -> tuple[c.Census, list[tuple[int, str]]]:
    seen: list[tuple[int, str]] = []
    cen = c.Census(lambda p, test: seen.append((p.pid, test)), proc=root)
    cen.me = 2
    return cen, seen


def test_processes_reads_parent_state_and_arguments(tmp_path):
    _tree(tmp_path)
    _proc(tmp_path, 9, 3, ["gone"], state="Z")  # a zombie is not alive
    (tmp_path / "self").mkdir()  # not a PID
    procs = c.processes(tmp_path)
    assert sorted(procs) == [1, 2, 3]
    assert procs[3].ppid == 2 and procs[3].argv == ("python", "-m", "ipykernel_launcher")
    assert procs[3].exe == "/usr/bin/python3.11"


def test_a_helper_alive_when_a_test_starts_is_reported_once_after_two_looks(tmp_path):
    _tree(tmp_path)
    _proc(tmp_path, 4, 3, ["python", "-m", "ipykernel_launcher"], "/usr/bin/python3.11")  # forked by an answer cell
    cen, seen = _census(tmp_path)
    cen.test("test_double", kernel=3)  # first look: pending
    assert seen == []
    cen.look()
    cen.look()
    assert seen == [(4, "test_double")]


def test_a_checks_own_child_is_allowed_but_its_child_and_orphans_are_not(tmp_path):
    _tree(tmp_path)
    cen, seen = _census(tmp_path)
    cen.test("test_matmul", kernel=3)
    _proc(tmp_path, 5, 3, ["python", "-m", "ipykernel_launcher"], "/usr/bin/python3.11")  # the guarded call's child
    _proc(tmp_path, 6, 5, ["python", "-m", "ipykernel_launcher"], "/usr/bin/python3.11")  # forked inside the call
    _proc(tmp_path, 7, 1, ["sleep", "100"], "/usr/bin/sleep")  # double-forked: re-parented to init
    cen.look()
    cen.look()
    assert sorted(seen) == [(6, "test_matmul"), (7, "test_matmul")]


def test_a_kernel_forked_from_the_template_is_the_kernel_and_the_templates_other_children_are_not(tmp_path):
    """A forked kernel's parent is the template (mlsys.grader.learnerside.kernelfork), a child of the grader: the
    kernel is allowed as the kernel, and its own children by the kernel's rule; nothing else of the template's is."""
    _proc(tmp_path, 1, 0, ["bwrap"], "/usr/bin/bwrap")
    _proc(tmp_path, 2, 1, ["python", "-m", "mlsys.grader.learnerside.cellrunner"], "/usr/bin/python3.11")
    _proc(tmp_path, 3, 2, ["python", "-m", "mlsys.grader.learnerside.cellrunner"], "/usr/bin/python3.11")  # template
    _proc(tmp_path, 4, 3, ["python", "-m", "mlsys.grader.learnerside.cellrunner"], "/usr/bin/python3.11")  # kernel
    _proc(tmp_path, 5, 3, ["python", "-m", "mlsys.grader.learnerside.cellrunner"], "/usr/bin/python3.11")  # other
    cen, seen = _census(tmp_path)
    cen.test("test_forked", kernel=4)
    _proc(tmp_path, 6, 4, ["python", "helper.py"], "/usr/bin/python3.11")  # the guarded call's child
    cen.look()
    cen.look()
    assert seen == [(5, "test_forked")]


def test_compilers_are_harmless_by_what_runs_and_no_name_buys_an_exemption(tmp_path):
    """A compiler is known by its executable (a link the kernel sets); a process whose arguments name torch's
    compile worker is counted like any other (round 4: a helper started as
    ``python helper.py torch/_inductor/compile_worker/__main__.py`` did a test's work unseen)."""
    _tree(tmp_path)
    worker = "/venv/lib/python3.11/site-packages/torch/_inductor/compile_worker/__main__.py"
    _proc(tmp_path, 4, 3, ["/venv/bin/python", worker, "--workers=2"], "/usr/bin/python3.11")
    _proc(tmp_path, 5, 4, ["/venv/bin/python", worker, "--workers=2"], "/usr/bin/python3.11")
    _proc(tmp_path, 6, 3, ["ptxas", "-arch=sm_90"], "/venv/lib/python3.11/site-packages/triton/backends/nvidia/bin/ptxas")
    _proc(tmp_path, 7, 3, ["/venv/bin/python", "-c", "work()", worker], "/usr/bin/python3.11")
    _proc(tmp_path, 8, 3, ["ptxas"], None)  # its executable cannot be read: not taken for a compiler
    cen, seen = _census(tmp_path)
    cen.test("test_fused", kernel=3)
    cen.look()
    cen.look()
    assert sorted(seen) == [(4, "test_fused"), (5, "test_fused"), (7, "test_fused"), (8, "test_fused")]


def test_nothing_is_judged_while_the_kernel_runs_a_cell(tmp_path):
    _tree(tmp_path)
    cen, seen = _census(tmp_path)
    cen.test("test_a", kernel=3)
    cen.cell()  # a course cell starts ranks of its own
    _proc(tmp_path, 4, 3, ["rank"], "/usr/bin/python3.11")
    cen.look()
    cen.look()
    assert seen == []
    os.remove(tmp_path / "4" / "stat")  # the ranks ended with their cell
    cen.test("test_b", kernel=3)
    cen.look()
    assert seen == []


def test_strangers_become_one_line_process_flags():
    report = {"strangers": [{"pid": 4, "ppid": 3, "cmd": "python -c import time\nwhile 1; pass", "test": "test_x"}] * 5}
    flags = _stranger_flags(report, limit=2)
    assert flags[0] == ("process: pid 4 (parent 3, python -c import time while 1, pass) was running while the grader "
                        "ran test_x (seen by the grader)")
    assert flags[2] == "process: ... 3 more running while test cells ran" and len(flags) == 3
