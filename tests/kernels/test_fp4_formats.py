"""MXFP4 and NVFP4: registered with new codebook ids, quantized by gguf (MXFP4) or by ggml's reference rule
checked against gguf's dequantizer (NVFP4), and the kernel-side transforms of the MXFP4 GEMM package."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

from kernels.formats import fp4
from kernels.formats.registry import FORMATS, codebook_name, get_format
from kernels.reference import build_problem, quantize_random
from service.tables.model import CODEBOOK_FORMATS


def test_fp4_formats_are_registered_with_new_codebooks() -> None:
    mx, nv = get_format("MXFP4"), get_format("NVFP4")
    assert (mx.codebook, nv.codebook) == (32, 33)  # ids >= 32: outside the Llaminar numbering
    assert (mx.block_weights, mx.block_bytes) == GGML_QUANT_SIZES[GGMLQuantizationType.MXFP4] == (32, 17)
    assert (nv.block_weights, nv.block_bytes) == GGML_QUANT_SIZES[GGMLQuantizationType.NVFP4] == (64, 36)
    assert mx.bits_per_weight == pytest.approx(4.25) and nv.bits_per_weight == pytest.approx(4.5)
    assert codebook_name(32) == "MXFP4" and codebook_name(33) == "NVFP4"
    for f in FORMATS.values():  # the table generator's comments know every codebook
        assert f.name in CODEBOOK_FORMATS[f.codebook]


def test_mxfp4_problem_is_quantized_by_gguf() -> None:
    p = build_problem("MXFP4", n=8, k=128, m=2, seed=1)
    w = np.random.default_rng([1, 1]).standard_normal((8, 128), dtype=np.float32)
    assert np.array_equal(p.weights, quants.quantize(w, GGMLQuantizationType.MXFP4))
    deq = quants.dequantize(p.weights, GGMLQuantizationType.MXFP4)
    np.testing.assert_allclose(p.expected, p.x @ deq.T, rtol=1e-5, atol=1e-4)
    assert 0.05 < np.linalg.norm(deq - w) / np.linalg.norm(w) < 0.2  # a 4-bit format, not a copy


def test_nvfp4_quantizer_round_trips_through_gguf_dequantize() -> None:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 256), dtype=np.float32) * rng.uniform(0.01, 10, (16, 1)).astype(np.float32)
    blocks = fp4.quantize_nvfp4(w)
    assert blocks.shape == (16, 256 // 64 * 36) and blocks.dtype == np.uint8
    deq = quants.dequantize(blocks, GGMLQuantizationType.NVFP4)
    rel = np.linalg.norm(deq - w) / np.linalg.norm(w)
    assert 0.03 < rel < 0.15
    # every weight is the nearest grid point of its sub-block's decoded scale (ties aside)
    d = quants.NVFP4.ue4m3_to_fp32(blocks.reshape(-1, 36)[:, :4]).reshape(-1, 1) * 2  # true scale
    grid = np.array(fp4.E2M1_VALUES, dtype=np.float64)
    sub = w.reshape(-1, 16).astype(np.float64)
    best = np.abs(np.abs(sub)[:, :, None] - d[:, :, None] * grid).min(axis=-1)
    np.testing.assert_allclose(np.abs(deq.reshape(-1, 16) - sub), best, rtol=1e-6, atol=1e-7)
    # quantizing the dequantized weights gives the same bytes (the rule is a projection)
    assert np.array_equal(fp4.quantize_nvfp4(deq), blocks)
    # the sub-block layout is gguf's: weight j low nibble, j + 8 high nibble of byte j
    one = np.zeros((1, 64), dtype=np.float32)
    one[0, 9] = 6.0
    b = fp4.quantize_nvfp4(one)
    assert b[0, 4 + 1] >> 4 == 7 and quants.dequantize(b, GGMLQuantizationType.NVFP4)[0, 9] == 6.0


def test_nvfp4_problem_uses_the_own_quantizer() -> None:
    fmt = get_format("NVFP4")
    w = quantize_random(fmt, 4, 128, seed=2)
    again = fp4.quantize_nvfp4(np.random.default_rng([2, 1]).standard_normal((4, 128), dtype=np.float32))
    assert np.array_equal(w, again)
    p = build_problem("NVFP4", n=4, k=128, m=1, seed=2)
    deq = quants.dequantize(p.weights, GGMLQuantizationType.NVFP4)
    np.testing.assert_allclose(p.expected, p.x @ deq.T, rtol=1e-5, atol=1e-4)


def test_planar_layout_holds_the_same_weights() -> None:
    p = build_problem("MXFP4", n=16, k=96, m=1, seed=4)
    planar = fp4.planar_mxfp4(p.weights)
    assert planar.size == 16 * 96 // 2 + 16 * 96 // 32  # the format's true bytes
    packed = planar[: 16 * 48].reshape(16, 48)
    scales = planar[16 * 48 :].reshape(3, 16).T
    codes = np.empty((16, 96), dtype=np.uint8)
    codes[:, 0::2], codes[:, 1::2] = packed & 0x0F, packed >> 4
    w = fp4.e2m1_value(codes) * np.repeat(fp4.e8m0_to_float(scales), 32, axis=1)
    np.testing.assert_array_equal(w, quants.dequantize(p.weights, GGMLQuantizationType.MXFP4))


def test_e4m3_rounding_and_mx_activation_rule() -> None:
    v = np.array([0.0, 1.0, 1.0625, 1.1875, 17.0, 300.0, 460.0, 1e4, 2.0**-9, 3 * 2.0**-10, -2.5])
    got = fp4.e4m3_round(v)
    # ties to even: 1.0625 is halfway between 1 and 1.125 -> 1; 1.1875 -> 1.25; 17 -> 16 (step 2, even)
    assert list(got) == [0.0, 1.0, 1.0, 1.25, 16.0, 288.0, 448.0, 448.0, 2.0**-9, 2.0**-8, -2.5]
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    x[1, :32] = 0.0
    q = fp4.mxfp8_activations(x)
    assert np.all(q[1, :32] == 0.0)
    blocks = q.reshape(4, 2, 32)
    amax = np.abs(x.reshape(4, 2, 32)).max(axis=-1)
    for i, j in zip(*np.nonzero(amax), strict=True):
        scale = 2.0 ** (np.floor(np.log2(amax[i, j])) - 8)
        codes = blocks[i, j] / scale
        assert np.array_equal(codes, fp4.e4m3_round(codes)) and np.abs(codes).max() <= 448
    rel = np.linalg.norm(q - x) / np.linalg.norm(x)
    assert 0.01 < rel < 0.05  # about 3 mantissa bits
