"""Activation quantization and the int8-activation tolerance: honest kernels pass, a dropped block fails."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.activations import int8_gemm, quantize_activations
from kernels.formats.packed import dequantize_packed
from kernels.formats.packing import FIRST_WAVE
from kernels.reference import FP32, INT8_ACTIVATIONS, build_problem, score


def test_quantize_rule() -> None:
    x = np.zeros((2, 64), dtype=np.float32)
    x[0, :32] = np.linspace(-2, 1, 32)
    qa = quantize_activations(x)
    assert qa.xq.dtype == np.int8 and qa.xs.shape == (2, 2) and qa.xsum.dtype == np.int32
    assert qa.xq[0, 0] == -127 and qa.xs[0, 0] == np.float32(2) / np.float32(127)
    assert np.all(qa.xq[0, 32:] == 0) and qa.xs[0, 1] == 0  # all-zero block: scale 0, no NaN
    assert qa.xsum[0, 0] == int(qa.xq[0, :32].astype(np.int32).sum())
    back = qa.xq.astype(np.float32).reshape(2, 2, 32) * qa.xs[:, :, None]
    assert np.abs(back.reshape(2, 64) - x).max() <= float(qa.xs.max()) / 2 + 1e-7
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_activations(np.zeros((1, 40), dtype=np.float32))


def test_round_half_to_even_like_rintf() -> None:
    x = np.zeros((1, 32), dtype=np.float32)
    x[0, 0] = 127.0
    x[0, 1:4] = [0.5, 1.5, 2.5]
    assert quantize_activations(x).xq[0, :4].tolist() == [127, 0, 2, 2]


@pytest.mark.parametrize("fmt", FIRST_WAVE)
def test_int8_model_passes_int8_tolerance_and_a_dropped_block_fails(fmt: str) -> None:
    p = build_problem(fmt, n=48, k=2048, m=3, seed=11)
    assert p.packed is not None
    qa = quantize_activations(p.x)
    good = score(p.expected, int8_gemm(p.packed, qa), INT8_ACTIVATIONS)
    assert good.passed and 1e-3 < good.rel_l2 < INT8_ACTIVATIONS.rel_l2_max / 2
    assert not score(p.expected, int8_gemm(p.packed, qa), FP32).passed  # FP32 bounds are too tight here
    # the packed layout with FP32 activations is within fp16 scale rounding of the reference
    fp32 = (p.x.astype(np.float64) @ dequantize_packed(p.packed).astype(np.float64).T).astype(np.float32)
    assert score(p.expected, fp32, FP32).passed
    dropped = p.packed.rows(slice(None))
    dropped.qs[:, -32:] = 0
    if dropped.mins is not None:
        dropped.mins[:, -1] = 0
    bad = score(p.expected, int8_gemm(dropped, qa), INT8_ACTIVATIONS)
    assert not bad.passed and bad.rel_l2 > INT8_ACTIVATIONS.rel_l2_max


def test_dropped_block_fails_even_at_the_largest_profile_k() -> None:
    # K = 17408 (Qwen36 FFN down): one block of 544 is the smallest detectable error in the profiles
    p = build_problem("Q8_0", n=16, k=17408, m=1, seed=2)
    assert p.packed is not None
    qa = quantize_activations(p.x)
    dropped = p.packed.rows(slice(None))
    dropped.qs[:, 32 * 100 : 32 * 101] = 0
    assert score(p.expected, int8_gemm(p.packed, qa), INT8_ACTIVATIONS).passed
    assert not score(p.expected, int8_gemm(dropped, qa), INT8_ACTIVATIONS).passed
