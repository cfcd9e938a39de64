"""Pure helpers of the Part II experiments, checked on listings and inputs written by hand."""

from __future__ import annotations

import pytest
import torch

from mlsys.bench.experiments import inductor_code, kernel_artefacts, sparsity_24

CUOBJDUMP = """
        /*0070*/               @P0 EXIT ;                                             /* 0x000000000000094d */
                                                                                      /* 0x000fea0003800000 */
        /*00e0*/                   LDG.E.128 R4, desc[UR4][R4.64] ;                   /* 0x0000000404047981 */
        /*0100*/              @!P1 STG.E desc[UR4][R6.64], R9 ;                       /* 0x0000000906007986 */
        /*0200*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24 ;     /* 0x0000000418187986 */
        /*0210*/                   HMMA.16816.F32 R8, R12, R16, R8 ;
"""
NVDISASM = """
--:-:1:-:7	S2R R17, SR_CTAID.X;
--:4:2:-:1	@!P0 LDG.E R0, desc[UR4][R6.64];
02:-:1:-:2	MUFU.EX2 R3, R3;
--:-:-:Y:4	HGMMA.64x128x16.F32.BF16 gdesc[UR8], R24, gsb0 ;
"""


def test_sass_opcodes_keep_modifiers_and_drop_predicates():
    assert kernel_artefacts.sass_opcodes(CUOBJDUMP) == [
        "EXIT", "LDG.E.128", "STG.E", "HGMMA.64x64x16.F32.BF16", "HMMA.16816.F32"]
    assert kernel_artefacts.sass_opcodes(NVDISASM) == ["S2R", "LDG.E", "MUFU.EX2", "HGMMA.64x128x16.F32.BF16"]


def test_sass_counts_by_mnemonic():
    c = kernel_artefacts.count_sass(CUOBJDUMP + NVDISASM)
    assert c["instructions"] == 9
    assert c["mnemonics"]["HGMMA"] == 2 and c["mnemonics"]["LDG"] == 2 and c["mnemonics"]["HMMA"] == 1
    assert c["opcodes"]["HGMMA.64x64x16.F32.BF16"] == 1


def test_clean_sass_drops_encodings():
    text = kernel_artefacts.clean_sass(CUOBJDUMP)
    assert "0x000fea" not in text and "LDG.E.128 R4" in text
    assert kernel_artefacts.sass_opcodes(text) == kernel_artefacts.sass_opcodes(CUOBJDUMP)


def test_ptx_counts():
    ptx = "ld.global.nc.f32 %f1, [%rd1];\nld.global.v4.f32 {...}\nst.global.f32 [%rd2], %f3;\n" \
          "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16 ...\nex2.approx.f32 %f4, %f5;"
    c = kernel_artefacts.count_ptx(ptx)
    assert (c["ld.global"], c["st.global"], c["wgmma"], c["ex2"], c["mma"]) == (2, 1, 1, 1, 0)


def test_prune_2_4_keeps_the_two_largest_of_each_four():
    w = torch.tensor([[1.0, -4.0, 3.0, 2.0, 0.5, 0.125, -0.25, 0.375]])
    assert sparsity_24.prune_2_4(w).tolist() == [[0.0, -4.0, 3.0, 0.0, 0.5, 0.0, 0.0, 0.375]]


def test_inductor_kernel_names():
    code = "triton_poi_fused_add_gelu_mul_0 = async_compile.triton('triton_poi_fused_add_gelu_mul_0', '''\n" \
           "cpp_fused_amax_0 = async_compile.cpp_pybinding(['float*'], '''\nx = 1\n"
    assert inductor_code.kernels_in(code) == ["triton_poi_fused_add_gelu_mul_0", "cpp_fused_amax_0"]


PART2 = ("layer_roofline", "matmul_alignment", "wave_quantization", "sparsity_24", "kernel_artefacts",
         "conv_layout", "tile_configs", "inductor_code")


def test_part2_experiments_are_registered_shown_and_recorded():
    from pathlib import Path

    from mlsys.bench import experiment, records

    root = Path(__file__).resolve().parents[1]
    cat = experiment.catalogue()
    for name in PART2:
        exp = cat[name]
        for page in exp.shown_in:
            assert (root / f"{page}.md").exists(), f"{name} is shown in {page}, which does not exist"
        rec = records.load_experiment(name, device="nvidia-h100-80gb-hbm3")
        assert rec.device.startswith("NVIDIA H100"), f"{name} was not recorded on an H100"


def test_short_kernel_name_on_names_typed_by_hand():
    from mlsys.bench.profile import short_kernel_name

    softmax = ("void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<c10::BFloat16, float, c10::BFloat16>"
               "(c10::BFloat16*, c10::BFloat16 const*, long)")
    assert short_kernel_name(softmax) == "cunn_SoftMaxForwardReg"
    assert short_kernel_name("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT") == "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT"
    generic = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<F> >(int, F)"
    assert short_kernel_name(generic, args=2) == "elementwise_kernel<128, 4>"
    assert short_kernel_name("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_align2>(P)", args=1) == \
        "Kernel2<cutlass_80_tensorop_bf16_s16816gemm_align2>"
    with pytest.raises(ValueError, match="kernel name"):
        short_kernel_name("  ")


def test_kernel_profile_on_the_cpu_names_the_operator_and_times_it():
    from mlsys.bench.profile import kernel_profile

    x = torch.randn(256, 512)
    prof = kernel_profile(lambda: torch.softmax(x, dim=-1), "cpu", calls=2)
    names = [k["name"] for k in prof["kernels"]]
    assert "aten::_softmax" in names  # the operator that does the work, named by the profiler
    total = sum(k["time_per_call"]["value"] for k in prof["kernels"])
    assert prof["device_time_per_call"]["value"] >= total > 0  # the listed ones are the top of the sum
    assert prof["host_time_per_call"]["value"] > 0 and prof["calls"] == 2
    with pytest.raises(ValueError, match="at least one call"):
        kernel_profile(lambda: None, "cpu", calls=0)


def test_h200_recordings_hold_the_profiles_the_pages_explain_times_with():
    from mlsys.bench import records

    lr = records.load_experiment("layer_roofline", device="nvidia-h200")
    for layer in ("linear_t1", "softmax", "layer_norm", "gpt2_decode_mlp"):
        prof = lr[layer]["profile"]
        listed = sum(k["time_per_call"]["value"] for k in prof["kernels"])
        assert prof["kernels"] and abs(listed - prof["device_time_per_call"]["value"]) <= 1e-9 + 1e-6 * listed
        # a call's own kernels cannot take longer than the whole call timed around them, give or take noise
        assert prof["device_time_per_call"]["value"] <= 1.1 * lr[layer]["time"]["value"]
    sp = records.load_experiment("sparsity_24", device="nvidia-h200")
    for key in (k for k in sp.results if k.startswith("mm_")):
        case = sp[key]
        ratio = case["dense_profile"]["device_time_per_call"]["value"] / \
            case["cusparselt"]["profile"]["device_time_per_call"]["value"]
        assert ratio == pytest.approx(case["cusparselt"]["kernel_speedup"]["value"])
        # the per-call speed-up is the event-timed medians' ratio, recomputed
        dense_t = case["dense"]["timing"]["median"]
        sparse_t = case["cusparselt"]["throughput"]["timing"]["median"]
        assert dense_t / sparse_t == pytest.approx(case["cusparselt"]["speedup"]["value"])
    ind = records.load_experiment("inductor_code", device="nvidia-h200")
    assert [k["name"] for k in ind["bias_gelu_scale"]["compiled_profile"]["kernels"]] == \
        ind["bias_gelu_scale"]["kernels"]  # the kernel Inductor generated is the one the profiler saw run
