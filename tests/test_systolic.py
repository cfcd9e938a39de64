"""mlsys.systolic against cases worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys import hardware, systolic


def test_two_by_two_weight_stationary_cycle_by_cycle():
    # A = [[1, 2], [3, 4]], W = [[5, 6], [7, 8]]. PE (k, n) holds W[k, n]; A[m, k] reaches it in cycle m + k + n.
    # cycle 0: PE(0,0) does 1*5          cycle 1: PE(0,0) 3*5, PE(1,0) 2*7, PE(0,1) 1*6
    # cycle 2: PE(1,0) 4*7, PE(0,1) 3*6, PE(1,1) 2*8      cycle 3: PE(1,1) 4*8   -> 4 cycles = M + K + N - 2
    a = np.array([[1, 2], [3, 4]])
    w = np.array([[5, 6], [7, 8]])
    sim = systolic.simulate(a, w, "weight")
    assert sim.out.tolist() == [[19, 22], [43, 50]]
    assert sim.cycles == 4 and sim.load_cycles == 2
    assert sim.active[0].tolist() == [[True, False], [False, False]]
    assert sim.active[1].tolist() == [[True, True], [True, False]]
    assert sim.active[2].tolist() == [[False, True], [True, True]]
    assert sim.active[3].tolist() == [[False, False], [False, True]]
    assert sim.macs == 8 and sim.utilisation == pytest.approx(8 / 16)
    # hops: 4 A values each move right once (N - 1 = 1), 4 partial sums each move down once (K - 1 = 1)
    assert sim.hops == 8


def test_output_stationary_meets_operands_at_k_plus_m_plus_n():
    a = np.array([[1, 2, 3]])  # M=1, K=3
    b = np.array([[1, 0], [0, 1], [1, 1]])  # N=2
    sim = systolic.simulate(a, b, "output")
    assert sim.out.tolist() == [[4, 5]]
    assert sim.cycles == 3 + 1 + 2 - 2 and sim.drain_cycles == 1
    # PE (0, n) works in cycles n..n+2
    assert [f[0].tolist() for f in sim.active] == [[True, False], [True, True], [True, True], [False, True]]


def test_every_dataflow_does_m_k_n_macs_and_gets_the_product():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(5, 3)), rng.normal(size=(3, 4))
    for flow in systolic.DATAFLOWS:
        sim = systolic.simulate(a, b, flow)
        np.testing.assert_allclose(sim.out, a @ b, rtol=1e-12)
        assert sim.macs == 5 * 3 * 4
        assert sim.cycles == 5 + 3 + 4 - 2


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 6), st.sampled_from(systolic.DATAFLOWS))
def test_simulation_is_a_matmul_for_any_shape(m, k, n, flow):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a, b = rng.integers(-5, 6, (m, k)), rng.integers(-5, 6, (k, n))
    sim = systolic.simulate(a, b, flow)
    assert np.array_equal(sim.out, a @ b)
    assert sim.macs == m * k * n and 0 < sim.utilisation <= 1


def test_tiled_model_by_hand():
    # decode-like: M=1 row through a 128x128 weight-stationary array, K=N=256: 4 tiles of (128+1+128+128-2)
    cost = systolic.tiled("weight", 1, 256, 256, 128, 128)
    assert cost.tiles == 4 and cost.cycles == 4 * 383
    assert cost.utilisation == pytest.approx(256 * 256 / (128 * 128 * 4 * 383))
    assert cost.words == {"A": 256 * 2, "B": 256 * 256, "Out": 256 * 3}
    # output stationary, M=N=256, K=64: 4 tiles of (64 + 128 + 128 - 2 + 128)
    os_ = systolic.tiled("output", 256, 64, 256, 128, 128)
    assert os_.tiles == 4 and os_.cycles == 4 * 446
    assert os_.words == {"A": 256 * 64 * 2, "B": 64 * 256 * 2, "Out": 256 * 256}


def test_large_batch_fills_a_weight_stationary_array():
    small = systolic.tiled("weight", 4, 4096, 4096).utilisation  # 4 / (4 + 382)
    large = systolic.tiled("weight", 8192, 4096, 4096).utilisation  # 8192 / 8574
    assert small < 0.02 < 0.9 < large < 1


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="dataflow"):
        systolic.simulate(np.ones((2, 2)), np.ones((2, 2)), "row")
    with pytest.raises(ValueError, match="matching K"):
        systolic.simulate(np.ones((2, 3)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="M must be a positive"):
        systolic.tiled("weight", 0, 4, 4)


def test_relative_energy_by_hand():
    # no reuse: 1 (ALU) + 1 (RF) + 6 * 4 = 26 per MAC
    assert systolic.relative_energy_per_mac(10, 0, 40) == pytest.approx(26)
    # the 2x2 weight-stationary tile: 8 MACs, 8 hops, 4 + 4 words read and 4 written
    assert systolic.relative_energy_per_mac(8, 8, 12) == pytest.approx(1 + 1 + 2 * 1 + 6 * 1.5)
    with pytest.raises(ValueError, match="counts"):
        systolic.relative_energy_per_mac(8, -1, 0)


# --- review rows C12-2 and C12-6: the printed MXU counts and the accumulators ---------------------------

def test_implied_clocks_by_hand():
    """peak / (MXUs x size^2 x 2): v5e 197e12 / (4 x 128^2 x 2) = 1.503 GHz; v5p 459e12 / (8 x 128^2 x 2) =
    1.751 GHz; v4 275e12 / (8 x 128^2 x 2) = 1.049 GHz; v6e with the printed two 256-wide MXUs 918e12 /
    (2 x 256^2 x 2) = 3.502 GHz, with four 1.751 GHz (review row C12-2)."""
    by_hand = {"TPUv5e": 1.503, "TPUv5p": 1.751, "TPUv4": 1.049, "TPUv6e": 3.502}
    for name, ghz in by_hand.items():
        lay = systolic.mxu_layout(name)
        clock = systolic.implied_clock(hardware.get(name).peak("bf16"), lay.mxus, lay.mxu_size)
        assert clock.to("GHz").m == pytest.approx(ghz, rel=1e-3), name
    v6e = hardware.get("Trillium").peak("bf16")
    assert systolic.implied_clock(v6e, 4, 256).to("GHz").m == pytest.approx(1.751, rel=1e-3)
    assert systolic.mxu_layout("TPU v6e").mxus == 2 and systolic.mxu_layout("TPU v5p").mxus == 8
    with pytest.raises(KeyError, match="no MXU layout"):
        systolic.mxu_layout("H100")
    with pytest.raises(ValueError):
        systolic.implied_clock(v6e, 0, 256)


def test_tpu_v1_accumulators_are_4_mib():
    """Jouppi et al. 2017: "4 MiB of 32-bit Accumulators" = 4,096 x 256 x 4 B = 4,194,304 B."""
    assert systolic.accumulator_bytes(4096, 256).to("B").m == 4_194_304
    assert systolic.accumulator_bytes(4096, 256).to("MiB").m == pytest.approx(4)
    with pytest.raises(ValueError, match="multiple of 8"):
        systolic.accumulator_bytes(4096, 256, bits=12)
