"""FP32 references for GEMV parity checks (DESIGN §5.4).

The reference is computed from gguf's own ``dequantize`` of the very blocks the
kernels read, so a parity failure means the kernel is wrong, not that
quantization lost precision. Big shapes are generated, quantized and dequantized
in row chunks, so no full FP32 copy of the weight matrix ever exists; parity can
then be restricted to a seeded sample of rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from gguf import quants

from kernels.formats.registry import QuantFormat, get_format
from workers.backends.base import Parity

# A correct FP32 kernel lands near cosine 1 - 1e-12 and rel_l2 ~1e-6; dropping one
# K block out of B costs about 1/B of the output energy, so rel_l2 ~ sqrt(1/B)
# (0.04 for K = 17408), far outside these bounds.
COSINE_MIN = 0.9999
REL_L2_MAX = 1e-3

_CHUNK_WEIGHTS = 1 << 22  # weights per chunk when generating / dequantizing (16 MiB of FP32)


@dataclass
class Problem:
    """Quantized weights, activations and the expected output of one GEMV point."""

    format: QuantFormat
    n: int
    k: int
    m: int
    seed: int
    weights: np.ndarray  # uint8 (n, row_bytes): raw GGUF blocks, row-major
    x: np.ndarray  # float32 (m, k)
    expected: np.ndarray  # float32 (m, n), or (m, len(rows)) when rows is set
    rows: np.ndarray | None = None  # int64 row indices the reference covers; None = all

    def check(self, actual: np.ndarray) -> Parity:
        """Score a full (m, n) kernel output; NaNs anywhere fail even when rows are sampled."""
        if actual.shape != (self.m, self.n):
            raise ValueError(f"output shape {actual.shape} != {(self.m, self.n)}")
        if self.rows is None:
            return score(self.expected, actual)
        parity = score(self.expected, actual[:, self.rows])
        parity.sampled_rows = int(self.rows.size)
        if not np.isfinite(actual).all():
            parity.passed = False
        return parity


def _chunk_rows(k: int) -> int:
    return max(1, _CHUNK_WEIGHTS // k)


def sample_rows(n: int, count: int, seed: int) -> np.ndarray:
    """A seeded, sorted sample of distinct row indices (all rows when count >= n)."""
    if count >= n:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng([seed, n, 0x5EED])
    return np.sort(rng.choice(n, size=count, replace=False)).astype(np.int64)


def quantize_random(fmt: QuantFormat, n: int, k: int, seed: int) -> np.ndarray:
    """Random N(0,1) weights quantized to GGUF blocks, generated chunk by chunk."""
    row_bytes = fmt.row_bytes(k)
    out = np.empty((n, row_bytes), dtype=np.uint8)
    rng = np.random.default_rng([seed, 1])
    step = _chunk_rows(k)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        w = rng.standard_normal((r1 - r0, k), dtype=np.float32)
        try:
            out[r0:r1] = quants.quantize(w, fmt.ggml_type)
        except NotImplementedError:
            raise NotImplementedError(
                f"gguf.quants cannot quantize {fmt.name} in Python; no reference available"
            ) from None
    return out


def reference_gemv(
    fmt: QuantFormat, weights: np.ndarray, x: np.ndarray, rows: np.ndarray | None = None
) -> np.ndarray:
    """y = x @ dequant(W[rows])^T in FP64, returned as FP32, one row chunk at a time."""
    n, k = weights.shape[0], x.shape[1]
    idx = np.arange(n, dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    x64 = x.astype(np.float64)
    out = np.empty((x.shape[0], idx.size), dtype=np.float32)
    step = _chunk_rows(k)
    for c0 in range(0, idx.size, step):
        sel = idx[c0 : c0 + step]
        w = quants.dequantize(weights[sel], fmt.ggml_type).astype(np.float64)
        out[:, c0 : c0 + sel.size] = (x64 @ w.T).astype(np.float32)
    return out


def build_problem(
    format_name: str, n: int, k: int, m: int, seed: int, rows: np.ndarray | None = None
) -> Problem:
    """Random weights (quantized with gguf), random activations and their FP32 reference.

    Deterministic in (format, n, k, m, seed); ``rows`` restricts the reference to a
    sample of rows so huge shapes (the LM head) stay cheap.
    """
    if n <= 0 or m <= 0:
        raise ValueError(f"n and m must be positive (n={n}, m={m})")
    fmt = get_format(format_name)
    weights = quantize_random(fmt, n, k, seed)
    x = np.random.default_rng([seed, 2]).standard_normal((m, k), dtype=np.float32)
    if rows is not None:
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim != 1 or rows.size == 0 or rows.min() < 0 or rows.max() >= n:
            raise ValueError("rows must be a non-empty 1-D array of indices in [0, n)")
    expected = reference_gemv(fmt, weights, x, rows)
    return Problem(fmt, n, k, m, seed, weights, x, expected, rows)


def score(expected: np.ndarray, actual: np.ndarray) -> Parity:
    """Cosine, relative L2 and max abs error; any non-finite value fails (metrics NaN)."""
    if expected.shape != actual.shape:
        raise ValueError(f"shape mismatch: expected {expected.shape}, actual {actual.shape}")
    if not np.isfinite(actual).all():
        return Parity(cosine=math.nan, rel_l2=math.nan, max_abs=math.nan, passed=False)
    e = expected.astype(np.float64).ravel()
    a = actual.astype(np.float64).ravel()
    diff = a - e
    ne, na = float(np.linalg.norm(e)), float(np.linalg.norm(a))
    if ne == 0.0 and na == 0.0:
        cosine = 1.0
    elif ne == 0.0 or na == 0.0:
        cosine = 0.0
    else:
        cosine = float(np.dot(e, a) / (ne * na))
    rel_l2 = float(np.linalg.norm(diff)) / ne if ne > 0 else (0.0 if na == 0 else math.inf)
    max_abs = float(np.abs(diff).max()) if diff.size else 0.0
    passed = cosine >= COSINE_MIN and rel_l2 <= REL_L2_MAX
    return Parity(cosine=cosine, rel_l2=rel_l2, max_abs=max_abs, passed=passed)
