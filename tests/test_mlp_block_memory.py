"""The MLP block's saved activations and weights (chapter 1), worked by hand."""

from __future__ import annotations

import pytest

from mlsys.training_memory import mlp_block_activation_bytes, mlp_block_weight_bytes
from mlsys.units import Q_


def test_activations_are_nine_values_per_token_and_width():
    # 32 tokens, d = 64, fp32: 9 * 32 * 64 = 18432 values of 4 bytes = 73728 bytes
    assert mlp_block_activation_bytes(32, 64, "fp32") == Q_(73728, "byte")
    # 32768 tokens, d = 4096, bf16: 9 * 2^15 * 2^12 * 2 = 9 * 2^28 bytes = 2.25 GiB
    assert mlp_block_activation_bytes(8 * 4096, 4096, "bf16").to("GiB").m == pytest.approx(2.25)


def test_weights_are_eight_d_squared_values():
    # d = 4096, bf16: 8 * 2^24 * 2 = 2^28 bytes = 256 MiB; fp32 doubles it
    assert mlp_block_weight_bytes(4096, "bf16").to("MiB").m == pytest.approx(256)
    assert mlp_block_weight_bytes(4096, "fp32") == 2 * mlp_block_weight_bytes(4096, "bf16")


def test_activations_overtake_weights_past_eight_ninths_of_d_tokens():
    # 9 T d > 8 d^2  <=>  T > 8 d / 9: for d = 900 that is T > 800
    assert mlp_block_activation_bytes(800, 900) == mlp_block_weight_bytes(900)
    assert mlp_block_activation_bytes(801, 900) > mlp_block_weight_bytes(900)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_a_count_that_is_not_a_positive_integer_is_refused(bad):
    with pytest.raises((TypeError, ValueError), match="tokens"):
        mlp_block_activation_bytes(bad, 64)
