"""The diagram kit draws what mlsys says: counts of drawn things and label texts against hand values.

Expected values are worked out here from datasheets or by hand (comments), not read back from the
code; each diagram is drawn for two accelerators where it depends on one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.patches import Rectangle

from mlsys import diagrams as d
from mlsys.diagrams import style
from mlsys.units import Q_


def patches(fig, gid: str) -> list:
    return [p for ax in fig.axes for p in ax.patches if p.get_gid() == gid]


def texts(fig) -> str:
    out = [t.get_text() for ax in fig.axes for t in ax.texts]
    out += [ax.get_title() for ax in fig.axes] + [t.get_text() for t in fig.texts]
    if fig._suptitle is not None:
        out.append(fig._suptitle.get_text())
    for ax in fig.axes:
        if ax.get_legend() is not None:
            out += [t.get_text() for t in ax.get_legend().get_texts()]
    for leg in fig.legends:
        out += [t.get_text() for t in leg.get_texts()]
    return "\n".join(out)


# datasheet figures typed here (NVIDIA H100 and A100 whitepapers; AMD MI300X data sheet)
SMS = {"H100": 132, "A100": 108, "MI300X": 304}
L2 = {"H100": "50 MiB", "A100": "40 MiB"}
SMEM = {"H100": "228 KiB", "A100": "164 KiB", "MI300X": "64 KiB"}


@pytest.mark.parametrize("name", ["H100", "A100", "MI300X"])
def test_gpu_and_sm_draws_one_box_per_sm(name):
    fig = d.gpu_and_sm(name)
    assert len(patches(fig, "sm")) == SMS[name]
    assert len(patches(fig, "subpartition")) == 4
    t = texts(fig)
    assert f"{SMS[name]} SMs" in t and SMEM[name] in t
    if name in L2:
        assert f"L2 cache {L2[name]}" in t
        assert "registers 64 KiB" in t  # 256 KiB register file / 4 sub-partitions
    else:  # the MI300X entry has neither an L2 size nor a register file
        assert "L2 size: not in the course's data" in t and "register file size: not in the course's data" in t


def test_sm_grid_holds_every_sm():
    for n in (1, 16, 58, 108, 132, 304):
        rows, cols = d.sm_grid_shape(n)
        assert rows * cols >= n > (rows - 1) * cols
    with pytest.raises(ValueError, match="positive"):
        d.sm_grid_shape(0)


@pytest.mark.parametrize("name", ["H100", "A100"])
def test_course_map_names_six_layers_with_the_chip_figures(name):
    fig = d.course_map(name)
    assert len(patches(fig, "layer")) == 6
    t = texts(fig)
    for layer in ("Python", "dispatcher", "kernel", "SM", "memory", "network"):
        assert layer in t
    assert f"{SMS[name]} SMs" in t and f"L2 {L2[name]}" in t


def test_course_map_labels_chapters_as_the_book_numbers_them():
    """The book's numbers since the front door moved "Measuring a GPU" into Part I, counted by hand down
    _toc.yml: 01-05 are 1-5, 20 (measuring) 6, 06 roofline 7, 07 8, 08 9, 09 10, 10 fusion 11, 10a 12,
    11 many GPUs 13."""
    t = texts(d.course_map("H100"))
    for label in ("ch. 2-3", "ch. 2, 9", "ch. 4, 9-11", "ch. 4, 8", "ch. 5, 7", "ch. 13"):
        assert label in t, f"{label!r} not on the course map: {t}"
    # a renumbering moves the labels with it; a chapter the book does not number is refused
    assert d.course.chapter_label(("04", "08"), {"chapters/04_x": 4, "chapters/08_y": 5}) == "ch. 4-5"
    with pytest.raises(ValueError, match="expected one numbered"):
        d.course.chapter_label(("99",), {"chapters/04_x": 4})


@pytest.mark.parametrize(("name", "threads", "warps"), [("H100", 128, 4), ("A100", 256, 8)])
def test_thread_hierarchy_counts(name, threads, warps):
    fig = d.thread_hierarchy(name, blocks=6, threads_per_block=threads)
    assert len(patches(fig, "block")) == 6
    assert len(patches(fig, "warp")) == warps  # threads / 32
    assert len(patches(fig, "lane")) == 32
    assert f"SMs (of {SMS[name]})" in texts(fig) and "Triton programs" in texts(fig)
    with pytest.raises(ValueError, match="multiple of 32"):
        d.thread_hierarchy(name, threads_per_block=100)


def test_memory_hierarchy_capacities_and_missing_figures():
    t = texts(d.memory_hierarchy("H100"))
    # whole chip: 132 SMs x 256 KiB registers = 33 MiB; 132 x 228 KiB = 30096 KiB = 29.4 MiB
    assert "capacity: 33 MiB" in t and "capacity: 29.4 MiB" in t
    assert "capacity: 50 MiB" in t and "capacity: 80 GiB" in t and "bandwidth: 3.35 TB/s" in t
    assert t.count("not in the course's data") == 7  # 4 latencies, 3 on-chip bandwidths
    t = texts(d.memory_hierarchy("A100", latency={"HBM": Q_(600, "ns")}, bandwidth={"L2 cache": Q_(5.5, "TB/s")}))
    assert "capacity: 40 MiB" in t and "latency: 600 ns" in t and "bandwidth: 5.5 TB/s" in t
    assert "bandwidth: 2.04 TB/s" in t  # A100 80 GB: 2039 GB/s
    t = texts(d.memory_hierarchy("MI300X"))
    assert "capacity: 192 GiB" in t and t.count("not in the course's data") == 7 + 2  # + registers, L2
    with pytest.raises(ValueError, match="unknown level"):
        d.memory_hierarchy("H100", latency={"L3": Q_(1, "ns")})


def test_coalescing_sectors():
    fig = d.coalescing((1, 8))
    # stride 1: 32 lanes x 4 B = 128 B = 4 sectors; stride 8: lanes 32 B apart, one sector each
    assert len(patches(fig, "sector-touched")) == 4 + 32
    assert len(patches(fig, "lane")) == 64
    t = texts(fig)
    assert "4 sectors = 128 B moved (100% useful)" in t and "32 sectors = 1024 B moved (12% useful)" in t
    fig = d.coalescing((1, 2), itemsize=2)  # 2-byte items: 64 B = 2 sectors; stride 2: 128 B = 4 sectors
    assert len(patches(fig, "sector-touched")) == 2 + 4


def test_streams_overlap_timelines():
    fig = d.streams_overlap(1.0, 0.6, chunks=4)
    for gid in ("copy-1", "kernel-1", "copy-2", "kernel-2"):
        assert len(patches(fig, gid)) == 4
    assert len(patches(fig, "enqueue")) == 8
    # chunks of 0.25 copy, 0.15 compute: 0.25 + 3 x 0.25 + 0.15 = 1.15 of 1.6 -> 72 %
    assert "72% of one stream's time" in texts(fig)
    # recorded-style quantities: compute longer than copy, 2 chunks: 0.5 + max + 1.0 -> (0.5 + 1 + 1) / 3
    fig = d.streams_overlap(Q_(1, "ms"), Q_(2, "ms"), chunks=2)
    assert "83% of one stream's time" in texts(fig)
    with pytest.raises(ValueError, match="positive"):
        d.streams_overlap(0.0, 1.0)


@pytest.mark.parametrize(("name", "ridge"), [("H100", 295), ("A100", 153)])
def test_roofline_regions_ridge(name, ridge):
    # H100: 989.4 TFLOP/s / 3.35 TB/s = 295.3; A100 80 GB: 312 / 2.039 = 153.0 (dense bf16)
    t = texts(d.roofline_regions(name, "bf16"))
    assert f"ridge point: {ridge} FLOP/byte" in t
    assert "memory-bound" in t and "compute-bound" in t and "unreachable" in t


@pytest.mark.parametrize(("name", "fp32"), [("H100", "67"), ("A100", "19.5")])
def test_roofline_ceilings(name, fp32):
    fig = d.roofline_ceilings(name)
    t = texts(fig)
    assert f"FP32 without tensor cores: {fp32} TFLOP/s" in t
    assert "L2 bandwidth: not in the course's data" in t
    gids = {line.get_gid() for line in fig.axes[0].lines}
    assert {"hbm", "tensor", "fp32"} <= gids and "l2" not in gids
    fig = d.roofline_ceilings(name, l2_bandwidth=Q_(10, "TB/s"))
    assert "l2" in {line.get_gid() for line in fig.axes[0].lines} and "L2 10 TB/s (measured)" in texts(fig)


def test_tile_strips_k_loop():
    fig = d.tile_strips(512, 512, 512, 128, 128, 64)
    assert len(patches(fig, "a-chunk")) == len(patches(fig, "b-chunk")) == 8  # 512 / 64
    assert "4 x 4 tiles" in texts(fig)
    fig = d.tile_strips(300, 200, 100, 128, 64, 32)  # ceil(100 / 32) = 4 steps; 3 x 4 tiles
    assert len(patches(fig, "a-chunk")) == 4 and "3 x 4 tiles" in texts(fig)


def test_tile_order_by_hand():
    assert d.tile_order(2, 3) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    # grouped by 2 rows: down a column pair first, then the next column
    assert d.tile_order(3, 2, group_m=2) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]
    order = d.tile_order(8, 8, group_m=4)
    assert sorted(order) == [(r, c) for r in range(8) for c in range(8)]  # every tile once
    assert d.distinct_strips(d.tile_order(8, 8), 16) == (2, 8)
    assert d.distinct_strips(order, 16) == (4, 4)


@pytest.mark.parametrize(("name", "row_major", "grouped"), [("H100", (5, 32), (8, 17)), ("A100", (4, 32), (8, 14))])
def test_grouped_order_first_wave(name, row_major, grouped):
    # 8192 x 8192 in 128 x 256 tiles: 64 x 32 tiles. H100: 132 = 4 x 32 + 4 -> 5 rows, 32 columns;
    # grouped by 8 rows: pids 0..131 in columns 0..16 (131 // 8). A100: 108 = 3 x 32 + 12; 107 // 8 = 13.
    t = texts(d.grouped_order(accel=name))
    assert f"{row_major[0]} A strips + {row_major[1]} B strips = {sum(row_major)}" in t
    assert f"{grouped[0]} A strips + {grouped[1]} B strips = {sum(grouped)}" in t
    assert f"First wave of {SMS[name]} tiles" in t


def test_pipeline_schedule_by_hand():
    # one buffer: load i, then MMA i, then load i+1: 2 units per step, 12 for 6 steps
    assert d.pipeline_schedule(6, 1)[-1] == (10.0, 11.0)
    # three buffers, equal times: load i at i, MMA i at i + 1; the last MMA ends at 7
    assert d.pipeline_schedule(6, 3) == [(float(i), float(i + 1)) for i in range(6)]
    fig = d.pipeline_stages(3, 6)
    assert len(patches(fig, "load-s1")) == len(patches(fig, "mma-sn")) == 6
    t = texts(fig)
    assert "12" in t.split("\n") and "7" in t.split("\n")
    # slow loads (2 units), 2 buffers: the loads are the bottleneck, 2 per step + 1 final MMA
    assert d.pipeline_schedule(4, 2, load=2.0)[-1][1] + 1.0 == 4 * 2.0 + 1.0


def test_online_softmax_final_sum():
    s = np.array(d.attention.EXAMPLE_SCORES)
    expected = float(np.exp(s - s.max()).sum())  # the two-pass denominator
    state = d.running_max_sum(list(s), 4)
    assert [m for m, _ in state] == [2.5, 4.0, 4.0]  # block maxima 2.5, 4.0, 3.5
    assert state[-1][1] == pytest.approx(expected, rel=1e-12)
    fig = d.online_softmax(list(s), 4)
    assert len(patches(fig, "score")) == 12 and f"l = {expected:.3f}" in texts(fig)


def test_flash_sweep_blocks():
    fig = d.flash_sweep(1024, 128, 128, row=3)
    assert len(patches(fig, "score-block")) == 64  # 8 x 8 blocks
    assert "K/V block 8 of 8" in texts(fig)
    # causal: Q block 3 holds queries 384..511, so keys 0..511: 4 blocks of 128
    assert d.sweep_blocks(1024, 128, 128, 3, causal=True) == 4
    assert d.sweep_blocks(1000, 64, 128, 0, causal=True) == 1 and d.sweep_blocks(1000, 64, 128, 0) == 8
    assert "K/V block 2 of 4" in texts(d.flash_sweep(1024, 128, 128, row=3, step=1, causal=True))


@pytest.mark.parametrize("p", [2, 4, 5])
def test_ring_schedule(p):
    states = d.ring_schedule(p)
    assert len(states) == 2 * (p - 1) + 1
    everyone = frozenset(range(p))
    after_rs = states[p - 1]
    for r in range(p):  # after the reduce-scatter, rank r owns the complete chunk (r + 1) mod p
        assert after_rs[r][(r + 1) % p] == everyone
        assert sum(after_rs[r][c] == everyone for c in range(p)) == 1
    assert all(states[-1][r][c] == everyone for r in range(p) for c in range(p))
    fig = d.ring_allreduce(p)
    assert len(fig.axes) == 2 * (p - 1) + 1
    assert f"{2 * (p - 1) / p:.2f} of the buffer" in texts(fig)


def test_ring_hand_steps_p3():
    s = d.ring_schedule(3)
    # step 1: rank 0 sends chunk 0 to rank 1, rank 1 chunk 1 to rank 2, rank 2 chunk 2 to rank 0
    assert s[1][1][0] == {0, 1} and s[1][2][1] == {1, 2} and s[1][0][2] == {0, 2}
    assert s[1][0][0] == {0}


def test_profiler_timeline_marks_idle():
    ev = [d.TraceEvent("CPU", "launch", 0, 5), d.TraceEvent("GPU", "k1", 3, 10), d.TraceEvent("GPU", "k2", 20, 30),
          d.TraceEvent("GPU", "k3", 25, 32), d.TraceEvent("GPU", "k4", 40, 41)]
    assert d.idle_gaps(ev) == [(10, 20), (32, 40)]
    fig = d.profiler_timeline(ev)
    assert len(patches(fig, "idle")) == 2
    assert "GPU busy 53% of its span" in texts(fig)  # span 3..41 = 38, idle 18: 20 / 38
    with pytest.raises(ValueError, match="lane"):
        d.profiler_timeline([("TPU", "x", 0, 1)])


def test_systolic_frame():
    # weight stationary, K = N = 4: A[m, k] at PE (k, n) in cycle m + k + n; cycle 6 with m in 0..5
    # reaches every PE with 1 <= k + n <= 6: all but PE (0, 0)
    fig = d.systolic(6, 4, 4, cycle=6)
    pes = patches(fig, "pe")
    assert len(pes) == 16
    assert sum(p.get_facecolor()[:3] != (1.0, 1.0, 1.0) for p in pes) == 15
    assert "cycle 6 of 12" in texts(fig)  # M + K + N - 2 = 12 cycles


def test_touched_map_by_hand():
    g = d.touched_map((3, 4), outside=[12, 13, -1], unwritten=[5])
    assert g.shape == (5, 4)  # one row above for the store before, one below for those past the end
    assert g[0, 3] == 3 and np.isnan(g[0, :3]).all()
    assert g[4, 0] == g[4, 1] == 2 and np.isnan(g[4, 2:]).all()
    assert g[2, 1] == 1 and np.sum(g[1:4] == 0) == 11
    g1 = d.touched_map((70,), outside=[70])  # 1-D folded into rows of 64: 70 -> rows of 64 and 6
    assert g1.shape == (2, 64) and g1[1, 6] == 2 and np.sum(g1 == 0) == 70
    fig = d.touched_grid((3, 4), outside=[12, 13])
    assert "written outside (past the end): 2" in texts(fig)
    with pytest.raises(ValueError, match="1-D or 2-D"):
        d.touched_map((2, 2, 2))


def test_animations_have_one_frame_per_step():
    # a 4-rank ring: the start and 2 (4 - 1) = 6 steps; Q block 1 of a 512-long sequence: 4 K/V blocks
    for anim, frames in ((d.ring_animation(4), 7), (d.flash_animation(512, 128, 128, row=1), 4)):
        html = d.to_html(anim, "a test animation of several frames")
        assert html.count("data:image/png;base64") == frames
        assert 'title="Play"' in html and 'alt="a test animation of several frames"' in html
        assert "https://" not in html and "fa-" not in html  # nothing fetched from outside the page
    player = d.Player(d.ring_animation(3), d.ring_allreduce(3), "a ring of three ranks, step by step")
    bundle = player._repr_mimebundle_()
    assert set(bundle) == {"text/html", "image/png", "text/plain"} and bundle["image/png"].startswith("iVBOR")
    with pytest.raises(ValueError, match="sentence"):
        d.to_html(None, "ring")  # the alt text is refused before anything is drawn


def test_style_sizes_and_reference():
    assert style.size_text(Q_(50, "MiB")) == "50 MiB" and style.size_text(Q_(228, "KiB")) == "228 KiB"
    assert style.size_text(Q_(30096, "KiB")) == "29.4 MiB"
    assert style.accelerator(None).sm_count == 132  # the reference GPU is the H100
    with pytest.raises(TypeError, match="Accelerator"):
        style.accelerator(3)


def test_roles_survive_greyscale():
    # fills used side by side (compute, memory, slow) differ in lightness by at least 0.15, or in hatch
    def lum(hexcol):
        r, g, b = (int(hexcol[i:i + 2], 16) / 255 for i in (1, 3, 5))
        return 0.299 * r + 0.587 * g + 0.114 * b
    roles = style.ROLES
    for a, b in (("compute", "memory"), ("memory", "slow"), ("compute", "slow"), ("a", "b"), ("done", "c")):
        ra, rb = roles[a], roles[b]
        assert abs(lum(ra.face) - lum(rb.face)) >= 0.15 or ra.hatch != rb.hatch, (a, b)


def test_models_level_imports_only():
    import ast
    import pathlib

    for path in pathlib.Path(d.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                parent = node.level >= 2 and node.module.split(".")[0] in ("bench", "labkit", "book", "grader")
                absolute = node.module.startswith(("mlsys.bench", "mlsys.labkit", "mlsys.book", "mlsys.grader"))
                assert not parent and not absolute, f"{path.name} imports {node.module}"
    assert math.isfinite(1.0) and isinstance(Rectangle((0, 0), 1, 1), Rectangle)


@pytest.mark.parametrize("build", [
    d.course_map, d.gpu_and_sm, lambda: d.gpu_and_sm("MI300X"), d.thread_hierarchy, d.memory_hierarchy,
    lambda: d.memory_hierarchy("MI300X"), d.coalescing, d.streams_overlap, d.roofline_regions,
    lambda: d.roofline_regions("A100"), d.roofline_ceilings, d.tile_strips, d.grouped_order, d.pipeline_stages,
    d.online_softmax, d.flash_sweep, d.ring_allreduce, d.systolic,
    lambda: d.profiler_timeline([d.TraceEvent("GPU", "k", 0, 1), d.TraceEvent("GPU", "k", 3, 4)]),
], ids=lambda b: getattr(b, "__name__", "call"))
def test_no_labels_collide(build):
    from mlsys import viz

    assert viz.label_collisions(build()) == []
