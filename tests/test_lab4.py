"""Lab 4 (collectives by hand): the launcher, the bandwidth helpers, the reference ring, the recorded
H200 figures, the notebook's structure and its bad-submission corpus.

Expected values are worked out by hand in the comments (sums of known per-rank tensors, bandwidths
from sizes and times) or come from an independent source (the H200 datasheet's NVLink figure).
Processes are real gloo processes on the CPU, kept small so the module runs in well under a minute.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from mlsys import Q_, comm, hardware
from mlsys.units import DimensionError

torch = pytest.importorskip("torch")

from mlsys.bench import experiment  # noqa: E402
from mlsys.bench.experiments import _collectives as coll  # noqa: E402
from mlsys.bench.experiments import nccl_allreduce  # noqa: E402
from mlsys.bench.records import load_experiment  # noqa: E402
from mlsys.runtime.launch import LaunchError, LaunchTimeout, launch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "labs" / "source" / "lab4_collectives" / "lab4_collectives.ipynb"
CORPUS = Path(__file__).resolve().parent / "bad_submissions" / "lab4"


# ------------------------------------------------------------------------------ mlsys.comm additions


def test_algorithm_and_bus_bandwidth_by_hand():
    # 1 GiB in 10 ms: algbw = 2**30 / 0.01 = 107.374 GB/s; on 4 GPUs busbw = algbw * 2 * 3 / 4 = 161.061 GB/s
    assert comm.algorithm_bandwidth(2**30, Q_(10, "ms")).to("GB/s").magnitude == pytest.approx(107.3741824)
    assert comm.bus_bandwidth(2**30, Q_(10, "ms"), 4).to("GB/s").magnitude == pytest.approx(161.0612736)
    # p = 2: busbw = algbw; p = 1: nothing moves, busbw 0
    assert comm.bus_bandwidth(1000, Q_(1, "us"), 2).to("byte/s").magnitude == pytest.approx(1e9)
    assert comm.bus_bandwidth(1000, Q_(1, "us"), 1).magnitude == 0
    with pytest.raises(DimensionError):
        comm.algorithm_bandwidth(1000, 0.001)  # a plain number is not a time
    with pytest.raises(ValueError):
        comm.algorithm_bandwidth(1000, Q_(0, "s"))


@pytest.mark.parametrize("p", [2, 3, 8])
def test_fit_recovers_known_latency_and_bandwidth(p):
    # times made from alpha = 7 us per step and 200 GB/s with the textbook ring formula, written out here
    alpha, bw = 7e-6, 200e9
    sizes = [4**k for k in range(3, 15)]
    times = [Q_(2 * (p - 1) * alpha + 2 * (p - 1) / p * n / bw, "s") for n in sizes]
    got_alpha, got_bw = comm.fit_latency_bandwidth(sizes, times, p)
    assert got_alpha.to("s").magnitude == pytest.approx(alpha, rel=1e-9)
    assert got_bw.to("byte/s").magnitude == pytest.approx(bw, rel=1e-9)


def test_fit_rejects_what_it_cannot_fit():
    with pytest.raises(ValueError, match="world_size >= 2"):
        comm.fit_latency_bandwidth([1, 2], [Q_(1, "s"), Q_(2, "s")], 1)
    with pytest.raises(ValueError, match="two distinct"):
        comm.fit_latency_bandwidth([8, 8], [Q_(1, "s"), Q_(2, "s")], 2)
    with pytest.raises(ValueError, match="as many"):
        comm.fit_latency_bandwidth([8, 16], [Q_(1, "s")], 2)
    # noise that makes the intercept negative: clipped to zero latency, bandwidth still positive
    a, b = comm.fit_latency_bandwidth([1000, 2000, 4000], [Q_(0.9e-6, "s"), Q_(2.0e-6, "s"), Q_(4.2e-6, "s")], 2)
    assert a.magnitude >= 0 and b.magnitude > 0


# ------------------------------------------------------------------------------ the launcher


def _rank_and_size(offset):
    import torch.distributed as dist

    return dist.get_rank() + offset, dist.get_world_size()


def _peers_alive_after(pause):
    """Rank 0 returns at once; the others look, ``pause`` seconds later, whether every peer process still runs."""
    import time

    import torch.distributed as dist

    pids = [None] * dist.get_world_size()
    dist.all_gather_object(pids, os.getpid())
    if dist.get_rank() == 0:
        return True
    time.sleep(pause)

    def running(pid):
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
        except FileNotFoundError:
            return False

    return all(running(pid) for pid in pids)


def _raise_on_rank_1():
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ValueError("rank one is unhappy")
    dist.barrier()  # rank 0 waits for a peer that has gone: the launcher must not wait for it
    return "unreachable"


def _both_receive_first():
    import torch.distributed as dist

    t = torch.zeros(4)
    dist.recv(t, (dist.get_rank() + 1) % 2)  # both wait for a message nobody sends
    return t


def _die():
    os._exit(3)


def test_launch_returns_results_in_rank_order():
    assert launch(_rank_and_size, 3, 10, backend="gloo", timeout=60) == [(10, 3), (11, 3), (12, 3)]
    assert launch(_rank_and_size, 1, 0, backend="gloo", timeout=60) == [(0, 1)]


def test_a_rank_that_ends_first_stays_until_its_peers_have_reported():
    """A rank that exits while a peer is still connecting to it or reading from it closes their socket: the peer
    fails with Gloo's "Connection closed by peer" (CI, 2026-12-03, twice; 7 of 160 launches four at a time on the
    2-core machine, 0 of 160 with the ranks leaving together). Rank 0 here has nothing left to do after the
    first collective; its peers find it still running a moment later."""
    assert launch(_peers_alive_after, 3, 0.5, backend="gloo", timeout=60) == [True, True, True]


_GROUP_SUM = """
import sys
from mlsys.runtime.launch import launch

def total(mine):
    import torch, torch.distributed as dist
    t = torch.tensor([float(mine)])
    dist.all_reduce(t)
    return float(t), dist.get_world_size()

k = int(sys.argv[1])
for _ in range(4):
    print(launch(total, 2, 1000 * k, backend="gloo", timeout=60), flush=True)
"""


def test_concurrent_launches_keep_their_groups_apart():
    """Three programs launching two-rank groups at once: each group's all-reduce sums its own two ranks only (a
    port chosen first and bound later, or a store two launches share, would mix groups or fail them)."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    procs = [subprocess.Popen([sys.executable, "-c", _GROUP_SUM, str(k)], cwd=repo, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(repo)}) for k in (1, 2, 3)]
    for k, proc in zip((1, 2, 3), procs, strict=True):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        assert out.split("\n")[:-1] == [str([(2000.0 * k, 2), (2000.0 * k, 2)])] * 4, (k, out, err[-1000:])


def test_launch_reports_the_rank_that_raised():
    with pytest.raises(LaunchError, match=r"(?s)rank 1 of 2 raised.*rank one is unhappy"):
        launch(_raise_on_rank_1, 2, backend="gloo", timeout=60)


def test_launch_stops_a_deadlock_and_says_so():
    with pytest.raises(LaunchError, match="(?i)deadlock|did not finish|timed out"):
        launch(_both_receive_first, 2, backend="gloo", timeout=4)


def test_launch_timeout_names_the_ranks():
    def sleepy():
        import time

        time.sleep(30)

    with pytest.raises(LaunchTimeout, match=r"ranks \[0, 1\] of 2 did not finish within 2 s"):
        launch(sleepy, 2, backend="gloo", timeout=2)


def test_launch_reports_a_dead_rank():
    with pytest.raises(LaunchError, match="died"):
        launch(_die, 2, backend="gloo", timeout=30)


def test_launch_rejects_bad_arguments():
    with pytest.raises(ValueError, match="world_size"):
        launch(_die, 0)
    with pytest.raises(ValueError, match="backend"):
        launch(_die, 2, backend="mpi")
    with pytest.raises(ValueError, match="timeout"):
        launch(_die, 2, backend="gloo", timeout=0)


# ------------------------------------------------------------------------------ the reference ring


@pytest.mark.parametrize("n, parts, expected", [
    (10, 4, [0, 2, 5, 7, 10]),  # 10 * i // 4 for i = 0..4
    (3, 5, [0, 0, 1, 1, 2, 3]),  # fewer elements than parts: some chunks are empty
    (12, 3, [0, 4, 8, 12]),
])
def test_bounds_by_hand(n, parts, expected):
    assert coll.bounds(n, parts) == expected


def _ring_on_known_data(lengths, segments, ngroups):
    import torch.distributed as dist

    r = dist.get_rank()
    groups = [None] + [dist.new_group() for _ in range(ngroups - 1)]
    out = []
    for n in lengths:
        x = torch.arange(n, dtype=torch.float64) * (r + 1)  # rank r holds (r + 1) * [0, 1, ..., n-1]
        coll.ring_allreduce(x, segments, groups)
        out.append(x)
    return out


@pytest.mark.parametrize("p, segments, ngroups", [(1, 1, 1), (2, 1, 1), (3, 2, 1), (4, 4, 2), (3, 8, 4)])
def test_reference_ring_sums_by_hand(p, segments, ngroups):
    # sum over ranks of (r + 1) * i = i * p (p + 1) / 2, for lengths below, at and off multiples of p
    lengths = [1, 2, p + 1, 7 * p + 3, 1000]
    for rank_out in launch(_ring_on_known_data, p, lengths, segments, ngroups, backend="gloo", timeout=90):
        for n, x in zip(lengths, rank_out, strict=True):
            expected = torch.arange(n, dtype=torch.float64) * (p * (p + 1) / 2)
            assert torch.equal(x, expected), f"p={p}, n={n}, segments={segments}, groups={ngroups}"


# ------------------------------------------------------------------------------ the experiments


def test_experiments_are_registered():
    cat = experiment.catalogue()
    assert cat["nccl_allreduce"].needs == "cuda:2" and cat["ring_allreduce"].needs == "any"
    assert "lab4_collectives" in cat["ring_allreduce"].shown_in[0]
    assert nccl_allreduce.sizes(False)[0] == 4 and nccl_allreduce.sizes(False)[-1] == 2**30


def test_summarise_uses_the_slowest_rank_and_fit_the_model():
    # two ranks, two sizes; the slowest rank's median is the time
    per_rank = [{"library": [{"median": 1e-5}, {"median": 1e-3}]}, {"library": [{"median": 2e-5}, {"median": 0.5e-3}]}]
    res = nccl_allreduce.summarise([1000, 2**20], per_rank, "library", 2)
    first, second = res["sweep"]
    assert first["time"]["value"] == 2e-5 and second["time"]["value"] == 1e-3
    # 2**20 B in 1 ms on 2 ranks: algbw = busbw = 1.048576 GB/s
    assert second["busbw"]["value"] == pytest.approx(1.048576)
    fit = nccl_allreduce.fit(res["sweep"], 2)
    assert fit["latency"]["unit"] == "s" and fit["bandwidth"]["value"] > 0


@pytest.mark.slow
def test_ring_experiment_runs_quick_on_cpu(tmp_path):
    rec = experiment.run("ring_allreduce", quick=True, device="cpu", out=tmp_path)
    two = rec["results"]["world_sizes"]["2"]
    assert 0 < two["share"]["value"] and two["overlap"]["gradient"]["value"] > 0


# ------------------------------------------------------------------------------ the recorded H200 run


def test_recorded_h200_figures_meet_the_issue():
    nccl = load_experiment("nccl_allreduce", device="nvidia-h200")
    ring = load_experiment("ring_allreduce", device="nvidia-h200")
    assert nccl.device == "NVIDIA H200" and ring.device == "NVIDIA H200"
    nvlink = hardware.get("H200-SXM").interconnect_bandwidth.to("GB/s").magnitude  # datasheet, per direction
    two = nccl["world_sizes"]["2"]
    for row in two["sweep"]:
        n, t = row["size"]["value"], row["time"]["value"]
        # p = 2: busbw = algbw = n / t, recomputed here from the stored size and time
        assert row["busbw"]["value"] == pytest.approx(n / t / 1e9, rel=1e-9)
        assert row["busbw"]["value"] <= nvlink
    assert two["sweep"][0]["size"]["value"] == 4 and two["sweep"][-1]["size"]["value"] == 2**30
    assert 0 < two["fit"]["bandwidth"]["value"] <= nvlink
    assert 0 < two["fit"]["latency"]["value"] < 1e-4
    assert two["fit"]["max_deviation_from_1MiB"]["value"] <= 0.35  # the margin the lab states
    assert two["latency_floor"]["value"] == min(r["time"]["value"] for r in two["sweep"])
    r2 = ring["world_sizes"]["2"]
    assert r2["reference_size"]["value"] == 256 * 2**20
    assert r2["share"]["value"] >= 0.8  # issue 16: at least 80% of NCCL's bus bandwidth at 256 MiB
    best = f"ring{r2['best']['segments']}" + (f"x{r2['best']['groups']}" if r2["best"]["groups"] > 1 else "")
    assert r2["share"]["value"] == max(v["value"] for v in r2["share_by_variant"].values())
    assert r2["share_by_variant"][best]["value"] == r2["share"]["value"]


def test_recorded_gloo_run_covers_world_size_4():
    rec = load_experiment("ring_allreduce", device="intel-xeon-processor")
    assert rec["backend"] == "gloo" and set(rec["world_sizes"]) == {"2", "4"}


# ------------------------------------------------------------------------------ the notebook


def _cells() -> list[dict]:
    return json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]


def _src(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_notebook_grade_cells_and_points():
    graded = {c["metadata"]["nbgrader"]["grade_id"]: c for c in _cells() if c["metadata"].get("nbgrader", {}).get("grade")}
    points = {k: c["metadata"]["nbgrader"]["points"] for k, c in graded.items()}
    assert points == {"test_predict": 3, "test_chunk_bounds": 2, "test_ring": 3, "test_ring_uneven": 3,
                      "test_bandwidths": 1, "explain_gap": 3, "test_overlap_bounds": 2,
                      "test_data_parallel_step": 3, "perf_ring": 2}
    assert graded["explain_gap"]["cell_type"] == "markdown" and graded["explain_gap"]["metadata"]["nbgrader"]["solution"]
    # the performance cell times nothing in the notebook: the grader's verdict process measures it (perf.toml)
    perf = _src(graded["perf_ring"])
    assert perf.strip().splitlines()[-1] == 'grade_performance("lab4_collectives", "perf_ring")'
    assert "time_fn" not in perf and "grading." not in perf
    import tomllib

    spec = tomllib.loads((NOTEBOOK.parent / "perf.toml").read_text(encoding="utf-8"))["perf_ring"]
    assert spec["function"] == "ring_allreduce" and spec["points"] == 2 and spec["world"] == 2
    assert spec["forbid"] == "collectives" and spec["full_at"] == 0.7 and spec["zero_at"] == 0.2
    assert spec["args"]["x"] == [256 * 2**20 // 4]  # 256 MiB of float32 per rank


def test_notebook_solution_ring_uses_no_collective():
    ring = next(_src(c) for c in _cells() if c["metadata"].get("nbgrader", {}).get("grade_id") == "ring")
    body = ring.split("### BEGIN SOLUTION")[1]
    for name in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
        assert f"dist.{name}" not in body


@pytest.mark.slow
@pytest.mark.parametrize("lab", ["lab4_collectives"])  # graded_lab's worker group (tests/conftest.py)
def test_bad_submissions_get_their_expected_rows(lab, graded_lab):
    """A deadlocking ring, one that calls dist.all_reduce, one that only works for multiples of p, and the
    attacks on test cells (written by make_grader_side.py): rebound and patched helpers, an identity ring,
    the library through the process group, an input transformer; a report forged in the learner's kernel keeps
    its points and is flagged (graded with the instructor version and the release in the lab's one graded
    course, tests/conftest.py). ``message``: a piece of the test output that says why points were lost."""
    expected = json.loads((CORPUS / "expected.json").read_text())
    expected["instructor"] = {"status": "ok", "correctness_score": 17}
    expected["untouched"] = {"status": "ok", "correctness_score": 0}
    root, rows = graded_lab(lab)

    def outputs(name: str) -> str:
        graded = json.loads((root / "autograded" / name / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
        return json.dumps([c.get("outputs", []) for c in graded["cells"] if c["cell_type"] == "code"])

    for name, want in expected.items():
        row = rows[name]
        assert row.status == want["status"], f"{name}: {row}"
        assert row.correctness_score == want["correctness_score"], f"{name}: {row}\n{outputs(name)[-4000:]}"
        assert row.correctness_max == 17, f"{name}: {row}"
        if "flags" in want:
            assert want["flags"] in row.flags, f"{name}: expected a {want['flags']!r} flag, found {row.flags!r}"
        if "message" in want:
            assert want["message"] in outputs(name), f"{name}: expected {want['message']!r} in the test outputs"


# ------------------------------------------------------------------------------ check_ring's grader half


def _summing_ring(tensor):
    """A stand-in ring for the grader-side tests (never run: the worker half is replaced)."""
    return tensor


def _fake_worker(make_row):
    """A worker-side half that answers from the inputs it is sent, as the learner's ranks would."""
    def runs(fn, p, inputs, *, timeout=30.0):
        return {"ranks": [[make_row(r, i, inputs) for i in range(len(inputs[r]))] for r in range(p)]}
    return runs


def _by_hand_sum(inputs, i):
    total = inputs[0][i].clone()
    for rank in inputs[1:]:
        total = total + rank[i]
    return total


def test_check_ring_judges_the_ranks_reports_with_its_own_sums(monkeypatch):
    """The grader half draws the inputs, sums them itself and reads every rank's op record: a right sum with a
    send and a receive passes; a library collective, a rank that moved nothing, a wrong sum or a result that
    is not a tensor each fail with a message that names it (no process is started here)."""
    from mlsys.labkit import checks
    from mlsys.labkit.grading import GradingError

    monkeypatch.setattr(checks, "diagnose_ring", lambda *a, **k: "")
    p2p = ["c10d::recv_", "c10d::send"]

    def right(r, i, inputs):
        s = _by_hand_sum(inputs, i)
        return {"out": s, "type": "Tensor", "x": s.clone(), "ops": p2p}

    monkeypatch.setattr(checks, "worker_ring_runs", _fake_worker(right))
    checks.check_ring(_summing_ring, (2, 3), lengths=(1, 7), dtypes=("float32", "int64"))

    cases = {
        "c10d::allreduce_": lambda r, i, inputs: {**right(r, i, inputs), "ops": ["c10d::allreduce_"]},
        "sent and received nothing": lambda r, i, inputs: {**right(r, i, inputs), "ops": ["aten::add_"]},
        "returned tensor": lambda r, i, inputs: {**right(r, i, inputs), "out": inputs[r][i].clone()},
        "in place": lambda r, i, inputs: {**right(r, i, inputs), "x": inputs[r][i].clone()},
        "found int": lambda r, i, inputs: {**right(r, i, inputs), "out": 3, "type": "int"},
    }
    for words, row in cases.items():
        monkeypatch.setattr(checks, "worker_ring_runs", _fake_worker(row))
        with pytest.raises(GradingError, match=words):
            checks.check_ring(_summing_ring, (2,), lengths=(12,))
    # a reply that is not the worker's form
    monkeypatch.setattr(checks, "worker_ring_runs", lambda fn, p, inputs, **k: {"ranks": "all fine"})
    with pytest.raises(GradingError, match="malformed"):
        checks.check_ring(_summing_ring, (2,), lengths=(12,))


def test_library_collectives_keeps_only_library_ops():
    from mlsys.labkit.checks import library_collectives

    ops = ["aten::add_", "c10d::send", "c10d::recv_", "c10d::barrier", "c10d::allreduce_", "_c10d_functional::all_reduce"]
    assert library_collectives(ops) == ["_c10d_functional::all_reduce", "c10d::allreduce_"]


# ------------------------------------------------------------------------------ diagnose_ring: a read before wait()
# The receive buffer read before its request completed: what the read finds depends on a race and on the
# allocator (fresh pages read as zeros, which look like missing shares). In the diagnostic runs the received
# data reaches the learner's buffer only at wait(), so such a read is always seen.


def _ring(tensor, read_early=True, scratch_zeros=False, late_even=False):
    """The Lab 4 ring; ``read_early``: with the corpus's slip, the received chunk added before wait(). ``scratch_zeros``:
    a zero-filled scratch (reads as missing shares); ``late_even``: even ranks post their step 50 ms late, so
    an odd rank reads before its left neighbour has sent (the race forced)."""
    import time

    import torch.distributed as dist

    p, r = dist.get_world_size(), dist.get_rank()
    flat = tensor.view(-1)
    b = [i * flat.numel() // p for i in range(p + 1)]
    right, left = (r + 1) % p, (r - 1) % p
    scratch = (torch.zeros if scratch_zeros else torch.empty)(max(b[i + 1] - b[i] for i in range(p)),
                                                              dtype=flat.dtype)

    def exchange(send_i, recv_i, reduce):
        send, recv = flat[b[send_i]:b[send_i + 1]], flat[b[recv_i]:b[recv_i + 1]]
        ops = [dist.P2POp(dist.isend, send, right),
               dist.P2POp(dist.irecv, scratch[:recv.numel()] if reduce else recv, left)]
        if late_even and r % 2 == 0:
            time.sleep(0.05)
        reqs = dist.batch_isend_irecv(ops)
        if reduce and read_early:
            recv += scratch[:recv.numel()]  # the slip: before wait()
        for req in reqs:
            req.wait()
        if reduce and not read_early:
            recv += scratch[:recv.numel()]

    for s in range(p - 1):
        exchange((r - s) % p, (r - s - 1) % p, reduce=True)
    for s in range(p - 1):
        exchange((r + 1 - s) % p, (r - s) % p, reduce=False)
    return tensor


@pytest.mark.parametrize("p", [2, 3])
@pytest.mark.parametrize("scratch_zeros, late_even", [(True, True), (True, False), (False, True), (False, False)])
def test_diagnose_ring_names_a_read_before_wait_whatever_the_race(p, scratch_zeros, late_even):
    import functools

    from mlsys.labkit import checks

    ring = functools.partial(_ring, scratch_zeros=scratch_zeros, late_even=late_even)
    cause = checks.diagnose_ring(ring, p, 12)
    # the chunk read before wait() holds NaN, the diagnostic runs' marker, in every run
    assert cause.startswith("some elements are NaN"), cause
    assert re.search(r"before its\s+request completed", cause), cause


def _irecv_probe(x):
    """Rank 1 sends its first 4 elements; rank 0 copies its receive buffer into x[0:4] before wait(), into
    x[4:8] after wait(), and the result of is_completed() after wait() into x[8]."""
    import torch.distributed as dist

    if dist.get_rank() == 1:
        dist.isend(x[:4].clone(), 0).wait()
        return
    buf = torch.full((4,), -1.0)
    req = dist.irecv(buf, 1)
    x[0:4] = buf
    req.wait()
    x[4:8] = buf
    x[8] = float(req.is_completed())


def test_a_diagnostic_run_delivers_a_receive_only_at_wait():
    from mlsys.labkit import checks

    (x0, _), (x1, sends1) = launch(checks._tagged_run, 2, _irecv_probe, 9, backend="gloo", timeout=60)
    # rank 1's diagnostic input is 5**1 * (1 + i % 7): its first four elements are 5, 10, 15, 20
    assert torch.isnan(x0[0:4]).all(), x0  # before wait(): the marker, however fast the message came
    assert x0[4:8].tolist() == [5.0, 10.0, 15.0, 20.0]
    assert x0[8].item() == 1.0
    assert x1.tolist() == [5.0 * (1 + i % 7) for i in range(9)] and len(sends1) == 1


@pytest.mark.parametrize("p", [2, 3])
def test_diagnose_ring_finds_nothing_wrong_when_wait_comes_first(p):
    import functools

    from mlsys.labkit import checks

    ring = functools.partial(_ring, read_early=False, late_even=True)
    assert checks.diagnose_ring(ring, p, 12).startswith("on inputs of small integers the ring is right")


def test_ring_traffic_is_judged_by_peer_and_volume():
    """check_ring_traffic, on hand-made records (bytes of 1-byte elements, then of 8-byte ones). 3 ranks, 10
    elements: chunks of at most ceil(10/3) = 4, and a ring sends 2(p - 1) = 4 of them, at most 16 elements, only to
    rank (r + 1) % 3, receiving only from (r - 1) % 3."""
    from mlsys.labkit.checks import check_ring_traffic
    from mlsys.labkit.grading import GradingError

    ring = [("c10d::send", 2, 4), ("c10d::recv_", 0, 3), ("c10d::send", 2, 3), ("c10d::recv_", 0, 3),
            ("c10d::send", 2, 4), ("c10d::recv_", 0, 4), ("c10d::send", 2, 3), ("c10d::recv_", 0, 3)]
    check_ring_traffic("ring", 3, 1, 10, ring)  # rank 1: right 2, left 0; 14 elements sent
    alltoall = [("c10d::send", 0, 10), ("c10d::send", 2, 10), ("c10d::recv_", 0, 10), ("c10d::recv_", 2, 10)]
    with pytest.raises(GradingError, match=r"sent to rank\(s\) \[0\].*received from rank\(s\) \[2\]"):
        check_ring_traffic("ring", 3, 1, 10, alltoall)
    whole = [("c10d::send", 2, 10), ("c10d::recv_", 0, 10)] * 2  # neighbours only, but whole tensors: 20 > 16
    with pytest.raises(GradingError, match="sent 20 elements.*16 in all"):
        check_ring_traffic("ring", 3, 1, 10, whole)
    packed = [("c10d::send", 2, 8 * 10), ("c10d::recv_", 0, 80)]  # 10 float64 elements packed, or 20 float32 ones
    check_ring_traffic("ring", 3, 1, 10, packed, itemsize=8)
    with pytest.raises(GradingError, match="sent 20 elements"):
        check_ring_traffic("ring", 3, 1, 10, packed * 2, itemsize=8)
    check_ring_traffic("ring", 2, 0, 1, [("c10d::send", 1, 1), ("c10d::recv_", 1, 1), ("c10d::send", 1, 0)])
