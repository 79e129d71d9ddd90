"""Legacy 32-weight formats Q4_0, Q4_1, Q5_0, Q5_1 (llama.cpp ggml-common.h layouts).

Nibble order: byte j holds weight j (low nibble) and weight j + 16 (high nibble).
Q5 formats keep the fifth bit of weight j in bit j of a little-endian uint32 ``qh``.
Q4_0 / Q5_0 are symmetric with offsets 8 / 16 (removed here, so int8 q = nibble - offset);
Q4_1 / Q5_1 are ``d * q + m`` with fp16 d and m taken over unchanged. All packings are exact.
"""

from __future__ import annotations

import numpy as np

from kernels.formats.packed import ASYM, SYM, FormatKind


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[B][16] bytes -> [B][32] values in 0..15, weight order."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """[B][4] bytes (little-endian uint32) -> [B][32] bits, bit j = weight j."""
    word = qh.copy().view("<u4").reshape(-1, 1)
    return ((word >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)


def _f16(b: np.ndarray) -> np.ndarray:
    return b.copy().view(np.float16)


def unpack_q4_0(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    q = _nibbles(blocks[:, 2:18]).astype(np.int8) - np.int8(8)
    return q, _f16(blocks[:, 0:2]), None


def unpack_q4_1(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    q = _nibbles(blocks[:, 4:20]).astype(np.int8)
    return q, _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])


def unpack_q5_0(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    q = (_nibbles(blocks[:, 6:22]) | (_fifth_bits(blocks[:, 2:6]) << 4)).astype(np.int8) - np.int8(16)
    return q, _f16(blocks[:, 0:2]), None


def unpack_q5_1(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    q = (_nibbles(blocks[:, 8:24]) | (_fifth_bits(blocks[:, 4:8]) << 4)).astype(np.int8)
    return q, _f16(blocks[:, 0:2]), _f16(blocks[:, 2:4])


KINDS: dict[str, FormatKind] = {"Q4_0": SYM, "Q4_1": ASYM, "Q5_0": SYM, "Q5_1": ASYM}
UNPACKERS = {"Q4_0": unpack_q4_0, "Q4_1": unpack_q4_1, "Q5_0": unpack_q5_0, "Q5_1": unpack_q5_1}
