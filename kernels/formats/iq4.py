"""IQ4_NL and IQ4_XS: 4-bit indices into llama.cpp's 16-entry non-linear table.

The table values are integers in [-127, 113], so they go straight into int8 q.
IQ4_NL (18 bytes / 32 weights): fp16 d, 16 bytes of nibbles (weight j low, j+16 high);
weight = d * T[i]; packing is exact.
IQ4_XS (136 bytes / 256 weights): fp16 d, uint16 scales_h (2 high bits per sub-block),
4 bytes scales_l (4 low bits per sub-block), 128 bytes nibbles (16 per sub-block of 32);
weight = d * (ls - 32) * T[i]. Packed scale = fp16(d * (ls - 32)): up to 17 significant
bits, rounded to fp16 (relative error <= 2^-11; NOT exact).
"""

from __future__ import annotations

import numpy as np

from kernels.formats.packed import SYM, FormatKind

IQ4_TABLE: np.ndarray = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8
)


def _lookup(qs: np.ndarray) -> np.ndarray:
    """[B][16*s] nibble bytes in 16-byte runs -> [B][32*s] table values."""
    b = qs.shape[0]
    runs = qs.reshape(b, -1, 16)
    idx = np.concatenate([runs & 0x0F, runs >> 4], axis=2).reshape(b, -1)
    return IQ4_TABLE[idx]


def unpack_iq4_nl(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    return _lookup(blocks[:, 2:18]), blocks[:, 0:2].copy().view(np.float16), None


def unpack_iq4_xs(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    sh = blocks[:, 2:4].copy().view("<u2").astype(np.uint32)  # [b][1]
    sl = blocks[:, 4:8]
    sub = np.arange(8)
    low = (sl[:, sub // 2] >> (4 * (sub % 2))) & 0x0F
    high = (sh >> (2 * sub).astype(np.uint32)) & 0x03
    ls = (low.astype(np.int32) | (high.astype(np.int32) << 4)) - 32
    scale = (d * ls.astype(np.float32)).astype(np.float16)
    return _lookup(blocks[:, 8:136]), scale, None


KINDS: dict[str, FormatKind] = {"IQ4_NL": SYM, "IQ4_XS": SYM}
UNPACKERS = {"IQ4_NL": unpack_iq4_nl, "IQ4_XS": unpack_iq4_xs}
