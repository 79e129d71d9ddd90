"""Q8_0: 34-byte blocks of 32 weights, fp16 d then int8 q; weight = d * q. Packing is exact."""

from __future__ import annotations

import numpy as np

from kernels.formats.packed import SYM, FormatKind

KIND: FormatKind = SYM
BLOCK_BYTES = 34


def unpack(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(q int8 [B][32], scale float16 [B][1], None) for B raw blocks."""
    d = blocks[:, 0:2].copy().view(np.float16)
    q = blocks[:, 2:34].copy().view(np.int8)
    return q, d, None
