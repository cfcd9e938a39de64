"""A corpus of typical learner mistakes in Labs 1-5: each costs exactly its exercise's points.

Every mistake is injected into the instructor notebook (a small edit of one solution cell), the
notebook runs as a kernel would (every code cell in order, in one namespace, in a child process so
that nothing a kernel does can touch pytest), and the test asserts that

* exactly the graded cells of that exercise fail (the points lost are that exercise's points: no
  other cell loses points through a ``NameError`` or a dead kernel), and
* the failing cell's message names the mistake.

The expected cells and messages are written here by hand from what each mistake does, not copied
from a run. A second, static test checks that every hidden-test block imports what it uses.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from mlsys.runtime.notebook import demo_ids

REPO = Path(__file__).resolve().parents[1]
LABS = REPO / "labs" / "source"
NOTEBOOKS = {lab: LABS / lab / f"{lab}.ipynb" for lab in ("lab1_roofline", "lab2_tiled_matmul", "lab3_fusion",
                                                           "lab4_collectives", "lab5_attention")}

# cells that take time and grade nothing (plots and benchmarks of the reference kernels): the labs' demonstrations,
# which the grader does not run either (tests/test_lab_demos.py)
HEAVY = {lab: tuple(sorted(demo_ids(json.loads(path.read_text(encoding="utf-8"))["cells"])))
         for lab, path in NOTEBOOKS.items()}


def _src(cell: dict) -> str:
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def _gid(cell: dict) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


@dataclass(frozen=True)
class Mistake:
    lab: str
    name: str
    cell: str | tuple[str, ...]  # grade_id of the solution cell(s) edited; each edit applies to the one holding its text
    old: str | tuple[str, ...]  # text(s) of the instructor solution ...
    new: str | tuple[str, ...]  # ... replaced by the learner's mistake
    lost: frozenset[str]  # graded cells that must fail: the exercise's test cells
    message: str  # a regular expression the failing cell's message must match


MISTAKES = [
    Mistake("lab1_roofline", "MACs instead of FLOPs", "counts",
            "flops = 2 * m * n * k", "flops = m * n * k",
            frozenset({"test_matmul_counts"}), r"count FLOPs, not MACs"),
    Mistake("lab1_roofline", "ms taken as seconds", "time_ops",
            'achieved = (flops / Q_(t.median, "s")).to("FLOP/s")',
            'achieved = (flops / Q_(t.median * 1e3, "s")).to("FLOP/s")  # "the time is in ms"',
            frozenset({"test_points"}), r"ms used as seconds"),
    Mistake("lab2_tiled_matmul", "missing store mask (warm-up add)", "add_kernel",
            "tl.store(out_ptr + offsets, x + y, mask=mask)", "tl.store(out_ptr + offsets, x + y)",
            frozenset({"test_add"}), r"wrote \d+ elements? past the end of out.*check the store mask"),
    Mistake("lab2_tiled_matmul", "fp16 accumulation in the naive matmul", "naive_kernel",
            ("acc = tl.zeros((BLOCK_K,), dtype=tl.float32)", "acc += a.to(tl.float32) * b.to(tl.float32)"),
            ("acc = tl.zeros((BLOCK_K,), dtype=a_ptr.dtype.element_ty)", "acc += a * b"),  # "accumulate in the input dtype"
            frozenset({"test_naive"}), r"fp16 accumulation"),
    # issue 45: the interpreter runs it (and the sums are right: every product is added in fp32), the GPU compiler
    # refuses it; the visible check compiles the kernel for sm_90 on the CPU and reports the compiler's reason
    Mistake("lab2_tiled_matmul", "fp16-initialised accumulator (does not compile)", "naive_kernel",
            "acc = tl.zeros((BLOCK_K,), dtype=tl.float32)", "acc = tl.zeros((BLOCK_K,), dtype=tl.float16)",
            frozenset({"test_naive"}), r"GPU compiler .*rejects your kernel at line \d+ .*Loop-carried variable acc "
                                       r"has initial type .*fp16.* but is re-assigned to .*fp32"),
    Mistake("lab2_tiled_matmul", "fp16 accumulation in the tiled matmul", "tiled_kernel",
            "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)", "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)",
            frozenset({"test_tiled"}), r"(fp16 accumulation|accumulate in fp32)"),
    Mistake("lab2_tiled_matmul", "endless loop in the naive kernel", "naive_kernel",
            "for k0 in range(0, K, BLOCK_K):", "k0 = 0\n    while k0 < K:  # k0 += BLOCK_K forgotten",
            frozenset({"test_naive"}), r"stopped after \d+ s .*without finishing.*endless loop"),
    Mistake("lab2_tiled_matmul", "missing store mask (tiled)", "tiled_kernel",
            "acc.to(c_ptr.dtype.element_ty),\n             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))",
            "acc.to(c_ptr.dtype.element_ty))",
            frozenset({"test_tiled"}), r"check the store mask"),
    Mistake("lab2_tiled_matmul", "missing load masks (tiled)", "tiled_kernel",
            "ks[None, :] * stride_ak,\n                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)",
            "ks[None, :] * stride_ak)",
            frozenset({"test_tiled"}), r"your kernel read .* check the load mask"),
    Mistake("lab2_tiled_matmul", "dropped edge tiles (tiled)", "tiled_kernel",
            "grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))", "grid = (M // block_m, N // block_n)",
            frozenset({"test_tiled"}), r"unwritten.*check the grid size"),
    Mistake("lab2_tiled_matmul", "wrong row stride (tiled)", "tiled_kernel",
            "a, b, c, M, N, K,\n                              a.stride(0), a.stride(1),",
            "a, b, c, M, N, K,\n                              K, 1,",  # "A is row-major, so its row stride is K"
            frozenset({"test_tiled"}), r"(beyond the last column of A|strides)"),
    Mistake("lab3_fusion", "wrong element-wise arities", "predict_arities",
            "xyz_chain_arities = [2, 2, 1]", "xyz_chain_arities = [2, 1, 1]",
            frozenset({"test_predict"}), r"reads 3 tensors from outside it, but your arities count 2"),
    Mistake("lab3_fusion", "missing store mask (fused element-wise)", "fused_elementwise_kernel",
            "tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)",
            "tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty))",
            frozenset({"test_fused_elementwise"}), r"past the end of out.*check the store mask"),
    Mistake("lab3_fusion", "missing load mask (fused element-wise)", "fused_elementwise_kernel",
            "x = tl.load(x_ptr + offsets, mask=mask)", "x = tl.load(x_ptr + offsets)",
            frozenset({"test_fused_elementwise"}), r"read \d+ elements? past the end of x.*check the load mask"),
    Mistake("lab3_fusion", "softmax reading its input twice", "fused_softmax_kernel",
            "    numerator = tl.exp(z)\n",
            "    x_again = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=-float(\"inf\")).to(tl.float32)\n"
            "    numerator = tl.exp(x_again - tl.max(x, axis=0))\n",
            frozenset({"test_softmax"}), r"loaded \d[\d,]* elements of x, 2 times"),
    # Lab 4: the ring all-reduce. A slip that breaks the ring for every size costs both ring exercises (there is
    # no ring); a dtype slip costs test_ring only, where the dtypes are checked.
    Mistake("lab4_collectives", "scratch buffer always float32", "ring",
            "dtype=flat.dtype, device=flat.device)", "dtype=torch.float32, device=flat.device)",
            frozenset({"test_ring"}), r"right in float32 but not in float64.*dtype=flat\.dtype"),
    Mistake("lab4_collectives", "neighbours without % p", "ring",
            "right, left = (r + 1) % p, (r - 1) % p", "right, left = r + 1, r - 1",
            frozenset({"test_ring", "test_ring_uneven"}), r"rank -?\d+, which does not exist.*% p"),
    Mistake("lab4_collectives", "reduce-scatter one step short", "ring",
            "for s in range(p - 1):  # reduce-scatter", "for s in range(p - 2):  # reduce-scatter",
            frozenset({"test_ring", "test_ring_uneven"}), r"sends 2\(p - 1\).*step counts"),
    Mistake("lab4_collectives", "all-gather with the reduce-scatter's indices", "ring",
            "exchange((r + 1 - s) % p, (r - s) % p, reduce=False)", "exchange((r - s) % p, (r - s - 1) % p, reduce=False)",
            frozenset({"test_ring", "test_ring_uneven"}), r"in all-gather step \d+, rank \d+ sent a chunk .*indices"),
    Mistake("lab4_collectives", "receive buffer read before its request completed", "ring",
            "        for req in dist.batch_isend_irecv(ops) if ops else []:\n            req.wait()\n"
            "        if reduce and recv.numel():\n            recv += scratch[:recv.numel()]\n",
            "        reqs = dist.batch_isend_irecv(ops) if ops else []\n        if reduce and recv.numel():\n"
            "            recv += scratch[:recv.numel()]\n        for req in reqs:\n            req.wait()\n",
            frozenset({"test_ring", "test_ring_uneven"}), r"some elements are NaN.*before its\s+request completed"),
    # Lab 4: the data-parallel step. Stepping on the whole batch gives every process the right gradient (DDP averages
    # p copies of it) but not data parallelism; a step without DDP keeps each process's own shard's gradient
    Mistake("lab4_collectives", "every process steps on the whole batch", "overlap",
            "xr, yr = x[r * rows:(r + 1) * rows], y[r * rows:(r + 1) * rows]", "xr, yr = x, y",
            frozenset({"test_data_parallel_step"}), r"expected the model to see its share of \d+ rows, it saw \d+"),
    Mistake("lab4_collectives", "gradients not averaged (no DDP)", "overlap",
            "ddp = DDP(model, bucket_cap_mb=bucket_mb)", "ddp = model",
            frozenset({"test_data_parallel_step"}), r"exchanged nothing through torch\.distributed"),
    # Lab 5: the attention kernel
    Mistake("lab5_attention", "running max starts at 0", "attention_kernel",
            'm_i = tl.full([BLOCK_M], float("-inf"), tl.float32)', "m_i = tl.zeros([BLOCK_M], tl.float32)",
            frozenset({"test_attention_fp16_stable"}), r"every score near -400.*running max starts at 0 instead of -inf"),
    Mistake("lab5_attention", "no mask on the key tail", "attend_blocks",
            ("k = tl.load(k_base + kv_offsets, mask=cols[:, None] < N_CTX, other=0.0)",
             "v = tl.load(v_base + kv_offsets, mask=cols[:, None] < N_CTX, other=0.0)"),
            ("k = tl.load(k_base + kv_offsets)", "v = tl.load(v_base + kv_offsets)"),
            frozenset({"test_attention"}), r"read \d+ elements? past the end of [kv]\b.*check the load mask"),
    Mistake("lab5_attention", "no causal mask", "attend_blocks",
            "                keep = keep & (cols[None, :] <= offs_m[:, None])\n", "                pass\n",
            frozenset({"test_attention_causal"}), r"causal"),
    Mistake("lab5_attention", "running sums held in the input dtype (fp16)", "attend_blocks",
            "acc = tl.dot(p.to(v.dtype), v, acc)  # fp32 accumulation", "acc = (acc + tl.dot(p.to(v.dtype), v)).to(v.dtype)",
            frozenset({"test_attention_fp16_stable"}), r"running acc .*fp16 accumulation"),
    # the same slip made in the program, not the loop: attend_blocks keeps whatever dtype acc arrives in (fp32 in the
    # probe of attend_blocks alone, which it passes), and attention_kernel starts acc in the input dtype
    Mistake("lab5_attention", "fp16 accumulator started in attention_kernel", ("attention_kernel", "attend_blocks"),
            ("acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)", "acc = acc * alpha[:, None]",
             "acc = tl.dot(p.to(v.dtype), v, acc)  # fp32 accumulation"),
            ("acc = tl.zeros([BLOCK_M, HEAD_DIM], Q.dtype.element_ty)  # the output's dtype",
             "acc = (acc * alpha[:, None]).to(acc.dtype)  # keep the dtype the program chose",
             "acc = (acc + tl.dot(p.to(v.dtype), v)).to(acc.dtype)"),
            frozenset({"test_attention_fp16_stable"}), r"acc = sum of p \* v reaches .* more than fp16's largest value, 65504.*fp16 accumulation"),
]


def _cells(m: Mistake) -> tuple[str, ...]:
    return (m.cell,) if isinstance(m.cell, str) else m.cell


def _edits(m: Mistake) -> list[tuple[str, str]]:
    olds = (m.old,) if isinstance(m.old, str) else m.old
    news = (m.new,) if isinstance(m.new, str) else m.new
    return list(zip(olds, news, strict=True))


def _groups() -> list[tuple[Mistake, ...]]:
    """Mistakes that touch different cells and different exercises share one notebook run.

    Each run still checks every exercise on its own: the cells that fail are exactly the union of the
    injected mistakes' exercises, and each fails with its own mistake's message.
    """
    groups: list[list[Mistake]] = []
    for m in MISTAKES:
        for g in groups:
            if g[0].lab == m.lab and all(not set(_cells(o)) & set(_cells(m)) and not (o.lost & m.lost) for o in g):
                g.append(m)
                break
        else:
            groups.append([m])
    return [tuple(g) for g in groups]


GROUPS = _groups()


def _inject(mistakes: tuple[Mistake, ...], tmp: Path) -> Path:
    lab = mistakes[0].lab
    nb = json.loads(NOTEBOOKS[lab].read_text(encoding="utf-8"))
    for m in mistakes:
        cells = [c for c in nb["cells"] if _gid(c) in _cells(m)]
        for old, new in _edits(m):
            holding = [c for c in cells if _src(c).count(old) == 1]
            assert len(holding) == 1, f"{m.name}: the instructor solution no longer contains {old!r} once"
            holding[0]["source"] = _src(holding[0]).replace(old, new)
    path = tmp / f"{lab}.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


# An endless loop is stopped after guardrun.CPU_LIMIT (60 s) of computation: the run of a mistake that loops
# spins for that long. Such runs stop guarded calls after ENDLESS_LOOP_CPU_LIMIT instead (the same watchdog,
# a smaller limit; the lab's honest checks each compute for well under a second on a CPU).
ENDLESS_LOOP_CPU_LIMIT = 8.0

_RUNNER = textwrap.dedent("""
    import json, os, sys
    from mlsys.runtime import notebook as nbexec
    limit = os.environ.get("MISTAKES_CPU_LIMIT")
    if limit:  # the guarded calls' default limit, where they read it (a keyword default and the module constant)
        from mlsys.labkit import checks, guardrun
        guardrun.CPU_LIMIT = float(limit)  # where the guarded calls read it (checks re-exports it, issue 48's split)
        for fn in vars(checks).values():
            if "cpu_limit" in (getattr(fn, "__kwdefaults__", None) or {}):
                fn.__kwdefaults__["cpu_limit"] = float(limit)
    records = nbexec.run_cells(sys.argv[1], skip=tuple(sys.argv[3:]))
    with open(sys.argv[2], "w") as fh:
        json.dump(records, fh)
""")


# The runs are forked from one process per test worker that has imported torch (about 1.5 CPU-s a run otherwise) and
# nothing else: no notebook code ever runs in it, so each run starts from the same clean state as a new process would.
_ZYGOTE = textwrap.dedent("""
    import json, os, select, sys, traceback
    import torch  # noqa: F401
    RUNNER = sys.argv[1]
    print("ready", flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.setsid()
                os.chdir(job["cwd"])
                log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(log, 1)
                os.dup2(log, 2)
                os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
                os.environ.update(job["env"])
                sys.argv = ["-c", *job["argv"]]
                exec(compile(RUNNER, "<runner>", "exec"), {"__name__": "__main__"})
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        ended = os.pidfd_open(pid)
        if not select.select([ended], [], [], job["timeout"])[0]:
            os.killpg(pid, 9)  # the run and whatever it forked
        os.close(ended)
        print(json.dumps({"exit": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}), flush=True)
""")


class _Zygote:
    """A process that imported torch and forks one notebook run per request (:data:`_RUNNER` as ``python -c``)."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
        self.proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE, _RUNNER], env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline()
        assert ready == "ready\n", f"the runs' parent process did not start: {ready!r} {self.proc.stderr.read()[-3000:]}"

    def run(self, argv: list[str], cwd: Path, log: Path, env: dict[str, str], timeout: float) -> int:
        """Exit status of one run; the parent kills its process group after ``timeout`` seconds."""
        job = {"argv": argv, "cwd": str(cwd), "log": str(log), "env": env, "timeout": timeout}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())["exit"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def zygote():
    z = _Zygote()
    yield z
    z.close()


def run_notebook(path: Path, skip: tuple[str, ...], zygote: _Zygote, timeout: float = 900,
                 cpu_limit: float | None = None) -> dict[str, dict]:
    """Run every code cell of ``path`` in a child process; graded cells' records by grade_id. ``cpu_limit``:
    the seconds of computation after which a guarded call is stopped (default: checks.CPU_LIMIT)."""
    out, log = path.with_suffix(".json"), path.with_suffix(".log")
    env = {"MISTAKES_CPU_LIMIT": str(cpu_limit)} if cpu_limit is not None else {}
    code = zygote.run([str(path), str(out), *skip], path.parent, log, env, timeout)
    assert code == 0 and out.is_file(), f"the notebook run itself died ({code}): {log.read_text()[-3000:]}"
    return {r["grade_id"]: r for r in json.loads(out.read_text()) if r.get("graded")}


@pytest.mark.slow
@pytest.mark.parametrize("mistakes", GROUPS, ids=[" + ".join(f"{m.lab}: {m.name}" for m in g) for g in GROUPS])
def test_each_mistake_costs_its_exercise_and_names_itself(mistakes, tmp_path, zygote):
    loops = any("endless loop" in m.message for m in mistakes)
    graded = run_notebook(_inject(mistakes, tmp_path), HEAVY[mistakes[0].lab], zygote,
                          cpu_limit=ENDLESS_LOOP_CPU_LIMIT if loops else None)
    failed = {gid for gid, r in graded.items() if r["status"] not in ("ok", "skipped")}
    points = {gid: r["points"] for gid, r in graded.items()}
    expected = set().union(*(m.lost for m in mistakes))
    assert failed == expected, (
        f"expected only {sorted(expected)} to fail ({sum(points[g] for g in expected):g} points), "
        f"found {sorted(failed)} ({sum(points[g] for g in failed):g} points): "
        + "; ".join(f"{g}: {graded[g]['status'][:300]}" for g in sorted(failed)))
    for m in mistakes:
        for gid in m.lost:
            status = graded[gid]["status"]
            assert re.search(m.message, status, re.S), f"{m.name}: {gid} failed with {status[:600]!r}"
            if "endless loop" in m.message:  # stopped by the limit this run set (polled each second), not another
                spent = re.search(r"stopped after (\d+) s of computation", status)
                assert spent and ENDLESS_LOOP_CPU_LIMIT <= int(spent.group(1)) + 1 <= ENDLESS_LOOP_CPU_LIMIT + 3, status[:600]
    assert all(r["status"] == "ok" for g, r in graded.items() if g.startswith("perf_")), "a perf cell failed"


# ------------------------------------------------------------------------------ static: hidden blocks

_HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*", re.S | re.M)
_SOLUTION = re.compile(r"^([ \t]*)### BEGIN SOLUTION.*?### END SOLUTION[^\n]*", re.S | re.M)


def _names(src: str) -> tuple[set[str], set[str]]:
    """(names bound, names loaded) at any depth of ``src``."""
    tree = ast.parse(src)
    bound, loaded = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            bound.update(a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg))
        elif isinstance(node, ast.Lambda):
            bound.update(a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.comprehension):
            for t in ast.walk(node.target):
                if isinstance(t, ast.Name):
                    bound.add(t.id)
    return bound, loaded


@pytest.mark.parametrize("lab", sorted(NOTEBOOKS))
def test_every_hidden_block_imports_what_it_uses(lab):
    """A name a hidden block uses must be defined in the student's version or in that block itself.

    A name defined only in *another* cell's hidden block would raise ``NameError`` whenever that
    cell failed before defining it, costing points for an unrelated exercise.
    """
    cells = [c for c in json.loads(NOTEBOOKS[lab].read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    visible = set(dir(builtins))
    for c in cells:  # what the learner's notebook defines: every cell, solutions included, hidden blocks removed
        visible |= _names(_HIDDEN.sub("", _src(c)))[0]
    problems = []
    for c in cells:
        for block in _HIDDEN.findall(_src(c)):
            body = "\n".join(line for line in block.splitlines() if "HIDDEN TESTS" not in line)
            bound, loaded = _names(textwrap.dedent(body))
            missing = sorted(loaded - bound - visible)
            if missing:
                problems.append(f"{_gid(c)}: hidden block uses {missing}, defined only in other hidden blocks")
    assert not problems, "\n".join(problems)


def test_the_corpus_edits_still_apply():
    """Each mistake's edit finds its text in the instructor solution (fast, so a renamed line is noticed)."""
    for m in MISTAKES:
        cells = [c for c in json.loads(NOTEBOOKS[m.lab].read_text(encoding="utf-8"))["cells"] if _gid(c) in _cells(m)]
        assert len(cells) == len(_cells(m)), f"{m.name}: a cell of {_cells(m)} is missing"
        for old, _ in _edits(m):
            assert sum(_src(c).count(old) for c in cells) == 1, f"{m.name}: {old!r} not found once in {m.cell}"
        cell_ids = {_gid(c) for c in json.loads(NOTEBOOKS[m.lab].read_text(encoding="utf-8"))["cells"]}
        assert m.lost <= cell_ids


# ------------------------------------------------------------------------------ the check helpers themselves


def test_accumulation_probe_has_a_hand_checked_answer():
    torch = pytest.importorskip("torch")
    from mlsys.labkit import checks

    a, b, expected = checks.accumulation_probe(4096, 2048.0, 1.0)
    # 2048 + 4095 * 1 = 6143, which fp16 (spacing 4 between 4096 and 8192) rounds to 6144
    assert float(expected) == 6144.0 and a.dtype == b.dtype == torch.float16
    # an fp16 running sum sticks at 2048: 2048 + 1 is a tie between 2048 and 2050, rounded to even 2048
    acc = torch.tensor(0.0, dtype=torch.float16)
    for v in b.reshape(-1)[:64]:
        acc = (acc + v).to(torch.float16)
    assert float(acc) == 2048.0


def test_plausible_rate_names_a_units_slip():
    from mlsys import Q_
    from mlsys.labkit import checks
    from mlsys.labkit.grading import GradingError

    # 1 GFLOP in 2 ms is 500 GFLOP/s; a learner who took the 2 ms for 2 s claims 0.5 GFLOP/s
    checks.assert_plausible_rate("op", Q_(5e11, "FLOP/s"), Q_(1e9, "FLOP"), 2e-3)
    with pytest.raises(GradingError, match="ms used as seconds"):
        checks.assert_plausible_rate("op", Q_(5e8, "FLOP/s"), Q_(1e9, "FLOP"), 2e-3)
    with pytest.raises(ValueError, match="positive time"):
        checks.assert_plausible_rate("op", Q_(5e8, "FLOP/s"), Q_(1e9, "FLOP"), 0.0)


@pytest.mark.parametrize(("arities", "message"), [
    ([2, 2, 1], None),
    ([1, 2, 2], None),  # another order of the same reads: the structure check cannot tell, the traffic is equal
    ([2, 1, 1], "your arities count 2"),  # forgot that the add reads z
    ([2, 3, 1], "your arities count 4"),  # counted the previous result as an outside tensor
    ([2, 2], "expected 3 arities"),
    ((2, 2, 1.0), "list of integers"),
])
def test_chain_arity_check(arities, message):
    from mlsys.labkit import checks
    from mlsys.labkit.grading import GradingError

    if message is None:
        checks.check_chain_arities(list(arities), ops=3, outside_tensors=3)
    else:
        with pytest.raises(GradingError, match=message):
            checks.check_chain_arities(arities, ops=3, outside_tensors=3)


def test_guard_report_locates_stores_between_rows():
    torch = pytest.importorskip("torch")
    from mlsys.labkit import checks
    from mlsys.labkit.grading import GradingError

    def writes_past_each_row(a):
        out = torch.empty_like(a)
        flat = out.as_strided((out.shape[0], out.shape[1] + 1), (out.stride(0), 1))  # one column too many
        flat.fill_(1.0)
        return out

    a = torch.zeros(3, 4)
    with pytest.raises(GradingError, match=r"wrote 1 element past the end of out"):
        checks.check_kernel(writes_past_each_row, (a,), torch.ones(3, 4), names=("a",), output_names=("out",),
                            isolate=False)


def test_rate_arithmetic_uses_the_learners_own_times():
    from mlsys import Q_
    from mlsys.bench.timing import Timing
    from mlsys.labkit import checks
    from mlsys.labkit.grading import GradingError

    # 1e9 FLOP timed at 2, 2.5 and 4 ms: any rate from 1e9 / 4 ms = 2.5e11 to 1e9 / 2 ms = 5e11 is honest
    t = Timing(what="op", method="perf_counter", times=(2e-3, 2.5e-3, 4e-3), warmup=0, flush="none")
    for rate in (2.5e11, 4e11, 5e11):
        checks.check_rate_arithmetic("op", Q_(rate, "FLOP/s"), Q_(1e9, "FLOP"), t)
    with pytest.raises(GradingError, match="ms used as seconds"):  # 1e9 / 2.5 s
        checks.check_rate_arithmetic("op", Q_(4e8, "FLOP/s"), Q_(1e9, "FLOP"), t)
    with pytest.raises(GradingError, match="MACs counted instead of FLOPs"):  # 5e8 / 2.5 ms
        checks.check_rate_arithmetic("op", Q_(2e11, "FLOP/s"), Q_(1e9, "FLOP"), t)


def _raises_backend_timeout():
    raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 30000ms "
                       "for recv operation to complete")


def _sends_past_the_last_rank():
    import torch
    import torch.distributed as dist

    r = dist.get_rank()
    dist.isend(torch.ones(2), r + 1).wait()  # no % p: rank p - 1 sends to rank p


@pytest.mark.slow
def test_launcher_names_deadlocks_and_invalid_ranks_one_way():
    pytest.importorskip("torch")
    from mlsys.runtime.launch import LaunchError, LaunchTimeout, launch

    # gloo's own receive timeout reads as the launcher's deadlock message, not a 15-line traceback
    with pytest.raises(LaunchTimeout, match=r"ranks \[0, 1\] of 2 did not finish within 7 s.*A deadlock\?"):
        launch(_raises_backend_timeout, 2, timeout=7)
    # a peer that does not exist is named at once, not after the deadline
    with pytest.raises(LaunchError, match=r"rank 2 of 3 called isend to rank 3, which does not exist.*% p"):
        launch(_sends_past_the_last_rank, 3, timeout=20)


def _spin_forever(x):
    while True:
        x = x + 1


def test_an_endless_loop_is_stopped_by_its_computation_time_with_signs_of_life(capsys):
    torch = pytest.importorskip("torch")
    from mlsys.labkit import checks, guardrun
    from mlsys.labkit.grading import GradingError

    old = guardrun.HEARTBEAT  # where run_guarded reads it (checks re-exports it since issue 48's split)
    guardrun.HEARTBEAT = 1.0
    try:
        with pytest.raises(GradingError, match=r"stopped after \d+ s of computation.*endless loop"):
            checks.check_kernel(_spin_forever, (torch.ones(3),), torch.ones(3), names=("x",), cpu_limit=2.5,
                                isolate=True)
    finally:
        guardrun.HEARTBEAT = old
    assert "still running after" in capsys.readouterr().out


def _warns(x):
    import warnings

    warnings.warn("a warning from the course's own code", UserWarning, stacklevel=1)
    return x.clone()


@pytest.mark.parametrize("isolate", [True, False])
def test_warnings_during_a_check_never_reach_stderr(capfd, isolate, monkeypatch):
    torch = pytest.importorskip("torch")
    from mlsys.labkit import checks

    # _warns stands in for a launcher without a Triton kernel, which check_kernel refuses under the interpreter
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)

    checks.check_kernel(_warns, (torch.ones(3),), torch.ones(3), names=("x",), isolate=isolate)
    out, err = capfd.readouterr()
    assert err == "" and "a warning from the course's own code" in out  # nbgrader zeroes a cell on any stderr


def test_attention_sums_check_names_fp16_accumulation():
    torch = pytest.importorskip("torch")
    from mlsys.labkit import checks
    from mlsys.labkit.grading import GradingError

    # q = k = 0: every score is 0, every weight exp(0 - 0) = 1, so acc = 120 keys x 1000 = 120000 > 65504
    q = k = torch.zeros(1, 1, 120, 16, dtype=torch.float16)
    v = torch.full((1, 1, 120, 16), 1000.0, dtype=torch.float16)
    expected = v[:, :, :1].expand_as(v)  # the average of equal values

    def fp32_sums(q, k, v):
        p = torch.exp(q.float() @ k.float().transpose(-1, -2) / 4.0)
        return ((p @ v.float()) / p.sum(-1, keepdim=True)).half()

    def fp16_sums(q, k, v):  # acc held in fp16 between blocks of 32 keys
        p = torch.exp(q.float() @ k.float().transpose(-1, -2) / 4.0)
        acc = torch.zeros(1, 1, 120, 16, dtype=torch.float16)
        for j in range(0, 120, 32):
            acc = (acc.float() + p[..., j:j + 32] @ v[..., j:j + 32, :].float()).half()
        return (acc.float() / p.sum(-1, keepdim=True)).half()

    checks.check_attention_sums_fp32(fp32_sums, q, k, v, expected, rtol=1e-2, atol=1.0, label="a", isolate=False)
    with pytest.raises(GradingError, match=r"reaches 1\.2e\+05 here, more than fp16's largest value, 65504.*fp16 "
                                           r"accumulation"):
        checks.check_attention_sums_fp32(fp16_sums, q, k, v, expected, rtol=1e-2, atol=1.0, label="a", isolate=False)
    with pytest.raises(ValueError, match="within fp16's range"):  # 60 keys x 1000 = 60000 fits: not a probe
        checks.check_attention_sums_fp32(fp32_sums, q[..., :60, :], k[..., :60, :], v[..., :60, :],
                                         expected[..., :60, :], rtol=1e-2, atol=1.0, label="a", isolate=False)


def test_scores_far_below_zero_check_names_the_initial_max():
    torch = pytest.importorskip("torch")
    from mlsys.labkit import checks
    from mlsys.labkit.grading import GradingError

    # one query over two keys of scores -300 and -301 and values 1 and 3: weights 1 and 1/e after the shift,
    # so the average is (1 + 3/e) / (1 + 1/e) = 1.5379...; from a running max of 0, exp(-300) underflows
    # fp32 to 0 (its smallest value is about 1.4e-45, e^-300 about 5e-131): 0 / 0
    s, v = torch.tensor([-300.0, -301.0]), torch.tensor([1.0, 3.0])
    e = 2.718281828459045
    expected = torch.tensor([(1 + 3 / e) / (1 + 1 / e)])

    def softmax_average(s, v, start):
        m = max(start, float(s.max()))
        w = torch.exp(s - m)
        return ((w * v).sum() / w.sum()).reshape(1)

    kw = {"lowest_score": -301.0, "rtol": 1e-5, "atol": 1e-6, "label": "far", "isolate": False}
    checks.check_scores_far_below_zero(lambda s, v: softmax_average(s, v, float("-inf")), (s, v), expected, **kw)
    with pytest.raises(GradingError, match=r"far: every score is far below zero .*found 1 of 1 outputs NaN/Inf.*"
                                           r"running max starts at 0"):
        checks.check_scores_far_below_zero(lambda s, v: softmax_average(s, v, 0.0), (s, v), expected, **kw)
    with pytest.raises(GradingError, match=r"far: expected a tensor, found list"):
        checks.check_scores_far_below_zero(lambda s, v: [1.5], (s, v), expected, **kw)
