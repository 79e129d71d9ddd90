"""Packers: GGUF blocks -> kernel layout, checked against gguf's own dequantization."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import quants

from kernels.formats.packed import dequantize_packed
from kernels.formats.packing import (
    EXACT,
    FIRST_WAVE,
    PACKABLE,
    format_kind,
    gguf_quantizes,
    pack,
    random_blocks,
)
from kernels.formats.registry import get_format

GGUF_QUANTIZABLE = {"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"}


def blocks_for(name: str, n: int, k: int, seed: int) -> np.ndarray:
    f = get_format(name)
    rng = np.random.default_rng(seed)
    if gguf_quantizes(f):
        return quants.quantize(rng.standard_normal((n, k), dtype=np.float32) * 3, f.ggml_type)
    return random_blocks(f, n * k // f.block_weights, rng).reshape(n, f.row_bytes(k))


def test_first_wave_is_packable_and_gguf_quantizer_coverage_is_as_documented() -> None:
    assert set(FIRST_WAVE) <= set(PACKABLE)
    assert {n for n in PACKABLE if gguf_quantizes(get_format(n))} == GGUF_QUANTIZABLE


@pytest.mark.parametrize("name", PACKABLE)
def test_packed_dequantization_matches_gguf(name: str) -> None:
    f = get_format(name)
    raw = blocks_for(name, n=12, k=512, seed=7)
    p = pack(name, raw)
    kind = format_kind(name)
    assert p.qs.dtype == np.int8 and p.qs.shape == (12, 512)
    assert p.scales.dtype == np.float16 and p.scales.shape == (12, 512 // kind.group)
    assert (p.mins is not None) == kind.asymmetric and p.group == kind.group
    truth = quants.dequantize(raw, f.ggml_type)
    got = dequantize_packed(p)
    if name in EXACT:
        # fp16 scale (and min) taken over unchanged: bit-exact
        np.testing.assert_array_equal(got, truth)
    else:
        # scale*sub-scale (and dmin*min) products rounded to fp16: |error| <= 2^-11 relative per
        # product, so per weight <= 2^-11 * (|scale*q| + |min|) (+ fp32 rounding)
        assert not np.array_equal(got, truth)  # the rounding is real, the test would notice exactness
        w = p.qs.astype(np.float64).reshape(12, -1, p.group)
        bound = np.abs(w * p.scales.astype(np.float64)[:, :, None])
        if p.mins is not None:
            bound = bound + np.abs(p.mins.astype(np.float64))[:, :, None]
        bound = bound.reshape(12, 512) * 2.0**-11 + 1e-6
        assert np.all(np.abs(got.astype(np.float64) - truth) <= bound)


@pytest.mark.parametrize(
    ("name", "lo", "hi"),
    [("Q8_0", -128, 127), ("Q4_0", -8, 7), ("Q4_1", 0, 15), ("Q5_0", -16, 15), ("Q5_1", 0, 31),
     ("Q4_K", 0, 15), ("Q6_K", -32, 31), ("IQ4_NL", -127, 113), ("IQ4_XS", -127, 113)],
)  # fmt: skip
def test_values_are_de_offset_into_their_range(name: str, lo: int, hi: int) -> None:
    p = pack(name, blocks_for(name, n=16, k=1024, seed=3))
    assert lo <= int(p.qs.min()) and int(p.qs.max()) <= hi
    assert int(p.qs.max()) - int(p.qs.min()) >= (hi - lo) // 2  # the whole range is exercised


def test_q4_0_nibble_order_by_hand() -> None:
    # one block: d = 1.0, byte j = (hi << 4) | lo with lo = j, hi = 15 - j
    block = np.zeros((1, 18), dtype=np.uint8)
    block[0, 0:2] = np.array([1.0], dtype=np.float16).view(np.uint8)
    block[0, 2:] = [(15 - j) << 4 | j for j in range(16)]
    p = pack("Q4_0", block)
    assert p.qs[0, :16].tolist() == [j - 8 for j in range(16)]
    assert p.qs[0, 16:].tolist() == [7 - j for j in range(16)]


def test_q5_0_fifth_bit_by_hand() -> None:
    block = np.zeros((1, 22), dtype=np.uint8)
    block[0, 0:2] = np.array([2.0], dtype=np.float16).view(np.uint8)
    block[0, 2:6] = np.array([1 << 0 | 1 << 17], dtype="<u4").view(np.uint8)  # weights 0 and 17
    p = pack("Q5_0", block)
    expected = [-16] * 32
    expected[0] = expected[17] = 0  # 16 - 16
    assert p.qs[0].tolist() == expected
    np.testing.assert_array_equal(
        dequantize_packed(p), quants.dequantize(block, get_format("Q5_0").ggml_type)
    )


def test_q4_k_min_term_is_negative_dmin_times_min() -> None:
    f = get_format("Q4_K")
    block = np.zeros((1, f.block_bytes), dtype=np.uint8)
    block[0, 0:2] = np.array([0.5], dtype=np.float16).view(np.uint8)  # d
    block[0, 2:4] = np.array([0.25], dtype=np.float16).view(np.uint8)  # dmin
    block[0, 4] = 3  # sub-block 0 scale
    block[0, 8] = 5  # sub-block 0 min
    block[0, 16] = 0x21  # weight 0 -> 1, weight 32 (sub-block 1) -> 2
    p = pack(f, block)
    assert p.mins is not None
    assert float(p.scales[0, 0]) == 1.5 and float(p.mins[0, 0]) == -1.25
    assert p.qs[0, 0] == 1 and p.qs[0, 32] == 2
    np.testing.assert_array_equal(dequantize_packed(p), quants.dequantize(block, f.ggml_type))


def test_pack_rejects_ragged_rows_and_unknown_formats() -> None:
    with pytest.raises(ValueError, match="Q8_0"):
        pack("Q8_0", np.zeros((2, 35), dtype=np.uint8))
    with pytest.raises(KeyError, match="packable"):
        pack("IQ2_XXS", np.zeros((1, 66), dtype=np.uint8))


def test_rows_subset_and_nbytes() -> None:
    p = pack("Q4_1", blocks_for("Q4_1", 8, 64, 0))
    sub = p.rows(np.array([1, 5]))
    assert sub.qs.shape == (2, 64) and sub.mins is not None and sub.mins.shape == (2, 2)
    np.testing.assert_array_equal(dequantize_packed(sub), dequantize_packed(p)[[1, 5]])
    assert p.nbytes == 8 * 64 + 8 * 2 * 2 * 2
