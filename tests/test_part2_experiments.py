"""Pure helpers of the Part II experiments, checked on listings and inputs written by hand."""

from __future__ import annotations

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
