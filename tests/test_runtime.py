"""mlsys.runtime: the device switch, the cell reader, the paths and the tree kill (values by hand)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mlsys.runtime import device, notebook, paths, processes


def test_checkout_and_labs_root_are_the_folders_holding_their_config():
    assert (paths.checkout() / "_config.yml").is_file()
    assert (paths.checkout() / "mlsys" / "runtime" / "paths.py").is_file()
    assert (paths.labs_root() / "nbgrader_config.py").is_file()


def test_lab_notebook_source_and_release():
    assert paths.lab_notebook("lab1_roofline") == paths.checkout() / "labs/source/lab1_roofline/lab1_roofline.ipynb"
    assert paths.lab_notebook("lab1_roofline", release=True).parts[-3:] == ("release", "lab1_roofline",
                                                                            "lab1_roofline.ipynb")
    with pytest.raises(FileNotFoundError, match="lab1_roofline"):  # the message lists the labs there are
        paths.lab_notebook("lab9_nothing")


def test_fake_timer_switch(monkeypatch):
    monkeypatch.delenv("MLSYS_FAKE_TIMER", raising=False)
    assert not device.fake_timer()
    monkeypatch.setenv("MLSYS_FAKE_TIMER", "0")
    assert not device.fake_timer()
    monkeypatch.setenv("MLSYS_FAKE_TIMER", "1")
    assert device.fake_timer()


def test_pick_device(monkeypatch):
    with pytest.raises(ValueError, match="'auto', 'cpu' or 'cuda'"):
        device.pick_device("gpu")
    monkeypatch.setattr(device, "has_cuda", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert device.pick_device("auto") == "cpu"
    import os

    assert os.environ["TRITON_INTERPRET"] == "1"
    with pytest.raises(RuntimeError, match="no CUDA device"):
        device.pick_device("cuda")


def test_cell_source_and_autograded():
    assert notebook.cell_source({"source": ["a = 1\n", "b = 2"]}) == "a = 1\nb = 2"
    assert notebook.cell_source({"source": "x"}) == "x"
    assert notebook.is_autograded({"grade": True, "solution": False, "grade_id": "t"})
    assert not notebook.is_autograded({"grade": True, "solution": True})  # a written answer graded by hand
    assert not notebook.is_autograded({"grade": False, "solution": True})
    assert not notebook.is_autograded({})
    assert not notebook.is_autograded(None)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_tree_kills_grandchildren_in_another_session():
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
            "print(p.pid, flush=True)\ntime.sleep(300)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    grandchild = int(proc.stdout.readline())
    assert grandchild in processes.descendants(proc.pid)
    processes.kill_tree(proc.pid)
    proc.wait(10)
    for _ in range(50):
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild)


def test_live_processes_with_finds_a_process_by_its_command_line_and_not_after_it_ends():
    import subprocess
    import sys

    from mlsys.runtime.processes import live_processes_with

    marker = "mlsys-marker-271828"
    # The child prints once it runs Python, so its command line is the exec'd one (right after fork
    # /proc shows the parent's): on a loaded machine the exec can come a good while after Popen returns.
    proc = subprocess.Popen([sys.executable, "-c", "import time; print(flush=True); time.sleep(30)", marker],
                            stdout=subprocess.PIPE)
    try:
        proc.stdout.readline()
        assert proc.pid in live_processes_with(marker)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert proc.pid not in live_processes_with(marker)


def test_a_lab_notebook_path_that_need_not_exist_yet_is_the_same_layout():

    assert paths.lab_notebook("no_such_lab", must_exist=False) == paths.labs_root() / "source" / "no_such_lab" / "no_such_lab.ipynb"
    with pytest.raises(FileNotFoundError, match="no_such_lab"):
        paths.lab_notebook("no_such_lab")


def test_the_lab_experiments_read_the_instructors_notebooks():
    from mlsys.bench.experiments import lab2_matmul, lab3_fusion, lab5_attention
    from mlsys.runtime.paths import lab_notebook

    for module, lab in ((lab2_matmul, "lab2_tiled_matmul"), (lab3_fusion, "lab3_fusion"), (lab5_attention, "lab5_attention")):
        assert module.NOTEBOOK == lab_notebook(lab)  # exists: the experiments time the kernels learners are shown


def test_a_second_notebook_with_the_same_cell_names_does_not_replace_the_first_ones_source():
    """Triton's interpreter re-reads a kernel's source through linecache at every launch: when a stubbed
    copy of Lab 3 ran after the instructor's (same cell names), the instructor's kernel raised the stub's
    NotImplementedError (a CI failure of test_softmax_odd_shapes, depending on test order)."""
    import inspect

    from mlsys.runtime.notebook import exec_cell

    first, second = {}, {}
    exec_cell("def f():\n    return 1\n", "<same.ipynb:cell>", first)
    exec_cell("def f():\n    raise NotImplementedError()\n", "<same.ipynb:cell>", second)
    assert "return 1" in inspect.getsource(first["f"]) and "NotImplementedError" in inspect.getsource(second["f"])
    assert first["f"]() == 1
    exec_cell("def f():\n    return 1\n", "<same.ipynb:cell>", {})  # the same source again keeps its name
    assert inspect.getsourcefile(first["f"]) == "<same.ipynb:cell>"
