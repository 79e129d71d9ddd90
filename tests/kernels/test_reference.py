"""Formats registry and FP32 reference: geometry from gguf, honest parity bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, quants

from kernels.formats.registry import FORMATS, KNOWN_CODEBOOKS, codebook_name, get_format
from kernels.reference import build_problem, reference_gemv, sample_rows, score

DESIGN_IDS = {
    "Q4_0": 0, "IQ4_NL": 4, "IQ4_XS": 4, "Q4_1": 5, "Q4_K": 5, "Q5_0": 6, "Q5_1": 7, "Q5_K": 7,
    "Q6_K": 8, "Q3_K": 9, "Q2_K": 10, "IQ3_S": 11, "IQ3_XXS": 12, "IQ2_S": 13, "IQ2_XS": 14,
    "IQ2_XXS": 15, "IQ1_S": 16, "IQ1_M": 17, "Q8_0": 19, "MXFP4": 32, "NVFP4": 33,
}  # fmt: skip


def test_registry_matches_design_and_gguf() -> None:
    assert {name: f.codebook for name, f in FORMATS.items()} == DESIGN_IDS
    for f in FORMATS.values():
        assert (f.block_weights, f.block_bytes) == GGML_QUANT_SIZES[f.ggml_type]
    assert get_format("Q8_0").bits_per_weight == pytest.approx(8.5)
    assert get_format("Q4_0").bits_per_weight == pytest.approx(4.5)
    assert frozenset(DESIGN_IDS.values()) == KNOWN_CODEBOOKS
    assert codebook_name(5) == "Q4_1/Q4_K"
    assert codebook_name(19) == "Q8_0"


def test_unknown_names_list_known_ones() -> None:
    with pytest.raises(KeyError, match="Q8_0"):
        get_format("Q9_9")
    with pytest.raises(KeyError, match="known ids"):
        codebook_name(3)


@pytest.mark.parametrize("fmt", ["Q8_0", "Q4_0", "Q5_1"])
def test_problem_reference_uses_gguf_dequantize(fmt: str) -> None:
    p = build_problem(fmt, n=16, k=64, m=2, seed=3)
    assert p.weights.dtype == np.uint8 and p.weights.shape == (16, get_format(fmt).row_bytes(64))
    w = quants.dequantize(p.weights, get_format(fmt).ggml_type)
    np.testing.assert_allclose(p.expected, p.x @ w.T, rtol=1e-5, atol=1e-4)
    again = build_problem(fmt, n=16, k=64, m=2, seed=3)
    assert np.array_equal(again.weights, p.weights) and np.array_equal(again.x, p.x)
    assert not np.array_equal(build_problem(fmt, n=16, k=64, m=2, seed=4).weights, p.weights)


def test_unquantizable_format_says_so() -> None:
    with pytest.raises(NotImplementedError, match="IQ2_XXS"):
        build_problem("IQ2_XXS", n=4, k=256, m=1, seed=0)


def test_score_accepts_fp32_rounding_and_rejects_one_dropped_block() -> None:
    p = build_problem("Q8_0", n=64, k=17408 // 4, m=2, seed=1)
    # An honest FP32 kernel: same weights, FP32 accumulation.
    w = quants.dequantize(p.weights, get_format("Q8_0").ggml_type).astype(np.float32)
    fp32 = (p.x @ w.T).astype(np.float32)
    good = score(p.expected, fp32)
    assert good.passed and good.cosine > 0.999999 and good.rel_l2 < 1e-5
    # Drop the last K block of every row.
    w_drop = w.copy()
    w_drop[:, -32:] = 0
    bad = score(p.expected, (p.x @ w_drop.T).astype(np.float32))
    assert not bad.passed and bad.rel_l2 > 1e-3


def test_score_fails_on_nan_and_corruption() -> None:
    p = build_problem("Q4_0", n=32, k=128, m=1, seed=0)
    y = p.expected.copy()
    y[0, 5] = np.nan
    nan = score(p.expected, y)
    assert not nan.passed and math.isnan(nan.cosine)
    y = p.expected.copy()
    y[0, 5] += 10 * float(np.abs(y).max())
    assert not score(p.expected, y).passed
    assert score(p.expected, p.expected.copy()).passed


def test_sampled_rows_reference_matches_full_and_checks_whole_output() -> None:
    rows = sample_rows(200, 17, seed=9)
    assert rows.size == 17 and np.all(np.diff(rows) > 0)
    assert np.array_equal(rows, sample_rows(200, 17, seed=9))
    full = build_problem("Q8_0", n=200, k=64, m=3, seed=2)
    part = build_problem("Q8_0", n=200, k=64, m=3, seed=2, rows=rows)
    np.testing.assert_array_equal(part.expected, full.expected[:, rows])
    y = full.expected.copy()
    parity = part.check(y)
    assert parity.passed and parity.sampled_rows == 17
    unsampled = int(np.setdiff1d(np.arange(200), rows)[0])
    y[1, unsampled] = np.nan
    assert not part.check(y).passed


def test_reference_is_chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    import kernels.reference as ref

    fmt = get_format("Q4_0")
    p = build_problem("Q4_0", n=50, k=96, m=2, seed=5)
    monkeypatch.setattr(ref, "_CHUNK_WEIGHTS", 96 * 7)  # 7 rows per chunk
    np.testing.assert_array_equal(reference_gemv(fmt, p.weights, p.x), p.expected)
