"""mlsys.transformer, mlsys.serving and mlsys.training_memory: values worked out by hand.

Shapes (layers, widths, heads) are typed in from the models' config.json files, the published
parameter counts from the Hugging Face model cards; every expected value below is computed in the
comment beside it, not copied from the code.
"""

from __future__ import annotations

import pytest

from mlsys import Q_, serving, training_memory, transformer
from mlsys.transformer import ModelSpecError, load_models

# name: (layers, d_model, heads, kv_heads, ffn_hidden, vocab, published parameter count)
CONFIGS = {
    "GPT-2-small": (12, 768, 12, 12, 3072, 50257, 124_439_808),
    "Llama-3-8B": (32, 4096, 32, 8, 14336, 128256, 8_030_261_248),
    "Llama-3-70B": (80, 8192, 64, 8, 28672, 128256, 70_553_706_496),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_shapes_match_the_configs(name):
    m = transformer.get_model(name)
    layers, d, heads, kv, ffn, vocab, params = CONFIGS[name]
    assert (m.layers, m.d_model, m.heads, m.kv_heads, m.ffn_hidden, m.vocab) == (layers, d, heads, kv, ffn, vocab)
    assert m.head_dim * m.heads == d
    assert m.params == params
    assert m.source.url.startswith("https://huggingface.co/")


def test_llama_3_8b_parameters_by_hand():
    # embeddings 128256 * 4096 = 525,336,576, untied output head the same;
    # per layer: q 4096^2 + k, v 2 * 4096 * 1024 + o 4096^2 = 41,943,040; MLP 3 * 4096 * 14336 = 176,160,768;
    # two RMSNorms 8192 -> 218,112,000; x 32 = 6,979,584,000; final norm 4096
    m = transformer.get_model("llama3-8b")
    assert m.layer_params == 218_112_000
    assert m.params == 6_979_584_000 + 2 * 525_336_576 + 4096
    # matmul weights: 32 * (41,943,040 + 176,160,768) + 525,336,576 (logits)
    assert m.matmul_params == 32 * 218_103_808 + 525_336_576


def test_gpt2_parameters_by_hand():
    # wte 50257*768 = 38,597,376; wpe 1024*768 = 786,432; per layer 7,087,872 (with biases and
    # LayerNorm weights and biases); final LayerNorm 1536; the output head is tied (no extra)
    m = transformer.get_model("gpt2")
    assert m.layer_params == 2 * 1536 + (768 * 2304 + 2304) + (768 * 768 + 768) + (768 * 3072 + 3072) + (3072 * 768 + 768)
    assert m.layer_params == 7_087_872
    assert m.params == 38_597_376 + 786_432 + 12 * 7_087_872 + 1536


def test_forward_flops_by_hand():
    m = transformer.get_model("gpt2")
    # one token at position 1: 2 * matmul_params + 4 * 12 * 1 * 768
    assert transformer.forward_flops(m, 1).m == 2 * m.matmul_params + 4 * 12 * 768
    # 3 tokens after 2 cached: positions 3, 4, 5 -> 12 positions
    assert transformer.forward_flops(m, 3, 2).m == 3 * 2 * m.matmul_params + 4 * 12 * 768 * 12
    assert transformer.attention_flops(m, 5).m == 4 * 12 * 5 * 768


def test_model_file_is_validated(tmp_path):
    text = transformer.MODELS_FILE.read_text()
    bad = tmp_path / "m.toml"
    bad.write_text(text.replace("ffn_hidden = 14336", "ffn_hidden = 14000"))
    with pytest.raises(ModelSpecError, match="parameters"):
        load_models(bad)
    bad.write_text(text.replace("kv_heads = 8\nhead_dim = 128\nffn_hidden = 14336", "kv_heads = 5\nhead_dim = 128\nffn_hidden = 14336"))
    with pytest.raises(ModelSpecError, match="multiple of kv_heads"):
        load_models(bad)
    bad.write_text(text.replace('mlp = "gelu"', 'mlp = "relu"'))
    with pytest.raises(ModelSpecError, match="mlp"):
        load_models(bad)
    bad.write_text(text + text[text.index("\n[[model]]"):])
    with pytest.raises(ModelSpecError, match="twice"):
        load_models(bad)
    with pytest.raises(KeyError, match="unknown model"):
        transformer.get_model("llama-4")


@pytest.mark.parametrize(
    ("name", "dtype", "expected"),
    [
        ("Llama-3-8B", "bf16", 2 * 32 * 8 * 128 * 2),     # 131,072 B = 128 KiB
        ("Llama-3-70B", "bf16", 2 * 80 * 8 * 128 * 2),    # 327,680 B = 320 KiB
        ("GPT-2-small", "bf16", 2 * 12 * 12 * 64 * 2),    # 36,864 B (no GQA)
        ("Llama-3-8B", "fp8", 2 * 32 * 8 * 128 * 1),      # 65,536 B
    ],
)
def test_kv_cache_per_token(name, dtype, expected):
    assert serving.kv_cache_bytes_per_token(name, dtype).to("byte").m == expected


def test_kv_cache_per_request_and_gqa():
    # 4 requests of 8192 tokens on Llama-3-70B: 4 * 8192 * 327,680 B = 10 GiB exactly
    assert serving.kv_cache_bytes("Llama-3-70B", 8192, batch=4).to("GiB").m == pytest.approx(10)
    # GQA: 8 KV heads instead of 32 divides the cache by 4
    import dataclasses

    mha = dataclasses.replace(transformer.get_model("Llama-3-8B"), kv_heads=32)
    assert serving.kv_cache_bytes_per_token(mha) == 4 * serving.kv_cache_bytes_per_token("Llama-3-8B")


def test_decode_step_is_weight_bound_at_batch_1():
    # Llama-3-8B, bf16, H100 (3.35 TB/s): 7,504,658,432 weights * 2 B / 3.35e12 B/s = 4.4804 ms
    t = serving.decode_step_time("Llama-3-8B", 0, "H100")
    assert t.to("ms").m == pytest.approx(7_504_658_432 * 2 / 3.35e12 * 1e3, rel=1e-9)
    assert t.to("ms").m == pytest.approx(4.4804, rel=1e-4)
    assert serving.decode_throughput("Llama-3-8B", 0, "H100").to("1/s").m == pytest.approx(1 / 4.4804e-3, rel=1e-4)


def test_prefill_is_compute_bound():
    # 2048 tokens: 2 * 7,504,658,432 * 2048 + 4 * 32 * 4096 * (2048 * 2049 / 2) FLOP
    flops = 2 * 7_504_658_432 * 2048 + 4 * 32 * 4096 * 2048 * 2049 // 2
    assert flops == 30_739_080_937_472 + 1_100_048_498_688  # = 31,839,129,436,160
    cost = serving.prefill_cost("Llama-3-8B", 2048)
    assert cost.flops.m == flops
    # bytes: weights 15,009,316,864 + KV written 2048 * 131,072
    assert cost.bytes.m == 7_504_658_432 * 2 + 2048 * 131_072
    assert serving.prefill_time("Llama-3-8B", 2048, "H100").to("ms").m == pytest.approx(flops / 989.5e12 * 1e3)


@pytest.mark.parametrize(
    ("accel", "dtype", "expected"),
    [
        ("H100", "bf16", 296),   # 989.5e12 * 2 B / (2 * 3.35e12) = 295.37 -> 296
        ("H100", "fp8", 296),    # 1979e12 * 1 B / (2 * 3.35e12) = 295.37 -> 296
        ("A100", "bf16", 154),   # 312e12 * 2 / (2 * 2.039e12) = 153.02 -> 154
    ],
)
def test_critical_batch_at_zero_context_is_ridge_times_itemsize_over_2(accel, dtype, expected):
    assert serving.decode_critical_batch("Llama-3-8B", accel, dtype) == expected


def test_critical_batch_with_context():
    # Llama-3-8B on an H100, context 256: per request F = 2 * 7,504,658,432 + 4 * 32 * 4096 * 257 FLOP,
    # KV read 256 * 131,072 B; b* = W/B / (F/P - cK/B)
    f = 2 * 7_504_658_432 + 4 * 32 * 4096 * 257
    w, kv = 7_504_658_432 * 2, 256 * 131_072
    slope = f / 989.5e12 - kv / 3.35e12
    import math

    assert serving.decode_critical_batch("Llama-3-8B", "H100", context=256) == math.ceil(w / 3.35e12 / slope)
    # at 4096 tokens the KV cache (537 MB per request, 160 us) outweighs the FLOPs (17 us): never compute-bound
    assert serving.decode_critical_batch("Llama-3-8B", "H100", context=4096) is None


def test_model_states_mixed_precision_adam_is_16_bytes_per_parameter():
    s = training_memory.model_state_bytes(1_000_000)
    assert (s.weights.m, s.gradients.m, s.optimizer.m, s.total.m) == (2e6, 2e6, 12e6, 16e6)
    assert training_memory.model_state_bytes("Llama-3-8B").total.m == 16 * 8_030_261_248
    # ZeRO-3 over 8 ranks: everything / 8 -> 2 B per parameter
    assert training_memory.model_state_bytes(1_000_000, zero_stage=3, dp=8).total.m == 2e6
    # ZeRO-1 over 4: 2 + 2 + 12 / 4 = 7 B per parameter
    assert training_memory.model_state_bytes(1_000_000, zero_stage=1, dp=4).total.m == 7e6
    # plain SGD in fp32, no master copy: 4 + 4 B
    assert training_memory.model_state_bytes(10, "fp32", "fp32", "sgd", master_weights=False).total.m == 80


def test_activations_korthikanti_by_hand():
    # GPT-2 small, s = 1024, b = 1, h = 768, a = 12: s b h = 786,432
    # none: 786,432 * (34 + 5 * 12 * 1024 / 768) = 786,432 * 114 = 89,653,248 B per layer
    assert training_memory.activation_bytes_per_layer(1024, 1, 768, 12).m == 89_653_248
    assert training_memory.activation_bytes("gpt2", 1024).m == 12 * 89_653_248
    # selective: 34 s b h; full: 2 s b h
    assert training_memory.activation_bytes("gpt2", 1024, recompute="selective").m == 12 * 34 * 786_432
    assert training_memory.activation_bytes("gpt2", 1024, recompute="full").m == 12 * 2 * 786_432
    # tensor parallel t = 4 without SP: s b h (10 + 24/4 + 5 a s / (4 h)) = 786,432 * (16 + 20) per layer
    assert training_memory.activation_bytes_per_layer(1024, 1, 768, 12, "none", 4).m == 786_432 * 36
    # with SP: s b h (34 + 80) / 4
    assert training_memory.activation_bytes_per_layer(1024, 1, 768, 12, "none", 4, True).m == 786_432 * 114 / 4


def test_training_memory_total():
    tm = training_memory.training_memory("gpt2", 1024, 1, "full")
    assert tm.total.m == 16 * 124_439_808 + 12 * 2 * 786_432


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: serving.kv_cache_bytes("gpt2", 0), ValueError),
        (lambda: serving.decode_step_time("gpt2", -1, "H100"), ValueError),
        (lambda: serving.decode_step_time("gpt2", 1.5, "H100"), TypeError),
        (lambda: serving.prefill_time("gpt2", 10, "H100", batch=True), TypeError),
        (lambda: training_memory.model_state_bytes(10, optimizer="lion"), ValueError),
        (lambda: training_memory.model_state_bytes(10, zero_stage=4), ValueError),
        (lambda: training_memory.activation_bytes("gpt2", 1024, recompute="some"), ValueError),
        (lambda: training_memory.model_state_bytes(float("inf")), TypeError),
    ],
)
def test_bad_inputs(call, error):
    with pytest.raises(error):
        call()


def test_roof_argument_accepts_measured_roofs():
    from mlsys.roofline import Roof

    roof = Roof(Q_(500, "TFLOP/s"), Q_(2, "TB/s"), "measured")
    # batch 1, context 0: 15,009,316,864 B / 2e12 B/s = 7.5047 ms
    assert serving.decode_step_time("Llama-3-8B", 0, roof).to("ms").m == pytest.approx(7.504658432)


def test_max_batch_in_memory_by_hand():
    # H100: 80 GiB = 85,899,345,920 B; Llama-3-8B weights 8,030,261,248 * 2 B = 16,060,522,496 B;
    # free 69,838,823,424 B; 8192 tokens * 131,072 B = 1 GiB per request -> 65.04 -> 65
    assert serving.max_batch_in_memory("Llama-3-8B", "H100", 8192) == 65
    # Llama-3-70B in bf16 (141.1 GB of weights) does not fit an 80 GiB H100 at all
    assert serving.max_batch_in_memory("Llama-3-70B", "H100", 1024) == 0
    # fp8 weights and cache: free 85,899,345,920 - 8,030,261,248 = 77,869,084,672; 8192 * 65,536 = 0.5 GiB
    # -> 145.04 -> 145
    assert serving.max_batch_in_memory("Llama-3-8B", "H100", 8192, "fp8") == 145
