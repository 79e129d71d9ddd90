"""GGUF blocks -> kernel layout, per format, plus valid random blocks for formats gguf cannot quantize.

``pack`` is the only entry point backends need; ``EXACT`` records for which formats the
packed dequantization equals gguf's bit for bit (the others round a scale*sub-scale
product to fp16, see the per-family modules).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gguf import quants

from kernels.formats import iq4, kquants, legacy, q8_0
from kernels.formats.packed import FormatKind, PackedWeights
from kernels.formats.registry import QuantFormat, get_format

Unpacker = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray | None]]

_UNPACKERS: dict[str, Unpacker] = {
    "Q8_0": q8_0.unpack,
    **legacy.UNPACKERS,
    **kquants.UNPACKERS,
    **iq4.UNPACKERS,
}
_KINDS: dict[str, FormatKind] = {"Q8_0": q8_0.KIND, **legacy.KINDS, **kquants.KINDS, **iq4.KINDS}

# Formats every backend must run (issue 3, first wave), in sweep order.
FIRST_WAVE: tuple[str, ...] = ("Q8_0", "Q4_0", "Q4_1", "Q4_K", "IQ4_NL", "IQ4_XS", "Q5_0", "Q6_K")
PACKABLE: tuple[str, ...] = tuple(_UNPACKERS)
# packed dequantization == gguf dequantization bit for bit (fp16 scale/min taken over unchanged)
EXACT: frozenset[str] = frozenset({"Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL"})


def format_kind(format_name: str) -> FormatKind:
    """The kernel specialisation (sym / asym / sym16) a format compiles to."""
    try:
        return _KINDS[format_name]
    except KeyError:
        raise KeyError(f"no kernel packing for {format_name}; packable: {', '.join(PACKABLE)}") from None


def pack(fmt: QuantFormat | str, gguf_blocks: np.ndarray) -> PackedWeights:
    """Raw GGUF rows uint8 [N][row_bytes] -> kernel layout (see kernels.formats.packed)."""
    f = get_format(fmt) if isinstance(fmt, str) else fmt
    kind = format_kind(f.name)
    blocks = np.ascontiguousarray(gguf_blocks, dtype=np.uint8)
    if blocks.ndim != 2 or blocks.shape[1] % f.block_bytes:
        raise ValueError(
            f"{f.name}: expected uint8 [N][k/{f.block_weights}*{f.block_bytes}], got {blocks.shape}"
        )
    n = blocks.shape[0]
    k = blocks.shape[1] // f.block_bytes * f.block_weights
    q, scale, mins = _UNPACKERS[f.name](blocks.reshape(-1, f.block_bytes))
    groups = k // kind.group
    return PackedWeights(
        qs=np.ascontiguousarray(q.reshape(n, k), dtype=np.int8),
        scales=np.ascontiguousarray(scale.reshape(n, groups), dtype=np.float16),
        mins=None if mins is None else np.ascontiguousarray(mins.reshape(n, groups), dtype=np.float16),
        group=kind.group,
    )


def gguf_quantizes(fmt: QuantFormat) -> bool:
    """True when gguf 0.19 has a Python quantizer for the format."""
    try:
        quants.quantize(np.zeros((1, fmt.block_weights), dtype=np.float32), fmt.ggml_type)
    except NotImplementedError:
        return False
    return True


def _f16_bytes(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float16).view(np.uint8).reshape(values.shape[0], 2)


def random_blocks(fmt: QuantFormat, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` valid blocks built field by field; super-scales sized so weights are O(1)."""
    bb = fmt.block_bytes
    out = rng.integers(0, 256, size=(count, bb), dtype=np.uint8)  # every quant/scale bit pattern is valid
    if fmt.name == "Q4_K":
        out[:, 0:2] = _f16_bytes(rng.uniform(0.5, 1.5, count) / (32 * 8))  # d: d*sc*q ~ O(1)
        out[:, 2:4] = _f16_bytes(rng.uniform(0.5, 1.5, count) / (32 * 4))  # dmin
    elif fmt.name == "Q6_K":
        out[:, 192:208] = rng.integers(-64, 64, size=(count, 16), dtype=np.int8).view(np.uint8)
        out[:, 208:210] = _f16_bytes(rng.uniform(0.5, 1.5, count) / (32 * 32))
    elif fmt.name == "IQ4_XS":
        out[:, 0:2] = _f16_bytes(rng.uniform(0.5, 1.5, count) / (32 * 64))
    elif fmt.name == "IQ4_NL":
        out[:, 0:2] = _f16_bytes(rng.uniform(0.5, 1.5, count) / 64)
    else:
        raise NotImplementedError(f"no random-block builder for {fmt.name}; gguf should quantize it")
    return out
