"""tb-split: a same-size repack of the GGUF blocks whose own dequantisation equals gguf's bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import quants

from kernels.formats.registry import get_format
from kernels.formats.split import SPLITTABLE, dequantize_split, join_split, spec_of, split_blocks
from kernels.packages.layouts import layout_for
from kernels.reference import build_problem, quantize_random

FIRST_WAVE_9 = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q4_K", "Q6_K", "IQ4_XS")


def test_every_first_wave_format_splits() -> None:
    assert set(FIRST_WAVE_9) <= set(SPLITTABLE)


@pytest.mark.parametrize("name", FIRST_WAVE_9)
def test_split_is_same_size_and_round_trips(name: str) -> None:
    fmt = get_format(name)
    k = 2 * max(256, fmt.block_weights)
    blocks = quantize_random(fmt, 7, k, seed=3)
    parts = split_blocks(fmt, blocks)
    total = sum(a.nbytes for a in parts.values() if a is not None)
    assert total == blocks.nbytes == 7 * fmt.row_bytes(k)
    spec = spec_of(fmt)
    assert spec.part_bytes("qs") + spec.part_bytes("qh") + spec.part_bytes("sc") == fmt.block_bytes
    qs = parts["qs"]
    assert qs is not None and qs.shape == (7, k * spec.qbits // 8)  # payload rows: K*q/8 bytes
    assert (parts["qh"] is None) == (name not in ("Q5_0", "Q5_1", "Q6_K"))
    np.testing.assert_array_equal(join_split(fmt, parts), blocks)


@pytest.mark.parametrize("name", FIRST_WAVE_9)
def test_dequantize_split_equals_gguf_bit_for_bit(name: str) -> None:
    fmt = get_format(name)
    blocks = quantize_random(fmt, 5, 1024, seed=11)
    # every bit pattern of the scale/high-bit bytes too, not only what a quantizer produces
    rng = np.random.default_rng(5)
    noisy = blocks.copy()
    noisy[:, :] = rng.integers(0, 256, size=blocks.shape, dtype=np.uint8)
    for weights in (blocks, noisy):
        with np.errstate(all="ignore"):  # random fp16 bit patterns include inf / NaN scales
            expected = quants.dequantize(weights, fmt.ggml_type)
            got = dequantize_split(fmt, split_blocks(fmt, weights))
        finite = np.isfinite(expected)
        np.testing.assert_array_equal(np.isfinite(got), finite)
        assert np.array_equal(got[finite].view(np.uint32), expected[finite].view(np.uint32))


def test_layout_arrays_and_bits() -> None:
    layout = layout_for("tb-split")
    problem = build_problem("Q5_0", 16, 256, 1, seed=1, packed=False)
    arrays = layout.arrays(problem)
    assert sum(a.nbytes for a in arrays.values() if a is not None) == problem.weights.nbytes
    for name in FIRST_WAVE_9:
        fmt = get_format(name)
        assert layout.supports(fmt) is None
        assert layout.bits_per_weight(fmt) == fmt.bits_per_weight
        defines = layout.defines(fmt)
        assert defines[f"TB_FMT_{name}"] == "1"
        assert int(defines["TB_QS_BYTES"]) + int(defines["TB_QH_BYTES"]) + int(defines["TB_SC_BYTES"]) == (
            fmt.block_bytes
        )
    assert layout.bits_per_weight(get_format("Q4_0")) == 4.5
    assert layout.supports(get_format("Q2_K")) is not None
