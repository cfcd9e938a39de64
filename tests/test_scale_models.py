"""Rails, in-network reduction, busbw factors, torus collectives, comm vs compute, TCO: worked by hand."""

import pytest

from mlsys import Q_, comm, parallelism, tco, torus


def test_busbw_factors_match_nccl_tests_table():
    # nccl-tests doc/PERFORMANCE.md, p = 8: all-reduce 2*7/8, all-gather and reduce-scatter 7/8, broadcast 1
    assert comm.busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    assert comm.busbw_factor("all_gather", 8) == pytest.approx(0.875)
    assert comm.busbw_factor("reduce_scatter", 8) == pytest.approx(0.875)
    assert comm.busbw_factor("all_to_all", 4) == pytest.approx(0.75)
    assert comm.busbw_factor("broadcast", 8) == 1.0
    # an all-gather of 1 GB in 10 ms on 8 GPUs: algbw 100 GB/s, busbw 87.5 GB/s
    assert comm.bus_bandwidth(Q_(1, "GB"), Q_(10, "ms"), 8, "all_gather").to("GB/s").m == pytest.approx(87.5)
    with pytest.raises(ValueError, match="expected one of"):
        comm.busbw_factor("allreduce", 8)


def test_rails_one_ring_per_nic():
    # 8 nodes x 8 GPUs, 13.4 GB, NDR 50 GB/s per card, NVLink 450 GB/s, 10 us per step.
    # each of 8 rings carries 13.4/8 = 1.675 GB; per card 2*63/64*1.675 = 3.2977 GB -> 65.95 ms;
    # NVLink carries 7 such rings: 23.08 GB / 450 GB/s = 51.3 ms (hidden); latency 126 * 10 us = 1.26 ms
    t = comm.rail_allreduce_time(Q_(13.4, "GB"), 8, 8, "50 GB/s", "450 GB/s", "10 us")
    assert t.to("ms").m == pytest.approx(2 * 63 / 64 * 1.675 / 50 * 1e3 + 1.26, rel=1e-9)
    # a flat ring whose every step crosses one card is 8x the bandwidth term
    flat = comm.allreduce_time(Q_(13.4, "GB"), 64, "50 GB/s")
    assert (flat / (t - Q_(1.26, "ms"))).to("").m == pytest.approx(8)
    # slow NVLink: the NVLink term binds (7 rings' hops at 50 GB/s vs one ring at 400 GB/s)
    slow = comm.rail_allreduce_time(Q_(8, "GB"), 2, 8, "400 GB/s", "50 GB/s")
    assert slow.to("s").m == pytest.approx(7 * 2 * 15 / 16 * 1 / 50)


def test_hierarchical_matches_hand_sum():
    # 2*7/8*13.4/450 + 2*7/8*(13.4/8)/50 s
    t = comm.hierarchical_allreduce_time(Q_(13.4, "GB"), 8, 8, "450 GB/s", "50 GB/s")
    assert t.to("ms").m == pytest.approx((1.75 * 13.4 / 450 + 1.75 * 1.675 / 50) * 1e3)


def test_in_network_reduction_halves_the_ring():
    # p = 8, 1 GB at 450 GB/s: ring sends 1.75 GB (3.889 ms), NVLS 1 GB (2.222 ms)
    t = comm.in_network_allreduce_time(Q_(1, "GB"), 8, "450 GB/s", "3 us")
    assert t.to("ms").m == pytest.approx(1 / 450 * 1e3 + 0.006)
    assert comm.in_network_allreduce_time(Q_(1, "GB"), 1, "450 GB/s").m == 0
    # its busbw (nccl-tests' all-reduce factor) exceeds the link: 1.75 * 450 = 787.5 GB/s
    nvls = comm.in_network_allreduce_time(Q_(1, "GB"), 8, "450 GB/s")
    assert comm.bus_bandwidth(Q_(1, "GB"), nvls, 8).to("GB/s").m == pytest.approx(787.5)


def test_torus_axis_collectives_by_hand():
    w = Q_(50, "GB/s")
    v = Q_(1, "GB")
    # all-gather on a 16-chip wraparound axis: 15/16 * 1 GB / 100 GB/s = 9.375 ms, half the one-way ring
    ag = torus.axis_collective_time("all_gather", v, 16, w)
    assert ag.to("ms").m == pytest.approx(9.375)
    assert (comm.allgather_time(v, 16, w) / ag).to("").m == pytest.approx(2)
    assert torus.axis_collective_time("all_reduce", v, 16, w).to("ms").m == pytest.approx(18.75)
    # all-to-all, even k: V / (8 W) = 2.5 ms, a quarter of a one-way ring's V / (2 W)
    assert torus.axis_collective_time("all_to_all", v, 16, w).to("ms").m == pytest.approx(2.5)
    # odd k = 3: each chip sends V/9 to both neighbours, one hop, one link direction each: V/9 / W
    assert torus.axis_collective_time("all_to_all", v, 3, w).to("ms").m == pytest.approx(1 / 9 / 50 * 1e3)
    # no wraparound: all-to-all crosses the middle with V/4 each way: 5 ms, twice the torus
    assert torus.axis_collective_time("all_to_all", v, 16, w, wraparound=False).to("ms").m == pytest.approx(5)
    # a line of 3: the middle-right link carries 2 chunks of V/3 one way: 13.33 ms, vs 6.67 ms on a ring
    assert torus.axis_collective_time("all_gather", v, 3, w, wraparound=False).to("ms").m == pytest.approx(2 / 3 / 50 * 1e3)
    # hops: 16-chip ring 8 steps of latency, a line 15
    lat = Q_(1, "us")
    assert (torus.axis_collective_time("all_gather", Q_(1, "B"), 16, w, lat) - Q_(8, "us")).to("us").m < 1e-3
    assert (torus.axis_collective_time("all_gather", Q_(1, "B"), 16, w, lat, wraparound=False)
            - Q_(15, "us")).to("us").m < 1e-3
    assert torus.axis_collective_time("all_gather", v, 1, w).m == 0


def test_tpu_pods_from_google_figures():
    # Google: v5e 400 GBps bidirectional per chip, 4 ports -> 50 GB/s per link per direction
    assert torus.link_bandwidth("TPU v5e").to("GB/s").m == pytest.approx(50)
    assert torus.link_bandwidth("TPU v5p").to("GB/s").m == pytest.approx(100)  # 1200 / 2 / 6
    assert torus.link_bandwidth("TPU v6e").to("GB/s").m == pytest.approx(100)  # 800 / 2 / 4
    v5e = torus.pod("TPUv5e")
    assert v5e.pod_chips == 256 == v5e.largest_slice[0] * v5e.largest_slice[1]
    assert torus.pod("TPUv5p").topology == "3D torus"
    assert torus.pod("TPUv5p").pod_chips == 8960 > 16 * 16 * 24  # the largest slice is smaller than the pod
    for p in torus.pods().values():  # the scaling-book's figure is within 15 % of Google's
        assert 0.85 < (p.scaling_book_link_bw / p.link_bandwidth).to("").m <= 1
    with pytest.raises(KeyError, match="no pod figures"):
        torus.pod("H100")


def test_comm_against_compute_by_hand():
    c, w = Q_(1000, "TFLOP/s"), Q_(500, "GB/s")
    # data parallel: b* = (p-1)/p * s/2 * C/W = 1 * 1 * 2000 = 2000 tokens for p -> large; p = 2: 1000
    assert parallelism.dp_critical_tokens(2, c, w) == pytest.approx(1000)
    dp = parallelism.data_parallel(10**8, 1000, 2, c, w)
    assert dp.compute.to("ms").m == pytest.approx(4 * 1000 * 1e8 / 1e15 * 1e3)  # 0.4 ms
    assert dp.comm.to("ms").m == pytest.approx(2e8 / 500e9 * 1e3)  # 2*(1/2)*2e8 B / W = 0.4 ms
    assert dp.ratio == pytest.approx(1)
    # tensor parallel, MLP block D = 4096, F = 16384 (2 D F weights), bf16: t - 1 <= F W / C = 8.192
    d, f = 4096, 16384
    assert parallelism.tp_max_degree(2 * d * f, d, c, w) == pytest.approx(1 + f * 500e9 / 1e15)
    tp = parallelism.tensor_parallel(2 * d * f, d, 8192, 8, c, w)
    assert tp.compute.to("us").m == pytest.approx(2 * 8192 * 2 * d * f / 8 / 1e15 * 1e6)
    assert tp.comm.to("us").m == pytest.approx(2 * 7 / 8 * 8192 * d * 2 / 500e9 * 1e6)
    assert not tp.comm_bound
    assert parallelism.tensor_parallel(2 * d * f, d, 8192, 16, c, w).comm_bound
    # pipeline: 2 b P / C vs b D s / W; P = 2 D F: ratio = s C / (2 P / D ... ) = 2 * 1e15 / 500e9 / (4 F)
    pp = parallelism.pipeline_parallel(2 * d * f, d, 8192, c, w)
    assert pp.ratio == pytest.approx(2 * 2000 / (2 * 2 * f))


def test_tco_by_hand():
    srv, fac = tco.server("DGX-H100"), tco.facility("average-2023")
    # 10.2 kW rated - 8 x 700 W = 4.6 kW for the rest of the server
    assert srv.non_gpu_power.to("kW").m == pytest.approx(4.6)
    b = tco.ownership_cost(srv, fac, years=4, utilisation=0.5)
    # capex: 270000 / (4 * 8766 h) / 8 = 0.96253 $/GPU-hour
    assert b.capex.to("USD/hour").m == pytest.approx(270000 / (4 * 8766) / 8)
    # energy: 10.2 kW * 1.58 * 0.08 $/kWh / 8 = 0.16116 $/GPU-hour
    assert b.energy.to("USD/hour").m == pytest.approx(10.2 * 1.58 * 0.08 / 8)
    assert b.per_useful_gpu_hour.to("USD/hour").m == pytest.approx(2 * (270000 / (4 * 8766) + 10.2 * 1.58 * 0.08) / 8)
    # a measured 500 W per GPU: IT load 8 * 0.5 + 4.6 = 8.6 kW
    m = tco.ownership_cost(srv, fac, years=4, gpu_power=Q_(500, "W"))
    assert m.it_power.to("kW").m == pytest.approx(8.6)
    with pytest.raises(ValueError, match="utilisation"):
        tco.ownership_cost(srv, fac, utilisation=0)
    with pytest.raises(ValueError, match="years"):
        tco.ownership_cost(srv, fac, years=0)


def test_chapter15_cost_model_by_hand():
    from mlsys import costs, hardware, serving, transformer

    h100 = hardware.get("H100")
    m = transformer.get_model("Llama-3-70B")
    # resident weights include the embedding table: params x 2 bytes
    assert serving.resident_weight_bytes(m).to("B").m == 2 * m.params
    assert serving.resident_weight_bytes(m) > serving.weight_bytes(m)
    # 141 GB of weights over 0.9 x 80 GB = 1.96 -> 2 chips; 3 chips -> degree 4 (divides 8 KV heads)
    assert costs.chips_to_hold(Q_(141, "GB"), h100) == 2
    assert costs.tensor_parallel_degree(3, 8) == 4
    assert costs.tensor_parallel_degree(5, 8) == 8
    assert costs.tensor_parallel_degree(11, 64) == 16
    assert costs.tensor_parallel_degree(9, 8) is None
    assert costs.tensor_parallel_degree(1, 8) == 1
    q = costs.rate("H100")
    sc = costs.serving_cost(m, h100, 4096, 64, q)
    # by hand: degree n, step = decode bound / n, $ per 1e6 tokens = n * price / (64 / step) * 1e6
    need = serving.resident_weight_bytes(m) + serving.kv_cache_bytes(m, 4096, 64)
    n = costs.tensor_parallel_degree(costs.chips_to_hold(need, h100), 8)
    assert sc.chips == n == 4
    step = serving.decode_step_time(m, 4096, h100, "bf16", 64).to("s").m / n
    assert sc.usd_per_million.to("USD").m == pytest.approx(n * q.per_chip.to("USD/hour").m / 3600 * step / 64 * 1e6)
    assert sc.joules_per_token.to("J").m == pytest.approx(n * 700 * step / 64)
    tc = costs.training_cost(8e9, 1e12, h100, q, mfu=0.4)
    hours = 6 * 8e9 * 1e12 / (0.4 * h100.peak("bf16").to("FLOP/s").m) / 3600
    assert tc.chip_hours.to("hour").m == pytest.approx(hours)
    assert tc.usd.to("USD").m == pytest.approx(hours * q.per_chip.to("USD/hour").m)
    assert tc.energy.to("MW*hour").m == pytest.approx(hours * 0.7e-3)
    with pytest.raises(ValueError, match="mfu"):
        costs.training_cost(8e9, 1e12, h100, q, mfu=0)


def test_overlapped_weight_stationary_by_hand():
    from mlsys import systolic

    # 4096 x 4096 layer on a 128 x 128 array: 32 x 32 = 1024 tiles
    o = systolic.tiled_overlapped(64, 4096, 4096)
    assert o.cycles == 128 + 1024 * 128 + 128 + 128 - 2  # M = 64 < R: each tile waits for its weight load
    assert o.utilisation == pytest.approx(64 * 4096 * 4096 / (128 * 128 * o.cycles))
    assert o.utilisation == pytest.approx(0.5, rel=0.01)  # about M / R
    big = systolic.tiled_overlapped(8192, 4096, 4096)
    assert big.cycles == 128 + 1024 * 8192 + 254
    worst = systolic.tiled("weight", 8192, 4096, 4096)
    assert big.utilisation > worst.utilisation
    assert worst.cycles == 1024 * (128 + 8192 + 128 + 128 - 2)


def test_tensor_parallel_serving_copies_kv_heads_past_their_count():
    """Llama-3-70B (64 query heads, 8 KV heads) on 16 GiB TPU v5e chips, worked by hand (review of
    2026-12-01): 16 chips would each hold 141.1/16 + 85.9/8 = 19.5 GB > 0.9 x 17.18 GB = 15.46 GB;
    32 chips hold 141.1/32 + 85.9/8 = 15.1 GB, and a step reads 2 x 70.0e9/32 + 85.9e9/8 bytes at 819 GB/s."""
    from mlsys import costs, hardware, serving, transformer

    m, v5e = transformer.get_model("Llama-3-70B"), hardware.get("TPUv5e")
    kv = 64 * 4096 * 2 * 80 * 8 * 128 * 2  # batch x context x (K and V) x layers x kv_heads x head_dim x bytes
    assert serving.kv_cache_bytes(m, 4096, 64).to("B").m == kv
    assert serving.kv_share(m, 4) == 4 and serving.kv_share(m, 16) == 8 and serving.kv_share(m, 64) == 8
    per16 = serving.resident_bytes_per_chip(m, 4096, 64, 16).to("GB").m
    assert per16 == pytest.approx(2 * m.params / 16 / 1e9 + kv / 8 / 1e9)
    assert per16 > 0.9 * 16 * 2**30 / 1e9
    assert costs.serving_degree(m, v5e, 4096, 64) == 32
    sc = costs.serving_cost(m, v5e, 4096, 64, costs.rate("TPUv5e"))
    step = (2 * m.matmul_params / 32 + kv / 8) / 819e9
    assert sc.chips == 32
    assert sc.step.to("s").m == pytest.approx(step, rel=1e-3)
    # decode at 64 requests is memory-bound on the v5e, so FLOPs do not set the step
    assert 64 * 2 * m.matmul_params / 32 / v5e.peak("bf16").to("FLOP/s").m < step


def test_a_missing_link_is_a_gap_in_the_data_not_a_chip_without_one():
    """TPU v4 has six ICI links in a 3D torus (Jouppi et al., ISCA 2023) and Trainium2 four NeuronLink-v3
    (AWS Neuron docs); the course has no bandwidth figure for either, so it must say so and never "no link"."""
    from mlsys import hardware

    v4, trn2 = hardware.get("TPUv4"), hardware.get("Trainium2")
    assert (v4.interconnect.kind, v4.interconnect.links, v4.interconnect.topology) == ("ICI", 6, "3D torus")
    assert (trn2.interconnect.kind, trn2.interconnect.links) == ("NeuronLink-v3", 4)
    for acc in (v4, trn2):
        assert acc.interconnect_bandwidth is None
        assert acc.link_summary().endswith("bandwidth " + hardware.MISSING)
    assert hardware.get("Jetson-AGX-Orin-64GB").link_summary() == hardware.MISSING
    assert hardware.get("H100").link_summary() == "NVLink 4, 18 links, 450 GB/s per direction"
    for acc in hardware.all_accelerators():
        summary = acc.link_summary().lower()
        assert not summary.startswith("no ") and "cannot" not in summary, (acc.name, summary)


def test_pipeline_bubble_by_hand():
    """GPipe/1F1B: 4 stages and 4 micro-batches idle 3/7 of the step; 32 micro-batches 3/35;
    interleaving 2 chunks per stage with 4 micro-batches: 3/11 (Narayanan et al. 2021, eq. of section 2.2)."""
    from mlsys import parallelism

    assert parallelism.pipeline_bubble(4, 4) == pytest.approx(3 / 7)
    assert parallelism.pipeline_bubble(4, 32) == pytest.approx(3 / 35)
    assert parallelism.pipeline_bubble(4, 4, interleave=2) == pytest.approx(3 / 11)
    assert parallelism.pipeline_bubble(1, 8) == 0
    with pytest.raises(ValueError):
        parallelism.pipeline_bubble(0, 4)


def test_tpu_dcn_against_ici_by_hand():
    """Review row C11-16 (ICI against DCN): Google prints 50 Gbps of DCN per v5p chip and 100 per v6e chip,
    against 1,200 and 800 GB/s of ICI both ways: 9,600 / 50 = 192 and 6,400 / 100 = 64 times; v5e's page
    prints no DCN figure, which stays missing."""
    assert torus.pod("TPU v5p").dcn_per_chip.to("GB/s").m == pytest.approx(6.25)
    assert torus.pod("TPU v5p").ici_over_dcn == pytest.approx(192)
    assert torus.pod("TPU v6e").ici_over_dcn == pytest.approx(64)
    assert torus.pod("TPU v5e").dcn_per_chip is None and torus.pod("TPU v5e").ici_over_dcn is None


def test_tensor_parallel_decode_all_reduces_by_hand():
    """Review row C15-8: Llama-3-70B (80 layers, width 8192), batch 64, 4-way on 450 GB/s per direction:
    160 ring all-reduces of 64 x 8192 x 2 B = 1,048,576 B, each 2 x 3/4 x 1,048,576 / 450e9 = 3.495 us:
    0.5592 ms; with 10 us per ring step, 160 x 6 x 10 us = 9.6 ms more."""
    from mlsys import serving

    bw = Q_(450, "GB/s")
    assert serving.tp_decode_comm_time("Llama-3-70B", 64, 4, bw).to("ms").m == pytest.approx(0.55924, rel=1e-4)
    with_lat = serving.tp_decode_comm_time("Llama-3-70B", 64, 4, bw, latency=Q_(10, "us"))
    assert with_lat.to("ms").m == pytest.approx(0.55924 + 9.6, rel=1e-4)
    assert serving.tp_decode_comm_time("Llama-3-70B", 64, 1, bw).m == 0
    # the H100's NVLink figure (900 GB/s both ways) gives the same as 450 GB/s per direction
    assert serving.tp_decode_comm_time("Llama-3-70B", 64, 4, "H100").to("ms").m == pytest.approx(0.55924, rel=1e-4)
    with pytest.raises(ValueError):
        serving.tp_decode_comm_time("Llama-3-70B", 64, 0, bw)
