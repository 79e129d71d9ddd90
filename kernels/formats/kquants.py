"""K-quants Q4_K and Q6_K: 256-weight super-blocks, scales precomputed per sub-block.

Q4_K (144 bytes): fp16 d, fp16 dmin, 12 bytes of packed 6-bit (scale, min) pairs for
8 sub-blocks of 32, then 128 bytes of nibbles (each 32-byte run holds sub-block 2j in
its low nibbles and 2j+1 in its high nibbles); weight = d*sc*q - dmin*m. Packed as
scale = fp16(d*sc), min = fp16(-dmin*m): both products need up to 17 significant bits,
so they are rounded to fp16 (relative error <= 2^-11 per scale and per min; NOT exact).

Q6_K (210 bytes): ql[128] low nibbles, qh[64] high 2-bit pairs, int8 scales[16] (one per
16 weights), fp16 d; weight = d*sc*(q-32). Packed with group 16 (kind ``sym16``) as
scale = fp16(d*sc) (rounded, relative error <= 2^-11; NOT exact), q - 32 exact in int8.
"""

from __future__ import annotations

import numpy as np

from kernels.formats.packed import ASYM, SYM16, FormatKind


def q4_k_scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """12 packed bytes -> (sc, m) each [B][8] in 0..63 (llama.cpp get_scale_min_k4)."""
    lo, hi, mix = scales[:, 0:4], scales[:, 4:8], scales[:, 8:12]
    sc = np.concatenate([lo & 0x3F, (mix & 0x0F) | ((lo >> 2) & 0x30)], axis=1)
    mn = np.concatenate([hi & 0x3F, (mix >> 4) | ((hi >> 2) & 0x30)], axis=1)
    return sc, mn


def unpack_q4_k(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    b = blocks.shape[0]
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    sc, mn = q4_k_scale_min(blocks[:, 4:16])
    qs = blocks[:, 16:144].reshape(b, 4, 32)
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(b, 256).astype(np.int8)
    scale = (d * sc.astype(np.float32)).astype(np.float16)
    mins = (-(dmin * mn.astype(np.float32))).astype(np.float16)
    return q, scale, mins


def unpack_q6_k(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    b = blocks.shape[0]
    ql = blocks[:, 0:128].reshape(b, 2, 64)
    qh = blocks[:, 128:192].reshape(b, 2, 32)
    sc = blocks[:, 192:208].copy().view(np.int8).astype(np.float32)
    d = blocks[:, 208:210].copy().view(np.float16).astype(np.float32)
    # per 128-chunk: positions [0,32) ql[l]&15, [32,64) ql[l+32]&15, [64,96) ql[l]>>4, [96,128) ql[l+32]>>4
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=2)  # [b][2][128]
    high = np.concatenate([(qh >> s) & 0x03 for s in (0, 2, 4, 6)], axis=2)  # [b][2][128]
    q = ((low | (high << 4)).astype(np.int16) - 32).astype(np.int8).reshape(b, 256)
    scale = (d * sc).astype(np.float16)
    return q, scale, None


KINDS: dict[str, FormatKind] = {"Q4_K": ASYM, "Q6_K": SYM16}
UNPACKERS = {"Q4_K": unpack_q4_k, "Q6_K": unpack_q6_k}
