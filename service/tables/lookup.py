"""A Python model of the generated decode lookup (exact table, then fallback).

Metrics and the replay check both need "what will the C++ answer here?"; one
model keeps them honest, and the replay proves the C++ agrees with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from service.tables.fallback import aspect_class, pick_rule
from service.tables.model import FallbackRule, PointKey


def pack_decode_key(m: int, n: int, k: int) -> int:
    """Same bit layout as packROCmNativeVNNIDecodeDispatchKey."""
    return ((m & 0xFF) << 56) | ((k & 0xFFFFFF) << 28) | (n & 0x0FFFFFFF)


@dataclass(frozen=True)
class DecodeLookup:
    """Exact entries (codebook -> packed key -> variant) plus fallback rules."""

    entries: Mapping[int, Mapping[int, str]]
    rules: Mapping[tuple[int, int, str], Sequence[FallbackRule]]

    def select(self, codebook: int, m: int, n: int, k: int) -> tuple[str | None, str]:
        """Return (variant or None, source) where source is exact/fallback/none."""
        table = self.entries.get(codebook)
        if table is not None:
            hit = table.get(pack_decode_key(m, n, k))
            if hit is not None:
                return hit, "exact"
        if n <= 0 or k <= 0:
            return None, "none"
        rules = self.rules.get((codebook, m, aspect_class(n, k)))
        if not rules:
            return None, "none"
        return pick_rule(rules, n * k).variant, "fallback"

    def select_point(self, point: PointKey) -> str | None:
        return self.select(*point)[0]
