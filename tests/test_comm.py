"""mlsys.comm: collectives and data-parallel overheads, by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys import Q_, comm
from mlsys.units import DimensionError


def test_ring_allreduce_bytes_by_hand():
    # 1 GB over 8 GPUs: 2 * 7 / 8 * 1e9 = 1.75e9 B
    assert comm.allreduce_bytes_per_gpu(Q_(1, "GB"), 8).to("byte").m == pytest.approx(1.75e9)
    # 2 GPUs: 2 * 1 / 2 * n = n
    assert comm.allreduce_bytes_per_gpu(1000, 2).to("byte").m == pytest.approx(1000)
    # one GPU: nothing to send
    assert comm.allreduce_bytes_per_gpu(1000, 1).m == 0


def test_tree_allreduce_bytes_by_hand():
    # busiest GPU of a double binary tree: 2n from 3 GPUs on, n for 2, 0 for 1
    assert comm.allreduce_bytes_per_gpu(1000, 16, "tree").to("byte").m == 2000
    assert comm.allreduce_bytes_per_gpu(1000, 2, "tree").to("byte").m == 1000
    assert comm.allreduce_bytes_per_gpu(1000, 1, "tree").to("byte").m == 0


def test_allreduce_time_by_hand():
    # ring, 1 GB, 8 GPUs, 450 GB/s per direction, 5 us per step:
    # 2 * 7 * 5 us + 1.75e9 / 450e9 s = 70 us + 3888.9 us = 3958.9 us
    t = comm.allreduce_time(Q_(1, "GB"), 8, Q_(450, "GB/s"), Q_(5, "us"))
    assert t.to("us").m == pytest.approx(70 + 1.75e9 / 450e9 * 1e6)
    # tree, same: 2 * ceil(log2 8) = 6 steps = 30 us; 2e9 / 450e9 s = 4444.4 us
    t = comm.allreduce_time("1 GB", 8, "450 GB/s", "5 us", algorithm="tree")
    assert t.to("us").m == pytest.approx(30 + 2e9 / 450e9 * 1e6)
    # 9 GPUs: ceil(log2 9) = 4 -> 8 steps
    t = comm.allreduce_time("1 kB", 9, "1 GB/s", "1 us", algorithm="tree")
    assert t.to("us").m == pytest.approx(8 + 2e3 / 1e9 * 1e6)
    # an accelerator name uses its per-direction interconnect figure (H100 NVLink 900 GB/s total -> 450)
    assert comm.allreduce_time(Q_(1, "GB"), 8, "H100") == comm.allreduce_time(Q_(1, "GB"), 8, "450 GB/s")
    # one GPU: zero time even with latency
    assert comm.allreduce_time(10**6, 1, "1 GB/s", "10 us").m == 0


def test_small_messages_favour_trees_large_favour_rings():
    # 1 kB over 64 GPUs, 10 us steps: ring 126 steps (1.26 ms) vs tree 12 steps (0.12 ms)
    small_ring = comm.allreduce_time("1 kB", 64, "100 GB/s", "10 us")
    small_tree = comm.allreduce_time("1 kB", 64, "100 GB/s", "10 us", algorithm="tree")
    assert small_tree < small_ring
    # 10 GB: ring 2 * 63 / 64 * 1e10 / 1e11 = 0.197 s (+1.26 ms) vs tree 0.2 s (+0.12 ms)
    assert comm.allreduce_time("10 GB", 64, "100 GB/s", "10 us") < comm.allreduce_time(
        "10 GB", 64, "100 GB/s", "10 us", algorithm="tree"
    )


def test_allgather_reduce_scatter_by_hand():
    # (p - 1) / p * n: 3 / 4 * 4e6 = 3e6 B; time 3 * 2 us + 3e6 / 1e11 s = 6 + 30 = 36 us
    assert comm.allgather_bytes_per_gpu(Q_(4, "MB"), 4).to("byte").m == pytest.approx(3e6)
    assert comm.reduce_scatter_bytes_per_gpu(Q_(4, "MB"), 4).to("byte").m == pytest.approx(3e6)
    assert comm.allgather_time("4 MB", 4, "100 GB/s", "2 us").to("us").m == pytest.approx(36)
    assert comm.reduce_scatter_time("4 MB", 4, "100 GB/s", "2 us").to("us").m == pytest.approx(36)
    # ring all-reduce is a reduce-scatter followed by an all-gather
    assert comm.allreduce_time("4 MB", 4, "100 GB/s", "2 us").to("us").m == pytest.approx(72)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(min_value=1, max_value=10**12), p=st.integers(min_value=1, max_value=4096))
def test_ring_bytes_approach_2n_from_below(n, p):
    b = comm.allreduce_bytes_per_gpu(n, p).to("byte").m
    b_next = comm.allreduce_bytes_per_gpu(n, p + 1).to("byte").m
    assert b < 2 * n
    assert b_next > b
    # the gap to 2n is exactly 2n / p
    assert 2 * n - b == pytest.approx(2 * n / p)


def test_sync_overhead_by_hand():
    # compute 100 ms, comm 50 ms, no overlap: step 150 ms, waiting 50 / 150 = 1/3
    assert comm.sync_overhead(Q_(100, "ms"), Q_(50, "ms")) == pytest.approx(1 / 3)
    # half the communication hidden: exposed 25 ms, 25 / 125 = 0.2
    assert comm.sync_overhead(Q_(100, "ms"), Q_(50, "ms"), overlap=0.5) == pytest.approx(0.2)
    # overlap cannot hide more than the compute: comm 300 ms, compute 100 ms, overlap 1:
    # hidden 100 ms, exposed 200 ms, step 300 ms -> 2/3
    assert comm.sync_overhead(Q_(100, "ms"), Q_(300, "ms"), overlap=1.0) == pytest.approx(2 / 3)
    assert comm.step_time(Q_(100, "ms"), Q_(300, "ms"), overlap=1.0).to("ms").m == pytest.approx(300)
    assert comm.sync_overhead(Q_(100, "ms"), Q_(0, "ms")) == 0.0


def test_scaling_efficiency_by_hand():
    # compute 100 ms, 1 GB gradients, 8 GPUs at 100 GB/s, no latency, no overlap:
    # all-reduce 1.75e9 / 1e11 s = 17.5 ms; efficiency 100 / 117.5
    eff = comm.scaling_efficiency(Q_(100, "ms"), Q_(1, "GB"), 8, Q_(100, "GB/s"))
    assert eff == pytest.approx(100 / 117.5)
    # with overlap 0.5: exposed 8.75 ms -> 100 / 108.75
    eff = comm.scaling_efficiency(Q_(100, "ms"), Q_(1, "GB"), 8, Q_(100, "GB/s"), overlap=0.5)
    assert eff == pytest.approx(100 / 108.75)
    assert comm.scaling_efficiency(Q_(100, "ms"), Q_(1, "GB"), 1, Q_(100, "GB/s")) == 1.0


def test_errors():
    with pytest.raises(ValueError, match="world_size must be a positive integer"):
        comm.allreduce_bytes_per_gpu(1000, 0)
    with pytest.raises(TypeError, match="world_size"):
        comm.allreduce_bytes_per_gpu(1000, 2.0)
    with pytest.raises(ValueError, match="positive"):
        comm.allreduce_bytes_per_gpu(0, 4)
    with pytest.raises(ValueError, match="unknown algorithm"):
        comm.allreduce_time(1000, 4, "1 GB/s", algorithm="butterfly")
    with pytest.raises(DimensionError, match="per GPU, per direction"):
        comm.allreduce_time(1000, 4, Q_(1, "TFLOP/s"))
    with pytest.raises(DimensionError, match="dimension of byte"):
        comm.allgather_time(Q_(1, "s"), 4, "1 GB/s")
    with pytest.raises(ValueError, match="no interconnect_bandwidth"):
        comm.allreduce_time(1000, 4, "TPUv4")
    with pytest.raises(ValueError, match="overlap must be a fraction"):
        comm.sync_overhead(Q_(1, "s"), Q_(1, "s"), overlap=1.5)
    with pytest.raises(ValueError, match="non-negative"):
        comm.allreduce_time(1000, 4, "1 GB/s", latency=Q_(-1, "us"))


# ---- hierarchical all-reduce, all-to-all and the tree/ring crossover (issue 19), worked by hand


def test_hierarchical_allreduce_by_hand():
    # 4 nodes x 8 GPUs, 1 GB, NVLink 450 GB/s, InfiniBand 50 GB/s per GPU per direction, no latency:
    # intra 2 * 7/8 * 1e9 / 450e9 = 3.8889 ms; inter 2 * 3/4 * (1e9 / 8) / 50e9 = 3.75 ms
    t = comm.hierarchical_allreduce_time(Q_(1, "GB"), 4, 8, Q_(450, "GB/s"), Q_(50, "GB/s"))
    assert t.to("ms").m == pytest.approx(1.75 / 450 * 1e3 + 3.75)
    # latencies 2 us (NVLink) and 10 us (IB): + 2*7*2 + 2*3*10 = 88 us
    t2 = comm.hierarchical_allreduce_time(Q_(1, "GB"), 4, 8, "450 GB/s", "50 GB/s", Q_(2, "us"), Q_(10, "us"))
    assert (t2 - t).to("us").m == pytest.approx(88)
    # a flat ring over all 32 GPUs runs at the slowest link: 2 * 31/32 * 1e9 / 50e9 = 38.75 ms
    flat = comm.allreduce_time(Q_(1, "GB"), 32, Q_(50, "GB/s"))
    assert flat.to("ms").m == pytest.approx(38.75)
    assert t < flat
    # one node: only the NVLink ring remains, equal to the flat ring over 8 GPUs
    one = comm.hierarchical_allreduce_time(Q_(1, "GB"), 1, 8, Q_(450, "GB/s"), Q_(50, "GB/s"))
    assert one.to("s").m == pytest.approx(comm.allreduce_time(Q_(1, "GB"), 8, Q_(450, "GB/s")).to("s").m)


def test_alltoall_by_hand():
    # 8 GPUs, 1 GB each, 450 GB/s: 7/8 * 1e9 / 450e9 = 1.9444 ms, + 7 * 5 us
    assert comm.alltoall_bytes_per_gpu(Q_(1, "GB"), 8).to("GB").m == pytest.approx(0.875)
    assert comm.alltoall_time(Q_(1, "GB"), 8, Q_(450, "GB/s")).to("ms").m == pytest.approx(0.875 / 450 * 1e3)
    assert comm.alltoall_time(Q_(1, "GB"), 8, Q_(450, "GB/s"), Q_(5, "us")).to("ms").m == pytest.approx(
        0.875 / 450 * 1e3 + 0.035)
    # 2 nodes x 8: same-node 7/16 GB at 450 GB/s (0.97 ms), other node 8/16 GB at 50 GB/s (10 ms): 10 ms
    t = comm.alltoall_time(Q_(1, "GB"), 16, Q_(450, "GB/s"), gpus_per_node=8, inter_bandwidth=Q_(50, "GB/s"))
    assert t.to("ms").m == pytest.approx(10)
    with pytest.raises(ValueError, match="multiple"):
        comm.alltoall_time(Q_(1, "GB"), 12, Q_(450, "GB/s"), gpus_per_node=8, inter_bandwidth=Q_(50, "GB/s"))
    with pytest.raises(ValueError, match="both"):
        comm.alltoall_time(Q_(1, "GB"), 16, Q_(450, "GB/s"), gpus_per_node=8)


def test_tree_ring_crossover_by_hand():
    # 64 GPUs, 450 GB/s, 5 us: 64 * 450e9 * 5e-6 * (63 - 6) = 8.208 GB (the 8.2 GB)
    n = comm.tree_ring_crossover(64, Q_(450, "GB/s"), Q_(5, "us"))
    assert n.to("GB").m == pytest.approx(8.208)
    ring = comm.allreduce_time(n, 64, Q_(450, "GB/s"), Q_(5, "us"), "ring")
    tree = comm.allreduce_time(n, 64, Q_(450, "GB/s"), Q_(5, "us"), "tree")
    assert ring.to("s").m == pytest.approx(tree.to("s").m)
    assert comm.allreduce_time(2 * n, 64, "450 GB/s", "5 us", "ring") < comm.allreduce_time(2 * n, 64, "450 GB/s", "5 us", "tree")
    assert comm.tree_ring_crossover(2, Q_(450, "GB/s"), Q_(5, "us")).m == 0
    assert comm.tree_ring_crossover(3, Q_(450, "GB/s"), Q_(5, "us")).m == 0


def test_link_bandwidth_is_public_and_per_direction():
    assert comm.link_bandwidth("H100").to("GB/s").m == pytest.approx(450)
    assert comm.link_bandwidth("450 GB/s").to("GB/s").m == 450
    with pytest.raises(DimensionError):
        comm.link_bandwidth(450)
    with pytest.raises(ValueError, match="finite"):
        comm.link_bandwidth("inf GB/s")


def test_hierarchical_allreduce_pipelined_takes_the_slower_phase():
    """8 nodes x 8 GPUs, 13.4 GB, NVLink 450 GB/s, network 50 GB/s, no latency, by hand:
    intra = 2 (7/8) 13.4e9 / 450e9 = 52.1 ms; inter = 2 (7/8) (13.4e9 / 8) / 50e9 = 58.6 ms.
    Phase after phase: 110.7 ms; pipelined: 58.6 ms."""
    from mlsys import Q_, comm

    n, nvl, ib = Q_(13.4, "GB"), Q_(450, "GB/s"), Q_(50, "GB/s")
    seq = comm.hierarchical_allreduce_time(n, 8, 8, nvl, ib)
    pipe = comm.hierarchical_allreduce_time(n, 8, 8, nvl, ib, pipelined=True)
    assert seq.to("ms").m == pytest.approx(1.75 * 13.4e9 / 450e9 * 1e3 + 1.75 * 13.4e9 / 8 / 50e9 * 1e3)
    assert pipe.to("ms").m == pytest.approx(1.75 * 13.4e9 / 8 / 50e9 * 1e3)
    with pytest.raises(TypeError, match="pipelined"):
        comm.hierarchical_allreduce_time(n, 8, 8, nvl, ib, pipelined="yes")


def test_published_nccl_figures_give_nvls_about_1_3x_the_ring():
    """nccl-tests issue 212 (S. Jeaugey): ring busbw ~370 of 450 GB/s on 8 H100s; NVLS algbw ~275 GB/s.
    Ring time for 13.4 GB = 13.4e9 / (370e9 x 8 / 14) = 63.4 ms; NVLS 13.4e9 / 275e9 = 48.7 ms: 1.30x."""
    from mlsys import Q_, comm

    ring, nvls = comm.published("h100-8-ring"), comm.published("h100-8-nvls")
    assert ring.efficiency == pytest.approx(370 / 450)
    assert ring.time(Q_(13.4, "GB")).to("ms").m == pytest.approx(13.4e9 / (370e9 * 8 / 14) * 1e3)
    assert nvls.time(Q_(13.4, "GB")).to("ms").m == pytest.approx(13.4e9 / 275e9 * 1e3)
    assert (ring.time(Q_(1, "GB")) / nvls.time(Q_(1, "GB"))).to("").m == pytest.approx(1.30, abs=0.01)
    assert "issues/212" in ring.source
    with pytest.raises(KeyError, match="known"):
        comm.published("h100-64-ring")
