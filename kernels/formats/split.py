"""The ``tb-split`` layout: GGUF blocks repacked, at the same size, into three per-row arrays.

Why: a GGUF block interleaves its scale bytes with its payload (Q4_0: 2 + 16 bytes), so a lane's payload
load is neither 16-byte aligned nor coalesced. Splitting every block into its parts and storing each part
row-contiguously keeps the format's TRUE bytes (DESIGN §10: the total equals the GGUF bytes exactly) while
every 16-byte payload piece starts 16-byte aligned:

    qs  uint8 [N][K*q/8]   low-bit payload, GGUF order inside each block (q = 8 for Q8_0, else 4:
                           Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL low nibbles; Q4_K/IQ4_XS 128 bytes per 256; Q6_K ql)
    qh  uint8 [N][...]     high bits (Q5_0/Q5_1: 4 bytes per 32, Q6_K: 64 bytes per 256), else None
    sc  uint8 [N][...]     the remaining bytes of each block, GGUF order (d; d,m; Q4_K d,dmin,scales[12];
                           Q6_K scales[16],d; IQ4_XS d,scales_h,scales_l[4])

``dequantize_split`` decodes the three arrays directly (not by re-joining), the way the kernels do; it
equals ``gguf.quants.dequantize`` bit for bit (tests/kernels/test_split_layout.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.formats.registry import QuantFormat, get_format

PARTS: tuple[str, ...] = ("qs", "qh", "sc")
IQ4_VALUES = np.array((-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113), np.int8)


@dataclass(frozen=True)
class SplitSpec:
    """Where each part sits inside one GGUF block: (start, end) byte ranges, several allowed per part."""

    qbits: int  # payload bits per weight in ``qs`` (8 or 4)
    qs: tuple[tuple[int, int], ...]
    qh: tuple[tuple[int, int], ...]
    sc: tuple[tuple[int, int], ...]

    def part_bytes(self, part: str) -> int:
        return sum(end - start for start, end in getattr(self, part))


SPECS: dict[str, SplitSpec] = {
    "Q8_0": SplitSpec(8, qs=((2, 34),), qh=(), sc=((0, 2),)),
    "Q4_0": SplitSpec(4, qs=((2, 18),), qh=(), sc=((0, 2),)),
    "Q4_1": SplitSpec(4, qs=((4, 20),), qh=(), sc=((0, 4),)),
    "Q5_0": SplitSpec(4, qs=((6, 22),), qh=((2, 6),), sc=((0, 2),)),
    "Q5_1": SplitSpec(4, qs=((8, 24),), qh=((4, 8),), sc=((0, 4),)),
    "IQ4_NL": SplitSpec(4, qs=((2, 18),), qh=(), sc=((0, 2),)),
    "Q4_K": SplitSpec(4, qs=((16, 144),), qh=(), sc=((0, 16),)),
    "Q6_K": SplitSpec(4, qs=((0, 128),), qh=((128, 192),), sc=((192, 210),)),
    "IQ4_XS": SplitSpec(4, qs=((8, 136),), qh=(), sc=((0, 8),)),
}
SPLITTABLE: tuple[str, ...] = tuple(SPECS)


def spec_of(fmt: QuantFormat | str) -> SplitSpec:
    name = fmt if isinstance(fmt, str) else fmt.name
    try:
        return SPECS[name]
    except KeyError:
        raise KeyError(f"layout tb-split has no split for {name} (splittable: {', '.join(SPECS)})") from None


def split_defines(fmt: QuantFormat) -> dict[str, str]:
    """Per-block byte counts of each part and the payload width, for the kernel sources."""
    spec = spec_of(fmt)
    return {
        "TB_QBITS": str(spec.qbits),
        "TB_QS_BYTES": str(spec.part_bytes("qs")),
        "TB_QH_BYTES": str(spec.part_bytes("qh")),
        "TB_SC_BYTES": str(spec.part_bytes("sc")),
    }


def _blocks(fmt: QuantFormat, weights: np.ndarray) -> np.ndarray:
    w = np.ascontiguousarray(weights, dtype=np.uint8)
    if w.ndim != 2 or w.shape[1] % fmt.block_bytes:
        raise ValueError(
            f"{fmt.name}: expected uint8 [N][k/{fmt.block_weights}*{fmt.block_bytes}], got {w.shape}"
        )
    return w.reshape(w.shape[0], w.shape[1] // fmt.block_bytes, fmt.block_bytes)


def split_blocks(fmt: QuantFormat | str, weights: np.ndarray) -> dict[str, np.ndarray | None]:
    """GGUF rows uint8 [N][row_bytes] -> {"qs", "qh", "sc"} (qh None when the format has no high bits)."""
    f = get_format(fmt) if isinstance(fmt, str) else fmt
    spec = spec_of(f)
    blocks = _blocks(f, weights)
    n = blocks.shape[0]
    out: dict[str, np.ndarray | None] = {}
    for part in PARTS:
        ranges = getattr(spec, part)
        if not ranges:
            out[part] = None
            continue
        pieces = [blocks[:, :, start:end] for start, end in ranges]
        joined = pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=2)
        out[part] = np.ascontiguousarray(joined).reshape(n, -1)
    return out


def join_split(fmt: QuantFormat | str, parts: dict[str, np.ndarray | None]) -> np.ndarray:
    """The inverse of ``split_blocks``: GGUF rows again (for round-trip tests)."""
    f = get_format(fmt) if isinstance(fmt, str) else fmt
    spec = spec_of(f)
    qs = parts["qs"]
    assert qs is not None
    n = qs.shape[0]
    nb = qs.shape[1] // spec.part_bytes("qs")
    out = np.empty((n, nb, f.block_bytes), dtype=np.uint8)
    for part in PARTS:
        ranges = getattr(spec, part)
        if not ranges:
            continue
        array = parts[part]
        assert array is not None
        blocks = array.reshape(n, nb, spec.part_bytes(part))
        offset = 0
        for start, end in ranges:
            out[:, :, start:end] = blocks[:, :, offset : offset + end - start]
            offset += end - start
    return out.reshape(n, nb * f.block_bytes)


def _f16(raw: np.ndarray) -> np.ndarray:
    """[..., 2] uint8 -> float32 [...] through float16."""
    return np.ascontiguousarray(raw).view(np.float16)[..., 0].astype(np.float32)


def _nibbles(qs: np.ndarray, run: int) -> np.ndarray:
    """[B][bytes] payload, runs of ``run`` bytes: low nibbles then high nibbles -> [B][2*bytes]."""
    b = qs.shape[0]
    r = qs.reshape(b, -1, 1, run)
    return np.concatenate([r & 0x0F, r >> 4], axis=2).reshape(b, -1)


def dequantize_split(fmt: QuantFormat | str, parts: dict[str, np.ndarray | None]) -> np.ndarray:
    """float32 [N][K] straight from the three arrays (the kernels' arithmetic, fp32 like gguf)."""
    f = get_format(fmt) if isinstance(fmt, str) else fmt
    spec = spec_of(f)
    qs_rows = parts["qs"]
    assert qs_rows is not None
    n = qs_rows.shape[0]
    nb = qs_rows.shape[1] // spec.part_bytes("qs")
    qs = qs_rows.reshape(n * nb, spec.part_bytes("qs"))
    sc = np.asarray(parts["sc"]).reshape(n * nb, spec.part_bytes("sc"))
    qh_rows = parts["qh"]
    qh = None if qh_rows is None else qh_rows.reshape(n * nb, spec.part_bytes("qh"))
    name = f.name
    if name == "Q8_0":
        w = qs.view(np.int8).astype(np.float32) * _f16(sc.reshape(-1, 1, 2))
    elif name in ("Q4_0", "Q4_1", "IQ4_NL", "Q5_0", "Q5_1"):
        q = _nibbles(qs, 16)
        if qh is not None:
            bits = np.ascontiguousarray(qh).view(np.uint32)  # [B][1], bit j = high bit of weight j
            q = q | (((bits >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8) << 4)
        d = _f16(sc[:, None, 0:2])
        if name == "IQ4_NL":
            w = d * IQ4_VALUES[q].astype(np.float32)
        elif name in ("Q4_0", "Q5_0"):
            w = d * (q.astype(np.int8) - np.int8(8 if name == "Q4_0" else 16)).astype(np.float32)
        else:
            w = d * q.astype(np.float32) + _f16(sc[:, None, 2:4])
    elif name == "Q4_K":
        d, dmin = _f16(sc[:, None, 0:2]), _f16(sc[:, None, 2:4])
        lo, hi, mix = sc[:, 4:8], sc[:, 8:12], sc[:, 12:16]
        scale = np.concatenate([lo & 0x3F, (mix & 0x0F) | ((lo >> 2) & 0x30)], axis=1)
        mins = np.concatenate([hi & 0x3F, (mix >> 4) | ((hi >> 2) & 0x30)], axis=1)
        qk = _nibbles(qs, 32).reshape(-1, 8, 32).astype(np.float32)
        w = (d * scale.astype(np.float32))[:, :, None] * qk - (dmin * mins.astype(np.float32))[:, :, None]
    elif name == "Q6_K":
        assert qh is not None
        low = _nibbles(qs.reshape(-1, 2, 64).reshape(-1, 128), 64).reshape(-1, 2, 128)
        h = qh.reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
        q6 = (low | ((h & 3).reshape(-1, 2, 128) << 4)).astype(np.int8) - np.int8(32)
        dl = _f16(sc[:, None, 16:18]) * sc[:, 0:16].view(np.int8).astype(np.float32)
        w = dl[:, :, None] * q6.reshape(-1, 16, 16).astype(np.float32)
    elif name == "IQ4_XS":
        d = _f16(sc[:, None, 0:2])
        sh = np.ascontiguousarray(sc[:, 2:4]).view(np.uint16)  # [B][1]
        sl = sc[:, 4:8]
        lows = np.stack([sl & 0x0F, sl >> 4], axis=2).reshape(-1, 8)
        high = ((sh >> (2 * np.arange(8, dtype=np.uint16))) & 3).astype(np.uint8)
        ls = (lows | (high << 4)).astype(np.int8) - np.int8(32)
        qx = IQ4_VALUES[_nibbles(qs, 16)].astype(np.float32).reshape(-1, 8, 32)
        w = (d * ls.astype(np.float32))[:, :, None] * qx
    else:  # pragma: no cover - SPECS and this switch list the same formats
        raise KeyError(name)
    return np.asarray(w, dtype=np.float32).reshape(n, nb * f.block_weights)
