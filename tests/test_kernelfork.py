"""Kernels forked from a template that read nothing of the grading (mlsys/grader/learnerside/kernelfork.py).

The driver below does what the cell runner does: it forks the template first, then reads a secret (the job), then
runs cells in kernels forked from the template through nbclient. A kernel searches its own memory for the secret."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mlsys.grader.learnerside import kernelfork

DRIVER = r'''
import json, os, re, sys
from mlsys.grader.learnerside import kernelfork

template = kernelfork.Template.start([])
secret = sys.stdin.readline().strip()  # read after the fork, as the cell runner reads its job
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
from jupyter_core.utils import run_sync

SCAN = """
import re
def _scan():
    pattern = re.compile(rb"SECRET-[0-9a-f]{32}")
    found = 0
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("rw"):
                continue
            lo, hi = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(lo)
                found += len(pattern.findall(mem.read(hi - lo)))
            except (OSError, ValueError, OverflowError):
                continue
    return found
"""
exec(SCAN)
cells = [SCAN + "print('found', _scan())",
         "import os, subprocess, sys\nprint(json_out := __import__('json').dumps({'sid': os.getsid(0) == os.getpid(), "
         "'cwd': os.getcwd(), 'env': os.environ.get('KF_TEST'), 'true': subprocess.run(['true']).returncode, "
         "'argv0': sys.argv[0].rsplit('/', 1)[-1], 'pid': os.getpid()}))",
         "import time\ntime.sleep(60)",
         "print('after the interrupt')",
         "import os\nos._exit(3)"]
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
os.makedirs(sys.argv[1], exist_ok=True)
os.environ["KF_TEST"] = "from the runner"
# the template's end of its socket to the runner (the template holds 0-2 and that one): no kernel may hold it
TEMPLATE_SOCKET = [os.stat(f"/proc/{template.pid}/fd/{fd}").st_ino for fd in os.listdir(f"/proc/{template.pid}/fd")
                   if os.readlink(f"/proc/{template.pid}/fd/{fd}").startswith("socket:")]
cells.insert(2, "import os\nprint('held', sorted(int(fd) for fd in os.listdir('/proc/self/fd') "
             f"if os.path.exists(f'/proc/self/fd/{{fd}}') and os.stat(f'/proc/self/fd/{{fd}}').st_ino in {TEMPLATE_SOCKET!r}))")
nb.cells.insert(2, nbformat.v4.new_code_cell(cells[2]))
client = NotebookClient(nb, timeout=4, interrupt_on_timeout=True, allow_errors=True, kernel_name="python3",
                        kernel_manager_class=kernelfork.manager_class(template),
                        resources={"metadata": {"path": sys.argv[1]}})
out = {"runner_found": _scan(), "runner_pid": os.getpid(), "template_pid": template.pid}
with client.setup_kernel():
    out["forked"] = isinstance(client.km.provisioner.process, kernelfork.ForkedKernel)
    for i, cell in enumerate(nb.cells):
        try:
            client.execute_cell(cell, i)
        except DeadKernelError:
            out["died"] = i
            break
    out["alive_after_exit"] = run_sync(client.km.is_alive)()
client2 = NotebookClient(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('second')")]),
                         kernel_name="python3", kernel_manager_class=kernelfork.manager_class(template), timeout=30)
client2.execute()
out["second"] = client2.nb.cells[0].outputs[0]["text"]
out["outputs"] = [[o.get("text", o.get("ename", "")) for o in c.outputs] for c in nb.cells]
out["template_socket"] = TEMPLATE_SOCKET
print("RESULT", json.dumps(out))
'''


@pytest.mark.slow
def test_a_forked_kernel_holds_nothing_read_after_the_fork_and_behaves_as_a_started_one(tmp_path):
    secret = "SECRET-" + os.urandom(16).hex()
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path / "work")], input=secret + "\n",
                          capture_output=True, text=True, timeout=120)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"driver failed: {proc.stderr[-2000:]}"
    out = json.loads(lines[0].removeprefix("RESULT "))
    assert out["runner_found"] >= 1  # the scan finds the secret where it was read
    assert out["forked"]
    assert out["outputs"][0] == ["found 0\n"]  # ... and not in the kernel
    facts = json.loads(out["outputs"][1][0])
    assert facts == {"sid": True, "cwd": str(tmp_path / "work"), "env": "from the runner", "true": 0,
                     "argv0": "ipykernel_launcher.py", "pid": facts["pid"]}
    assert facts["pid"] not in (out["runner_pid"], out["template_pid"])  # a process of its own
    assert len(out["template_socket"]) == 1 and out["outputs"][2] == ["held []\n"]  # nothing of the template's
    assert out["outputs"][3] == ["KeyboardInterrupt"]  # interrupted at the time limit...
    assert out["outputs"][4] == ["after the interrupt\n"]  # ... and the kernel went on
    assert out["died"] == 5 and out["alive_after_exit"] is False  # a kernel that exits is seen to be gone
    assert out["second"] == "second\n"  # the template forks the next kernel


def test_preload_names_only_what_the_course_imports_and_may_be_preloaded():
    assert kernelfork.preload_for("import torch\nimport numpy as np") == ["torch"]
    assert kernelfork.preload_for("import torch.nn.functional as F") == ["torch"]
    assert kernelfork.preload_for("from torch.profiler import profile") == ["torch"]
    assert kernelfork.preload_for("import math, torch") == ["torch"]
    assert kernelfork.preload_for("import torchvision\nimport triton\nimport matplotlib.pyplot as plt") == []
    assert kernelfork.preload_for("") == []
    with pytest.raises(ValueError, match="not one of"):
        kernelfork.Template.start(["os"])


def test_a_command_that_is_not_this_pythons_kernel_is_not_forked():
    template = kernelfork.Template(sock=None, pid=0)  # type: ignore[arg-type] - never reached
    assert template.fork(["/usr/bin/python3-other", "-m", "ipykernel_launcher", "-f", "c.json"], {}, "/") is None
    assert template.fork([sys.executable, "-m", "other_kernel", "-f", "c.json"], {}, "/") is None
