"""What a phase's table stores: variant -> config fields, M policy, key packing.

Decode and prefill tables share fitting, overlays, metrics and validation; they
differ only in these few facts (and in how a dialect renders them), so each
phase's facts live in one small codec that every dialect of that phase reuses.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from typing import Protocol

# DESIGN §3: prefill M buckets; at run time M rounds up to the next bucket.
PREFILL_M_BUCKETS: tuple[int, ...] = (
    2, 3, 4, 64, 128, 256, 384, 512, 544, 576, 600, 608, 640, 672, 704, 736, 768,
    1024, 1280, 1536, 2048, 2560, 3072, 4096,
)  # fmt: skip


class PhaseCodec(Protocol):
    """The per-phase facts a table needs; pure functions, no I/O."""

    phase: str
    config_fields: tuple[str, ...]
    max_m: int
    max_n: int
    max_k: int

    def parse_variant(self, variant: str) -> tuple[int, ...]:
        """Canonical variant name -> config tuple; ValueError with a reason if invalid."""
        ...

    def m_key(self, m: int) -> int:
        """Run-time M -> the M the table is keyed by (identity for decode)."""
        ...

    def pack_key(self, m_key: int, n: int, k: int) -> int:
        """The engine's 64-bit key for one exact entry."""
        ...


_DECODE_RE = re.compile(r"^KB(\d+)/TW(\d+)$")


class DecodeCodec:
    """Decode: `KB{kb}/TW{tw}`, key (m&0xFF)<<56 | (k&0xFFFFFF)<<28 | (n&0x0FFFFFFF)."""

    phase: str = "decode"
    config_fields: tuple[str, ...] = ("kb", "target_waves_per_cu")
    max_m: int = 0xFF
    max_n: int = 0x0FFFFFFF
    max_k: int = 0xFFFFFF

    def parse_variant(self, variant: str) -> tuple[int, ...]:
        match = _DECODE_RE.match(variant)
        if match is None:
            raise ValueError(f"decode variant {variant!r} is not of the form KB{{kb}}/TW{{tw}}")
        kb, tw = int(match.group(1)), int(match.group(2))
        if not (0 <= kb <= 0xFF and 0 <= tw <= 0xFF):
            raise ValueError(f"decode variant {variant!r} does not fit uint8_t fields")
        return (kb, tw)

    def m_key(self, m: int) -> int:
        return m

    def pack_key(self, m_key: int, n: int, k: int) -> int:
        return ((m_key & 0xFF) << 56) | ((k & 0xFFFFFF) << 28) | (n & 0x0FFFFFFF)


_PREFILL_RE = re.compile(r"^N(\d+)/MT(\d+)/MB(\d+)/U(\d+)$")


class PrefillCodec:
    """Prefill: `N{n_tile}/MT{m_tile}/MB{min_blocks}/U{unroll}`, key on the M bucket.

    Key (m_key&0xFFFFFF)<<40 | (k&0xFFFFF)<<20 | (n&0xFFFFF), as Llaminar packs it.
    """

    phase: str = "prefill"
    config_fields: tuple[str, ...] = ("n_tile", "m_tile", "min_blocks", "unroll")
    max_m: int = 0xFFFFFF
    max_n: int = 0xFFFFF
    max_k: int = 0xFFFFF

    def parse_variant(self, variant: str) -> tuple[int, ...]:
        match = _PREFILL_RE.match(variant)
        if match is None:
            raise ValueError(
                f"prefill variant {variant!r} is not of the form "
                "N{n_tile}/MT{m_tile}/MB{min_blocks}/U{unroll}"
            )
        config = tuple(int(g) for g in match.groups())
        if not all(0 <= v <= 0xFF for v in config):
            raise ValueError(f"prefill variant {variant!r} does not fit uint8_t fields")
        return config

    def m_key(self, m: int) -> int:
        """Round M up to the next bucket; beyond the last bucket M is its own key (no entry)."""
        i = bisect.bisect_left(PREFILL_M_BUCKETS, m)
        return PREFILL_M_BUCKETS[i] if i < len(PREFILL_M_BUCKETS) else m

    def pack_key(self, m_key: int, n: int, k: int) -> int:
        return ((m_key & 0xFFFFFF) << 40) | ((k & 0xFFFFF) << 20) | (n & 0xFFFFF)


CODECS: dict[str, PhaseCodec] = {"decode": DecodeCodec(), "prefill": PrefillCodec()}


def first_rejection(codec: PhaseCodec, names: Iterable[str]) -> str | None:
    """Why the first name the codec cannot express is refused (None when every name fits)."""
    for name in names:
        try:
            codec.parse_variant(name)
        except ValueError as error:
            return str(error)
    return None


def get_codec(phase: str) -> PhaseCodec:
    try:
        return CODECS[phase]
    except KeyError:
        raise KeyError(f"unknown phase {phase!r}; known: {sorted(CODECS)}") from None
