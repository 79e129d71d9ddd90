"""Per-32-block int8 quantization of activations, exactly as the kernels do it.

Integer kernels need int8 activations for v_dot4_i32_i8 / __dp4a. Per 32-block of a row:
    amax = max |x|,  xs = amax / 127,  xq = rint(x * (127 / amax))  (0 when amax == 0)
    xsum = sum(xq)   (multiplies the min term of asymmetric formats)
so  sum_j w_j x_j  ~=  xs * (scale * sum_j q_j xq_j + min * xsum)  per block.
rint is round-half-to-even, the default rounding of rintf on every target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.formats.packed import PackedWeights

QBLOCK = 32


@dataclass
class QuantizedActivations:
    xq: np.ndarray  # int8 [M][K]
    xs: np.ndarray  # float32 [M][K/32]
    xsum: np.ndarray  # int32 [M][K/32]


def quantize_activations(x: np.ndarray) -> QuantizedActivations:
    """float32 [M][K] (K a multiple of 32) -> int8 values, fp32 block scales and block sums."""
    m, k = x.shape
    if k % QBLOCK:
        raise ValueError(f"K={k} is not a multiple of {QBLOCK}")
    xb = x.astype(np.float32).reshape(m, k // QBLOCK, QBLOCK)
    amax = np.abs(xb).max(axis=2)
    safe = np.where(amax > 0, amax, np.float32(1))
    inv = np.where(amax > 0, np.float32(127) / safe, np.float32(0)).astype(np.float32)
    xq = np.rint(xb * inv[:, :, None]).astype(np.int8)
    xs = (amax / np.float32(127)).astype(np.float32)
    return QuantizedActivations(xq.reshape(m, k), xs, xq.astype(np.int32).sum(axis=2, dtype=np.int32))


def int8_gemm(p: PackedWeights, qa: QuantizedActivations) -> np.ndarray:
    """What an integer kernel computes, in float64: the model for GPU/host int8-activation parity."""
    n, k = p.qs.shape
    m = qa.xq.shape[0]
    g = p.group
    wq = p.qs.astype(np.float64).reshape(n, k // g, g)
    xq = qa.xq.astype(np.float64).reshape(m, k // g, g)
    dots = np.einsum("ngj,mgj->mng", wq, xq)  # integer-valued per group
    xs_g = np.repeat(qa.xs.astype(np.float64), QBLOCK // g, axis=1)  # per group
    acc = dots * p.scales.astype(np.float64)[None, :, :]
    if p.mins is not None:
        if g != QBLOCK:
            raise ValueError("asymmetric formats use 32-weight groups")
        acc = acc + p.mins.astype(np.float64)[None, :, :] * qa.xsum.astype(np.float64)[:, None, :]
    return (acc * xs_g[:, None, :]).sum(axis=2).astype(np.float32)
