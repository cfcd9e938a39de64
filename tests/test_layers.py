"""mlsys.layers against costs worked out by hand."""

from __future__ import annotations

import pytest

from mlsys import layers


def test_decode_gemv_is_one_flop_per_byte_in_bf16():
    # 2 * 4096^2 FLOP over (4096 + 4096^2 + 4096) * 2 bytes
    c = layers.linear(1, 4096, 4096, "bf16")
    assert c.flops.m == 33_554_432
    assert c.bytes.to("byte").m == 33_570_816
    assert c.intensity.m == pytest.approx(33_554_432 / 33_570_816)


def test_linear_bound_is_where_weight_traffic_vanishes():
    # 2 d^2 / (2 d * 2 bytes) = d / 2 for a square bf16 layer
    assert layers.linear_intensity_bound(4096, 4096, "bf16").m == pytest.approx(2048)
    assert layers.linear_intensity_bound(768, 3072, "fp32").m == pytest.approx(2 * 768 * 3072 / (3840 * 4))
    for t in (1, 64, 4096, 10**7):
        assert layers.linear(t, 4096, 4096).intensity < layers.linear_intensity_bound(4096, 4096)


def test_tokens_to_ridge_h100_square_layer():
    # intensity(t) = t d / (2 t + d) for square bf16; the H100 ridge 989.5e12 / 3.35e12 = 295.37:
    # t = 345 gives 295.26 (below), t = 346 gives 295.99 (above)
    assert layers.tokens_to_ridge(4096, 4096, "H100", "bf16") == 346
    # a 512-wide layer's own bound is 256 FLOP/B, under the ridge: no batch makes it compute-bound
    assert layers.tokens_to_ridge(512, 512, "H100", "bf16") is None


def test_conv2d_resnet_block():
    c = layers.conv2d(1, 64, 56, 56, 64, kernel=3, dtype="bf16")
    assert c.flops.m == 2 * 64 * 56 * 56 * 64 * 9 == 231_211_008
    assert c.bytes.to("byte").m == (64 * 3136 + 64 * 64 * 9 + 64 * 3136) * 2 == 876_544
    assert layers.conv2d_output_size(224, 7, stride=2, padding=3) == 112
    assert layers.conv2d(1, 3, 224, 224, 64, kernel=7, stride=2, padding=3).flops.m == 2 * 64 * 112 * 112 * 3 * 49


def test_normalisations_and_scores():
    ln = layers.layer_norm(2, 4, "fp32")
    assert (ln.flops.m, ln.bytes.to("byte").m) == (64, 96)
    sm = layers.softmax(3, 10, "fp16")
    assert (sm.flops.m, sm.bytes.to("byte").m) == (150, 120)
    at = layers.attention_scores(1, 4, 4, 2, "fp32")
    assert (at.flops.m, at.bytes.to("byte").m, at.intensity.m) == (64, 128, 0.5)


@pytest.mark.parametrize("call", [
    lambda: layers.linear(0, 4, 4),
    lambda: layers.softmax(4, -1),
    lambda: layers.conv2d(1, 3, 2, 2, 8, kernel=5, padding=0),
    lambda: layers.conv2d_output_size(8, 3, padding=-1),
    lambda: layers.layer_norm(4, 4, "fp12"),
])
def test_bad_input_raises(call):
    with pytest.raises((ValueError, TypeError)):
        call()
