"""mlsys.attention: FLOPs, traffic and the score-matrix limit, against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from mlsys import Q_, attention, hardware
from mlsys.units import DimensionError


def test_visible_pairs_by_hand():
    # N = 4: 16 pairs; causal 4 + 3 + 2 + 1 = 10
    assert attention.visible_pairs(4) == 16
    assert attention.visible_pairs(4, causal=True) == 10
    assert attention.visible_pairs(1, causal=True) == 1


def test_flops_tiny_case():
    # B = H = 1, N = 2, D = 1: S = q k^T is 2 x 2 with 1 multiply-add each (4 pairs x 2 FLOP),
    # O = P v another 4 x 2: 16 FLOP; causal 3 pairs: 12 FLOP
    assert attention.attention_flops(1, 1, 2, 1) == Q_(16, "FLOP")
    assert attention.attention_flops(1, 1, 2, 1, causal=True) == Q_(12, "FLOP")


def test_flops_match_two_matmuls():
    # per head, Q K^T is an (N x D) @ (D x N) matmul: 2 N N D; P V is (N x N) @ (N x D): 2 N N D
    b, h, n, d = 2, 3, 128, 64
    per_head = 2 * n * n * d + 2 * n * n * d
    assert attention.attention_flops(b, h, n, d).to("FLOP").magnitude == b * h * per_head


def test_score_matrix_and_traffic_by_hand():
    # B=8, H=16, N=8192, D=128, fp16: one tensor 8*16*8192*128*2 = 2**28 B, scores 8*16*8192**2*2 = 2**34 B
    assert attention.score_matrix_bytes(8, 16, 8192, "fp16") == Q_(2**34, "byte")
    assert attention.fused_attention_bytes(8, 16, 8192, 128, "fp16") == Q_(4 * 2**28, "byte")
    assert attention.naive_attention_bytes(8, 16, 8192, 128, "fp16") == Q_(4 * 2**28 + 4 * 2**34, "byte")
    t = attention.attention_traffic(8, 16, 8192, 128, "fp16")
    assert t.ratio == pytest.approx(65.0)
    # FLOPs 4*8*16*128*8192**2 = 2**42; fused intensity 2**42 / 2**30 = 4096 FLOP/B; naive 4096 / 65
    assert t.flops == Q_(2**42, "FLOP")
    assert t.fused_intensity.to("FLOP/byte").magnitude == pytest.approx(4096)
    assert t.naive_intensity.to("FLOP/byte").magnitude == pytest.approx(4096 / 65)


def test_fp32_doubles_the_bytes():
    assert attention.score_matrix_bytes(1, 1, 10, "fp32") == Q_(400, "byte")
    assert attention.score_matrix_bytes(1, 1, 10, "bf16") == Q_(200, "byte")


def test_causal_halves_fused_flops_not_naive_bytes():
    t = attention.attention_traffic(1, 1, 1000, 64, "fp16", causal=True)
    full = attention.attention_traffic(1, 1, 1000, 64, "fp16", causal=False)
    assert t.flops / full.flops == pytest.approx(1001 / 2000)
    assert t.naive == full.naive


def test_fused_bytes_with_query_blocks():
    # N = 100, block_m = 32: 4 query blocks, each reading K and V: (2 + 2 * 4) tensors of 100 * 64 * 2 B
    assert attention.fused_attention_bytes(1, 1, 100, 64, "fp16", block_m=32) == Q_(10 * 12800, "byte")
    # one block covering the sequence: the compulsory 4 tensors
    assert attention.fused_attention_bytes(1, 1, 100, 64, "fp16", block_m=128) == Q_(4 * 12800, "byte")


def test_max_seq_len_on_h100_by_hand():
    # the H100's 80 GiB (the datasheet's "80 GB" is binary on the device: 85,899,345,920 B)
    # / (8 * 16 * 2 B) = 335,544,320 = N**2 -> 18317.8; 18317**2 = 335,512,489 <= 335,544,320 < 18318**2
    assert attention.max_seq_len_for_scores(8, 16, "fp16", "H100") == 18317
    assert attention.max_seq_len_for_scores(8, 16, "fp16", hardware.get("H100")) == 18317
    # a perfect square: 1 GiB of fp16 at B = H = 1 -> N**2 = 2**29 ... not a square; 2 GiB -> 2**30 = (2**15)**2
    assert attention.max_seq_len_for_scores(1, 1, "fp16", Q_(2, "GiB")) == 2**15
    assert attention.max_seq_len_for_scores(1, 1, "fp16", Q_(2**31 - 1, "byte")) == 2**15 - 1
    n = attention.max_seq_len_for_scores(1, 1, "fp16", Q_(1, "GiB"))
    assert n == math.isqrt(2**29) == 23170


def test_bad_input_is_refused_clearly():
    with pytest.raises(ValueError, match="seq_len"):
        attention.attention_flops(1, 1, 0, 64)
    with pytest.raises(TypeError, match="head_dim"):
        attention.attention_flops(1, 1, 8, 64.0)
    with pytest.raises(TypeError, match="causal"):
        attention.visible_pairs(8, causal="yes")
    with pytest.raises(DimensionError):
        attention.max_seq_len_for_scores(1, 1, "fp16", Q_(1, "s"))
    with pytest.raises(DimensionError):
        attention.max_seq_len_for_scores(1, 1, "fp16", 80e9)
    with pytest.raises(KeyError):
        attention.max_seq_len_for_scores(1, 1, "fp16", "H999")
    with pytest.raises(ValueError, match="holds no score matrix"):
        attention.max_seq_len_for_scores(4, 4, "fp16", Q_(8, "byte"))
    with pytest.raises(ValueError, match="block_m"):
        attention.fused_attention_bytes(1, 1, 8, 8, "fp16", block_m=0)


def test_flash_intensity_is_about_the_query_tile_not_n_over_2():
    # review part2.md R8: at N = 4096, D = 64, fp16, 128-query tiles. FLOPs per head 4 * 64 * 4096^2
    # = 2^32; one tensor 4096 * 64 * 2 = 2^19 B; 32 query blocks -> (2 + 64) tensors = 66 * 2^19 B.
    # Intensity 2^32 / (66 * 2^19) = 8192 / 66 = 124.1 FLOP/B, near 128 = 2 * block_m / s, far from N/2 = 2048.
    i = attention.flash_intensity(4096, 64, block_m=128, dtype="fp16").to("FLOP/byte").magnitude
    assert i == pytest.approx(8192 / 66)
    assert 100 < i < 130
    # the compulsory floor is N / s = 2048: the figure the chapter used to quote, which no kernel reaches here
    t = attention.attention_traffic(1, 1, 4096, 64, "fp16")
    assert t.fused_intensity.to("FLOP/byte").magnitude == pytest.approx(2048)
    assert t.tiled_intensity.to("FLOP/byte").magnitude == pytest.approx(8192 / 66)
    # it does not grow with N: at N = 16384, 4 * 64 * N^2 / ((2 + 256) * N * 64 * 2) = 2 N / 258 = 127.0
    big = attention.flash_intensity(16384, 64).to("FLOP/byte").magnitude
    assert big == pytest.approx(2 * 16384 / 258)
    assert abs(big - 128) < 2


def test_causal_tiled_bytes_by_hand():
    # N = 100, block_m = 32: query blocks see 32, 64, 96, 100 keys = 292 keys of K and of V;
    # one tensor 100 * 64 * 2 = 12800 B, so 2 * 12800 (Q, O) + 2 * 292 * 64 * 2 (K, V) = 25600 + 74752
    assert attention.fused_attention_bytes(1, 1, 100, 64, "fp16", block_m=32, causal=True) == Q_(100352, "byte")


def test_decode_attention_by_hand():
    # one query over c = 1000 cached tokens, H = H_kv = 1, D = 64, bf16: 4 * 64 * 1000 = 256,000 FLOP;
    # K and V: 2 * 1000 * 64 * 2 B = 256,000 B -> 1 FLOP/B
    d = attention.decode_attention(1000, 1, 64)
    assert d.flops == Q_(256_000, "FLOP") and d.bytes == Q_(256_000, "byte")
    assert d.intensity.to("FLOP/byte").magnitude == pytest.approx(1.0)
    # Llama-3-8B's grouped-query attention: 32 query heads share 8 KV heads -> 4 FLOP/B in bf16
    g = attention.decode_attention(4096, 32, 128, kv_heads=8)
    assert g.intensity.to("FLOP/byte").magnitude == pytest.approx(4.0)
    with pytest.raises(ValueError, match="multiple"):
        attention.decode_attention(10, 32, 128, kv_heads=5)
