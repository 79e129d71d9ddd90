"""A Python model of a generated lookup: M key, exact table, then fallback.

Metrics, overlay selection and the replay check all need "what will the engine
answer here?"; one model keeps them honest, and the replay proves the emitted
table agrees with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from service.tables.fallback import aspect_class, pick_rule
from service.tables.model import FallbackRule, PointKey
from service.tables.tree import FallbackTree

ExactKey = tuple[int, int, int]  # (m_key, n, k)


def pack_decode_key(m: int, n: int, k: int) -> int:
    """Same bit layout as packROCmNativeVNNIDecodeDispatchKey."""
    return ((m & 0xFF) << 56) | ((k & 0xFFFFFF) << 28) | (n & 0x0FFFFFFF)


def _identity(m: int) -> int:
    return m


@dataclass(frozen=True)
class TableLookup:
    """Exact entries (codebook -> (m_key, n, k) -> variant) plus the fallback: per codebook a decision
    tree, or segment rules per (codebook, M, aspect class)."""

    entries: Mapping[int, Mapping[ExactKey, str]]
    rules: Mapping[tuple[int, int, str], Sequence[FallbackRule]]
    m_key: Callable[[int], int] = field(default=_identity)
    trees: Mapping[int, FallbackTree] = field(default_factory=dict)

    def select(self, codebook: int, m: int, n: int, k: int) -> tuple[str | None, str]:
        """Return (variant or None, source) where source is exact/fallback/none."""
        mk = self.m_key(m)
        table = self.entries.get(codebook)
        if table is not None:
            hit = table.get((mk, n, k))
            if hit is not None:
                return hit, "exact"
        answer = self.fallback(codebook, mk, n, k)
        return answer, "none" if answer is None else "fallback"

    def fallback(self, codebook: int, m_key: int, n: int, k: int) -> str | None:
        if n <= 0 or k <= 0:
            return None
        tree = self.trees.get(codebook)
        if tree is not None:
            return tree.answer(m_key, n, k)
        rules = self.rules.get((codebook, m_key, aspect_class(n, k)))
        if not rules:
            return None
        return pick_rule(rules, n * k).variant

    def select_point(self, point: PointKey) -> str | None:
        return self.select(*point)[0]


DecodeLookup = TableLookup  # the decode table is a TableLookup with M as its own key
