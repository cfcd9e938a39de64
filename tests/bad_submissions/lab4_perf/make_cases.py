"""Makes tests/bad_submissions/lab4_perf/*.nb.json: Lab 4 submissions that attack its performance cell.

``python tests/bad_submissions/lab4_perf/make_cases.py .`` (after Lab 4 changes). Each case is the
instructor notebook's setup, imports and ring cells (solution markers removed), with the ring replaced
or a cell appended; only the performance verdict is graded from these (the trusted process, fake timer),
so the rest of the lab's answers are left out to keep each grading short.
"""
import json
import re
import sys
from pathlib import Path

repo = Path(sys.argv[1])
src = json.loads((repo / "labs/source/lab4_collectives/lab4_collectives.ipynb").read_text())
cells = {c["metadata"].get("nbgrader", {}).get("grade_id"): c for c in src["cells"] if c["cell_type"] == "code"}


def text(gid: str) -> str:
    s = "".join(cells[gid]["source"])
    return re.sub(r"[ \t]*### (BEGIN|END) SOLUTION\n", "", s)


RING_HEAD = '''def ring_allreduce(tensor):
    """Sum `tensor` over all processes of the default group, in place, with a ring; returns `tensor`."""
'''
CASES = {
    # the instructor's ring, as handed in: full credit under the fake timer
    "honest": None,
    # the library's all-reduce through the process group object, not the dist.all_reduce name
    "world_group_allreduce": RING_HEAD + '''    dist.group.WORLD.allreduce(tensor).wait()
    return tensor
''',
    # the library's all-reduce below the dispatcher: gloo's backend object called directly
    "backend_allreduce": RING_HEAD + '''    backend = dist.group.WORLD._get_backend(tensor.device)
    backend.allreduce([tensor]).wait()
    return tensor
''',
    # the honest ring once per shape, then the cached sum copied out
    "cache_by_shape": "APPEND" + '''_honest_ring = ring_allreduce
_CACHE = {}


def ring_allreduce(tensor):
    key = (tuple(tensor.shape), tensor.dtype)
    if key not in _CACHE:
        _CACHE[key] = _honest_ring(tensor).clone()
    tensor.copy_(_CACHE[key])
    return tensor
''',
    # the notebook's old perf cell is gone: rebinding `grading` buys nothing, and the library ring is seen
    "rebind_grading": RING_HEAD + '''    dist.all_reduce(tensor)
    return tensor


class _Everything:
    NOT_GRADED = ""

    def performance_tier(self, *args, **kwargs):
        return 1.0

    def award(self, points, credit):
        return points

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


grading = _Everything()
''',
    # every clock of the learner's processes stopped, and the course's timer rewritten: an honest ring keeps
    # exactly its honest share (the verdict's clock is in another process)
    "patch_timers": "APPEND" + '''import time

import mlsys.bench.timing as _timing

time.perf_counter = lambda: 0.0
time.monotonic = lambda: 0.0
_timing.time_fn = lambda *args, **kwargs: None
''',
    # returns at once; a thread finishes the exchange later (caught by the fingerprint taken at "done")
    "finish_after_return": "APPEND" + '''import threading

_honest_ring = ring_allreduce


def ring_allreduce(tensor):
    done = threading.Event()
    copy = tensor.clone()

    def later():
        _honest_ring(copy)
        tensor.copy_(copy)
        done.set()
    threading.Thread(target=later, daemon=True).start()
    return tensor
''',
}
out = repo / "tests/bad_submissions/lab4_perf"
for name, change in CASES.items():
    sources = [text("setup"), text("imports"), text("ring")]
    if change is not None and change.startswith("APPEND"):
        sources.append(change.removeprefix("APPEND"))
    elif change is not None:
        sources[2] = text("ring").split("def ring_allreduce(tensor):")[0] + change
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                     "source": s.splitlines(True)} for i, s in enumerate(sources)],
          "metadata": src["metadata"], "nbformat": 4, "nbformat_minor": 5}
    (out / f"{name}.nb.json").write_text(json.dumps(nb, indent=1) + "\n")
    print("wrote", name)
