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

from kernels.formats.fp4 import quantize_nvfp4
from kernels.formats.packed import PackedWeights
from kernels.formats.packing import PACKABLE, gguf_quantizes, pack, random_blocks
from kernels.formats.registry import QuantFormat, get_format

# A correct FP32 kernel lands near cosine 1 - 1e-12 and rel_l2 ~1e-6; dropping one
# K block out of B costs about 1/B of the output energy, so rel_l2 ~ sqrt(1/B)
# (0.04 for K = 17408), far outside these bounds.
COSINE_MIN = 0.9999
REL_L2_MAX = 1e-3


@dataclass
class Parity:
    """How a kernel's output compares with the FP32 reference."""

    cosine: float
    rel_l2: float
    max_abs: float
    passed: bool
    sampled_rows: int | None = None  # set when parity was checked on a seeded row sample


@dataclass(frozen=True)
class Tolerance:
    """Parity bounds of one numeric path (which arithmetic the kernel does)."""

    name: str
    cosine_min: float
    rel_l2_max: float


# FP32 activations against FP32 dequantized weights (the original host kernels).
FP32 = Tolerance("fp32", COSINE_MIN, REL_L2_MAX)
# int8 activations per 32-block (every packed kernel: host C, HIP, CUDA). Rounding x to
# 1/127 of its block max leaves rel_l2 = 4.6e-3 .. 8.6e-3 against the FP32 reference
# (measured over all first-wave formats, K = 256 .. 17408, M = 1..4; the high end is Q4_K
# whose min term rides on the rounded block sums), 1 - cosine ~ 1e-5 .. 3e-5. The bound
# 2e-2 keeps > 2x margin, while dropping one K block of B still gives rel_l2 ~ sqrt(1/B)
# = 0.043 at K = 17408 (B = 544), so such a kernel fails for every K up to ~80k.
INT8_ACTIVATIONS = Tolerance("int8-activations", 0.999, 2e-2)

# Formats gguf 0.19 dequantizes but cannot quantize in Python, with the reference rule we follow instead
# (checked against gguf's dequantizer in tests/kernels/test_fp4_formats.py).
OWN_QUANTIZERS = {"NVFP4": quantize_nvfp4}

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
    packed: PackedWeights | None = None  # the same weights in the kernel layout (kernels.formats.packed)

    def check(self, actual: np.ndarray, tolerance: Tolerance = FP32) -> Parity:
        """Score a full (m, n) kernel output; NaNs anywhere fail even when rows are sampled."""
        if actual.shape != (self.m, self.n):
            raise ValueError(f"output shape {actual.shape} != {(self.m, self.n)}")
        if self.rows is None:
            return score(self.expected, actual, tolerance)
        parity = score(self.expected, actual[:, self.rows], tolerance)
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
    """Random GGUF blocks, generated chunk by chunk.

    N(0,1) weights quantized by gguf where gguf can quantize the format in Python (NVFP4: by
    ``OWN_QUANTIZERS``, ggml's reference rule); otherwise (Q4_K, Q6_K, IQ4_NL, IQ4_XS) valid blocks
    built field by field with random quants and sensibly sized super-scales
    (kernels.formats.packing.random_blocks).
    """
    row_bytes = fmt.row_bytes(k)
    out = np.empty((n, row_bytes), dtype=np.uint8)
    rng = np.random.default_rng([seed, 1])
    step = _chunk_rows(k)
    by_gguf = gguf_quantizes(fmt)
    own = OWN_QUANTIZERS.get(fmt.name)
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        if by_gguf or own is not None:
            w = rng.standard_normal((r1 - r0, k), dtype=np.float32)
            out[r0:r1] = quants.quantize(w, fmt.ggml_type) if own is None else own(w)
            continue
        try:
            blocks = random_blocks(fmt, (r1 - r0) * (k // fmt.block_weights), rng)
        except NotImplementedError:
            raise NotImplementedError(
                f"gguf.quants cannot quantize {fmt.name} in Python and no block builder exists; "
                "no reference available"
            ) from None
        out[r0:r1] = blocks.reshape(r1 - r0, row_bytes)
    return out


def pack_chunked(fmt: QuantFormat, weights: np.ndarray) -> PackedWeights:
    """``pack`` one row chunk at a time so temporaries stay small for huge shapes."""
    n = weights.shape[0]
    k = weights.shape[1] // fmt.block_bytes * fmt.block_weights
    step = _chunk_rows(k)
    first = pack(fmt, weights[:step])
    if n <= step:
        return first
    qs = np.empty((n, k), dtype=np.int8)
    scales = np.empty((n, first.scales.shape[1]), dtype=np.float16)
    mins = None if first.mins is None else np.empty_like(scales)
    for r0 in range(0, n, step):
        part = first if r0 == 0 else pack(fmt, weights[r0 : r0 + step])
        qs[r0 : r0 + step] = part.qs
        scales[r0 : r0 + step] = part.scales
        if mins is not None and part.mins is not None:
            mins[r0 : r0 + step] = part.mins
    return PackedWeights(qs, scales, mins, first.group)


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
    format_name: str,
    n: int,
    k: int,
    m: int,
    seed: int,
    rows: np.ndarray | None = None,
    packed: bool = True,
) -> Problem:
    """Random weights (gguf-quantized or random valid blocks), activations and their FP32 reference.

    Deterministic in (format, n, k, m, seed); ``rows`` restricts the reference to a
    sample of rows so huge shapes (the LM head) stay cheap. ``packed`` adds the kernel
    layout of the same weights (``Problem.packed``) for every packable format.
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
    kernel_layout = pack_chunked(fmt, weights) if packed and fmt.name in PACKABLE else None
    return Problem(fmt, n, k, m, seed, weights, x, expected, rows, kernel_layout)


def score(expected: np.ndarray, actual: np.ndarray, tolerance: Tolerance = FP32) -> Parity:
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
    passed = cosine >= tolerance.cosine_min and rel_l2 <= tolerance.rel_l2_max
    return Parity(cosine=cosine, rel_l2=rel_l2, max_abs=max_abs, passed=passed)
