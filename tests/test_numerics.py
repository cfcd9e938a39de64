"""mlsys.numerics: bit-exact formats. Known answers by hand, brute-force and torch cross-checks."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys import numerics as nm

SMALL = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp4_e2m1"]


def test_existing_itemsize_unchanged():
    assert nm.itemsize("bf16").to("byte").m == 2
    assert nm.itemsize("fp4").to("byte").m == 0.5
    assert nm.canonical_dtype("torch.float8_e4m3fn") == "fp8_e4m3"


@pytest.mark.parametrize(
    "fmt, mx, mn, sub, eps",
    [
        # fp32: (2 - 2^-23) 2^127, 2^-126, 2^-149, 2^-23
        ("fp32", (2 - 2**-23) * 2.0**127, 2.0**-126, 2.0**-149, 2.0**-23),
        # tf32: 10 mantissa bits, fp32's exponent
        ("tf32", (2 - 2**-10) * 2.0**127, 2.0**-126, 2.0**-136, 2.0**-10),
        ("bf16", (2 - 2**-7) * 2.0**127, 2.0**-126, 2.0**-133, 2.0**-7),
        # fp16: exponent 30 - 15 = 15, (2 - 2^-10) 2^15 = 65504
        ("fp16", 65504.0, 2.0**-14, 2.0**-24, 2.0**-10),
        # E4M3FN: exponent 15 - 7 = 8 with mantissa 110: 1.75 * 256 = 448
        ("fp8_e4m3", 448.0, 2.0**-6, 2.0**-9, 2.0**-3),
        # E5M2: exponent 30 - 15 = 15, 1.75 * 32768 = 57344
        ("fp8_e5m2", 57344.0, 2.0**-14, 2.0**-16, 2.0**-2),
        # E2M1: exponent 3 - 1 = 2, 1.5 * 4 = 6; min normal 2^0; subnormal 0.5 * 2^0
        ("fp4_e2m1", 6.0, 1.0, 0.5, 0.5),
    ],
)
def test_format_constants(fmt, mx, mn, sub, eps):
    assert nm.max_value(fmt) == mx
    assert nm.min_normal(fmt) == mn
    assert nm.min_subnormal(fmt) == sub
    assert nm.epsilon(fmt) == eps


def test_fp4_values_match_the_ocp_mx_table():
    # OCP MX spec, FP4 E2M1: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6
    mags = [0.5, 1, 1.5, 2, 3, 4, 6]
    assert nm.values("fp4_e2m1").tolist() == [-m for m in reversed(mags)] + [0.0] + mags
    # every code decodes: 0b0111 = +6, 0b1001 = -0.5, 0b1000 = -0
    assert nm.decode(0b0111, "fp4") == 6.0
    assert nm.decode(0b1001, "fp4") == -0.5
    assert math.copysign(1, nm.decode(0b1000, "fp4")) == -1


def test_value_counts():
    # E4M3FN: 256 codes - 2 NaN (0x7F, 0xFF) - one duplicate zero = 253
    assert len(nm.values("fp8_e4m3")) == 253
    # E5M2: 256 - 2 inf - 6 NaN (exp 31, mantissa 1..3, both signs) - one zero = 247
    assert len(nm.values("fp8_e5m2")) == 247
    # fp16: 65536 - 2 inf - 2 * 1023 NaN - 1 = 63487
    assert len(nm.values("fp16")) == 65536 - 2 - 2046 - 1


@pytest.mark.parametrize(
    "bits, fmt, value",
    [
        (0x3F800000, "fp32", 1.0),
        (0xC0490FDB, "fp32", -3.1415927410125732),  # float32(pi), negated
        (0x3C00, "fp16", 1.0),
        (0x7BFF, "fp16", 65504.0),
        (0x0001, "fp16", 2.0**-24),
        (0x3F80, "bf16", 1.0),
        (0x4049, "bf16", 3.140625),  # 1.1001001b * 2 = 3.140625
        (0x38, "fp8_e4m3", 1.0),  # 0.0111.000: exponent 7 - 7 = 0
        (0x7E, "fp8_e4m3", 448.0),  # 0.1111.110
        (0x01, "fp8_e4m3", 2.0**-9),  # subnormal 1/8 * 2^-6
        (0x3C, "fp8_e5m2", 1.0),  # 0.01111.00
        (0x7B, "fp8_e5m2", 57344.0),  # 0.11110.11
        (0x1FC00, "tf32", 1.0),  # 0.01111111.0000000000 (19 bits)
    ],
)
def test_decode_known_patterns(bits, fmt, value):
    assert nm.decode(bits, fmt) == value
    assert nm.encode(value, fmt) == bits


def test_specials():
    assert math.isnan(nm.decode(0x7F, "fp8_e4m3")) and math.isnan(nm.decode(0xFF, "fp8_e4m3"))
    assert nm.decode(0x78, "fp8_e4m3") == 256.0  # 0.1111.000 is a number in E4M3FN, not inf
    assert nm.decode(0x7C, "fp8_e5m2") == math.inf
    assert math.isnan(nm.decode(0x7D, "fp8_e5m2"))
    assert nm.decode(0xFC00, "fp16") == -math.inf
    assert math.isnan(nm.decode(nm.encode(math.nan, "bf16"), "bf16"))


def test_rounding_ties_to_even_and_overflow_rules():
    # fp16 near 1: spacing 2^-10. 1 + 2^-11 is a tie between 1 (even mantissa) and 1 + 2^-10
    assert nm.round_to_format(1 + 2**-11, "fp16") == 1.0
    # 1 + 3 * 2^-11 ties between 1 + 2^-10 (odd) and 1 + 2^-9 (even): goes up
    assert nm.round_to_format(1 + 3 * 2**-11, "fp16") == 1 + 2**-9
    # E4M3: above 448 the next step would be 480 (the NaN code): 464 is the tie, 448 is even
    assert nm.encode(464.0, "fp8_e4m3") == 0x7E
    # saturating: 470, 1e9 and inf all become 448 (torch.float8_e4m3fn does the same)
    assert nm.encode(470.0, "fp8_e4m3") == 0x7E
    assert nm.encode(math.inf, "fp8_e4m3") == 0x7E
    assert nm.encode(-1e9, "fp8_e4m3") == 0xFE
    # E5M2: 57344 = 1.11b * 2^15; tie with 65536 at 61440 goes to the even mantissa (inf)
    assert nm.round_to_format(61439.0, "fp8_e5m2") == 57344.0
    assert nm.round_to_format(61440.0, "fp8_e5m2") == math.inf
    # fp16: 65520 is the tie between 65504 and 65536 -> inf; 65519 -> 65504
    assert nm.round_to_format(65519.0, "fp16") == 65504.0
    assert nm.round_to_format(65520.0, "fp16") == math.inf
    # fp4: 5 is the tie between 4 (mantissa 0, even) and 6 -> 4; 7 and inf saturate to 6
    assert nm.round_to_format(5.0, "fp4") == 4.0
    assert nm.round_to_format(2.5, "fp4") == 2.0
    assert nm.round_to_format(7.0, "fp4") == 6.0
    assert nm.round_to_format(-math.inf, "fp4") == -6.0
    # underflow: half the smallest subnormal is a tie with 0 -> 0; a bit more -> subnormal
    assert nm.round_to_format(2.0**-25, "fp16") == 0.0
    assert nm.round_to_format(2.0**-25 * 1.01, "fp16") == 2.0**-24
    # sign of zero is kept
    assert nm.encode(-0.0, "bf16") == 0x8000


def test_encode_decode_arrays():
    x = np.array([[1.0, -2.0], [0.5, 448.0]])
    bits = nm.encode(x, "fp8_e4m3")
    assert bits.shape == (2, 2)
    assert np.array_equal(nm.decode(bits, "fp8_e4m3"), x)


_TABLES = {f: nm.values(f) for f in ["fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "fp16", "bf16"]}


def _nearest_brute(x: float, table: np.ndarray) -> set[float]:
    d = np.abs(table - x)
    return set(table[d == d.min()].tolist())


@settings(max_examples=300, deadline=None)
@given(fmt=st.sampled_from(["fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "fp16", "bf16"]), data=st.data())
def test_round_trip_is_the_nearest_representable_value(fmt, data):
    table = _TABLES[fmt]
    mx = nm.max_value(fmt)
    x = data.draw(st.floats(min_value=-mx, max_value=mx, allow_nan=False))
    got = nm.round_to_format(x, fmt)
    nearest = _nearest_brute(x, table)
    assert got in nearest
    if len(nearest) == 2:  # a tie: the chosen one has an even mantissa (last bit 0)
        assert nm.encode(got, fmt) & 1 == 0


@settings(max_examples=200, deadline=None)
@given(x=st.floats(allow_nan=False, allow_infinity=False, width=32))
def test_fp32_encode_matches_the_ieee_bits(x):
    # independent method: struct packs a Python float into IEEE binary32 (round to nearest even)
    (bits,) = struct.unpack(">I", struct.pack(">f", x))
    assert nm.encode(x, "fp32") == bits
    assert nm.decode(bits, "fp32") == x


@pytest.mark.parametrize(
    "fmt, dtype, view",
    [
        ("fp8_e4m3", "float8_e4m3fn", "uint8"),
        ("fp8_e5m2", "float8_e5m2", "uint8"),
        ("fp16", "float16", "int16"),
        ("bf16", "bfloat16", "int16"),
    ],
)
def test_encode_agrees_with_torch_casts_bit_for_bit(fmt, dtype, view):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(1234)
    # scales that exercise subnormals, normals and overflow of every format
    parts = [torch.randn(1500, generator=g) * s for s in (1e-7, 1e-4, 1e-2, 1.0, 40.0, 600.0, 1e5, 1e39)]
    specials = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 448.0, 464.0, 480.0, 61440.0, 65520.0])
    x = torch.cat([*parts, specials])
    dt, vt = getattr(torch, dtype), getattr(torch, view)
    nbits = torch.finfo(dt).bits
    ref = x.to(dt).view(vt).numpy().astype(np.int64) & ((1 << nbits) - 1)
    mine = nm.encode(x.double().numpy(), fmt)
    assert np.array_equal(mine, ref), np.nonzero(mine != ref)
    # decoding agrees with torch's own conversion back to float32
    back = x.to(dt).float().double().numpy()
    assert np.array_equal(nm.decode(ref, fmt), back)


def test_fp4_encode_agrees_with_ml_dtypes():
    # independent implementation (Google's ml_dtypes; optional, not in requirements.txt)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.normal(size=3000) * s for s in (0.3, 1.0, 3.0, 10.0)]).astype(np.float32)
    x = np.concatenate([x, np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, np.inf, -np.inf], dtype=np.float32)])
    ref = x.astype(ml_dtypes.float4_e2m1fn).view(np.uint8).astype(np.int64)
    assert np.array_equal(nm.encode(x.astype(np.float64), "fp4_e2m1"), ref)


def test_nan_into_torch_formats_stays_nan():
    for fmt in ("fp8_e4m3", "fp8_e5m2", "fp16", "bf16", "fp32", "tf32"):
        assert math.isnan(nm.round_to_format(math.nan, fmt))


def test_bit_table_renders_fields_and_values():
    md = nm.bit_table("fp8_e4m3")
    assert md.splitlines()[1] == "|---|---|"
    assert "| bias | 7 |" in md
    assert "| max | 448 |" in md
    assert "2^-9" in md  # min subnormal
    text = nm.bit_table("bf16", markdown=False)
    assert "1 sign + 8 exponent + 7 mantissa" in text
    assert "rounds to ±inf" in text


def test_errors():
    with pytest.raises(ValueError, match="ambiguous"):
        nm.encode(1.0, "fp8")
    with pytest.raises(ValueError, match="unknown dtype"):
        nm.max_value("fp7")
    with pytest.raises(ValueError, match="no bit-level model"):
        nm.values("int8")
    with pytest.raises(ValueError, match=r"\[0, 2\*\*8\)"):
        nm.decode(256, "fp8_e5m2")
    with pytest.raises(TypeError, match="bit pattern"):
        nm.decode(1.5, "fp16")
    with pytest.raises(ValueError, match="no NaN"):
        nm.encode(math.nan, "fp4_e2m1")
    with pytest.raises(ValueError, match="at most 19 bits"):
        nm.values("fp32")
    with pytest.raises(TypeError, match="real number"):
        nm.encode("1.0", "fp16")


@pytest.mark.parametrize(("fmt", "binades"), [
    # top finite exponent code: IEEE formats keep 2^E - 1 for inf/NaN, so 2^E - 2 codes of normals
    ("fp16", 30),  # 2^5 - 2: 2^-14 .. 2^15 (65504 = 1.999 x 2^15)
    ("bf16", 254),  # 2^8 - 2: 2^-126 .. 2^127
    ("fp8_e5m2", 30),  # 2^5 - 2: 2^-14 .. 2^15 (57344 = 1.75 x 2^15)
    ("fp8_e4m3", 15),  # no inf: 2^4 - 1, 2^-6 .. 2^8 (448 = 1.75 x 2^8)
    ("fp4_e2m1", 3),  # no inf, no NaN: 2^2 - 1, 2^0 .. 2^2 (6 = 1.5 x 2^2)
])
def test_normal_binades_by_hand(fmt, binades):
    assert nm.normal_binades(fmt) == binades
