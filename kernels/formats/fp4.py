"""FP4 microscaling formats: MXFP4 (OCP MX) and NVFP4, as gguf stores them, plus the kernel-side helpers.

MXFP4 (GGUF type 39): 17-byte blocks of 32 weights, one E8M0 scale byte then 16 bytes of E2M1 codes
(byte j holds weight j in its low nibble and weight j + 16 in its high nibble). gguf 0.19 quantizes and
dequantizes it in Python (``gguf.quants.MXFP4``), so gguf is the reference for both directions.

NVFP4 (GGUF type 40): 36-byte blocks of 64 weights in four 16-weight sub-blocks, four UE4M3 sub-block
scales then 32 bytes of E2M1 codes (sub-block s owns bytes 8s..8s+7: weight j in the low nibble, j + 8
in the high one). gguf 0.19 only dequantizes it; ``quantize_nvfp4`` follows ggml's
``quantize_row_nvfp4_ref`` (amax / 6 rounded to UE4M3 with gguf's own encoder, then the nearest E2M1 code,
ties to the lower code index) and is checked against gguf's dequantizer in the tests.

The MXFP4 GEMM package (kernels/library/tb-mxfp4-gemm) reads a planar layout its prepare kernel builds
from the GGUF blocks: codes with weight 2i in the low nibble of byte i (the OCP / MFMA operand order) and
the scales transposed to [K/32][N]; ``planar_mxfp4`` is the same transform in numpy for the tests, and
``mxfp8_activations`` the activation rule of the gfx950 and host code paths (E4M3 per 32 with an E8M0 scale).
"""

from __future__ import annotations

import numpy as np
from gguf import quants

E2M1_VALUES: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_KVALUES_DOUBLED = np.array(quants.NVFP4.kvalues, dtype=np.float32)  # 2 x E2M1, gguf's convention
NVFP4_SUB = 16  # weights per UE4M3 scale
E4M3_MAX = 448.0
E4M3_EMAX = 8  # exponent of the largest E4M3 power of two (OCP MX: shared exponent = floor(log2 amax) - 8)


def e8m0_to_float(e: np.ndarray) -> np.ndarray:
    """E8M0 byte -> 2**(e - 127) (0xFF, NaN in the spec, never comes out of gguf's quantizer)."""
    return np.ldexp(np.float64(1.0), e.astype(np.int32) - 127)


def quantize_nvfp4(w: np.ndarray) -> np.ndarray:
    """float32 [rows][K] (K % 64 == 0) -> NVFP4 blocks uint8 [rows][K / 64 * 36], ggml's reference rule."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    if w.ndim != 2 or w.shape[1] % 64:
        raise ValueError(f"NVFP4 needs a 2-D array with K a multiple of 64, got {w.shape}")
    rows, k = w.shape
    sub = w.reshape(-1, NVFP4_SUB)  # every 16-weight sub-block, in order
    amax = np.abs(sub).max(axis=1)
    ue = quants.NVFP4.fp32_to_ue4m3(amax / np.float32(6.0))
    d = quants.NVFP4.ue4m3_to_fp32(ue).astype(np.float32)  # half the scale (doubled kvalues)
    errs = np.abs(d[:, None, None] * _KVALUES_DOUBLED[None, None, :] - sub[:, :, None])
    codes = np.argmin(errs, axis=-1).astype(np.uint8)  # first minimum: ties go to the lower index
    packed = codes[:, :8] | (codes[:, 8:] << np.uint8(4))  # weight j low, j + 8 high
    blocks = np.concatenate(
        [ue.astype(np.uint8).reshape(-1, 4), packed.reshape(-1, 32)], axis=1
    )  # 4 scales then 4 x 8 code bytes
    return blocks.reshape(rows, k // 64 * 36)


def mxfp4_codes(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GGUF MXFP4 rows uint8 [N][K/32*17] -> (codes uint8 [N][K] in 0..15, scales uint8 [N][K/32])."""
    n = blocks.shape[0]
    b = np.ascontiguousarray(blocks, dtype=np.uint8).reshape(n, -1, 17)
    e = b[:, :, 0]
    qs = b[:, :, 1:]
    codes = np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=2)  # j, then j + 16
    return codes.reshape(n, -1), e.copy()


def planar_mxfp4(blocks: np.ndarray) -> np.ndarray:
    """The tb-mxfp4-gemm prepared layout: codes uint8 [N][K/2] (weight 2i low nibble), then scales
    uint8 [K/32][N]; one flat buffer of N*K/2 + N*K/32 bytes (the format's true bytes, DESIGN §10)."""
    codes, scales = mxfp4_codes(blocks)
    packed = codes[:, 0::2] | (codes[:, 1::2] << np.uint8(4))
    return np.concatenate([packed.ravel(), np.ascontiguousarray(scales.T).ravel()])


def _floor_log2(a: np.ndarray) -> np.ndarray:
    """Exact floor(log2(a)) for a > 0 (frexp, no rounding of a logarithm); 0 where a == 0."""
    _mantissa, exp = np.frexp(a)
    return np.where(a > 0, exp - 1, 0).astype(np.int32)


def e2m1_value(codes: np.ndarray) -> np.ndarray:
    """E2M1 code (0..15) -> its value (sign in bit 3)."""
    table = np.array(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=np.float64)
    return table[codes]


def e4m3_round(v: np.ndarray) -> np.ndarray:
    """Round to the nearest OCP E4M3 (FN) value, ties to even, saturating at +-448 (values as float64)."""
    a = np.minimum(np.abs(v.astype(np.float64)), E4M3_MAX)
    exp = np.maximum(_floor_log2(a), -6)  # below 2**-6 the step is the subnormal 2**-9
    step = np.ldexp(1.0, exp - 3)
    q = np.minimum(np.rint(a / step) * step, E4M3_MAX)
    return np.copysign(q, v)


def mxfp8_activations(x: np.ndarray) -> np.ndarray:
    """x float32 [M][K] -> the values the gfx950 / host paths multiply: E4M3 codes times an E8M0 scale
    per 32 (OCP MX v1.0 §6.3: shared exponent floor(log2 amax) - 8, clamped to [-127, 127])."""
    m, k = x.shape
    b = x.astype(np.float64).reshape(m, k // 32, 32)
    amax = np.abs(b).max(axis=-1, keepdims=True)
    e = np.where(amax > 0, _floor_log2(amax) - E4M3_EMAX, -127)
    e = np.clip(e, -127, 127).astype(np.int32)
    return (e4m3_round(np.ldexp(b, -e)) * np.ldexp(1.0, e)).reshape(m, k)
