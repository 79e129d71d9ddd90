"""Exact (M, N, K) overlays above the fallback (DESIGN §6).

An exact entry costs table size and review effort, so one is kept only where the
fallback's answer is measurably worse than the chosen variant: its regret
exceeds the threshold (settings.overlay_regret_threshold, default 2%). Points
without per-variant times cannot be judged, so they get an entry whenever the
fallback disagrees with their winner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from service.tables.fallback import RuleMap
from service.tables.lookup import ExactKey, TableLookup
from service.tables.metrics import regret_of
from service.tables.model import MeasuredPoint, TableChoice


def fallback_regret(point: MeasuredPoint, rules: RuleMap) -> tuple[str | None, float | None]:
    """What the fallback alone answers at the point, and that answer's regret."""
    variant = TableLookup({}, rules).select(*point.point)[0]
    return variant, regret_of(point, variant)


def needs_overlay(point: MeasuredPoint, choice: TableChoice, rules: RuleMap, threshold: float) -> bool:
    variant, regret = fallback_regret(point, rules)
    if variant is None:
        return True  # the fallback has no answer here at all
    if variant == choice.variant:
        return False
    if regret is None:
        return True  # cannot judge: keep the measured winner
    chosen = regret_of(point, choice.variant)
    return regret - (chosen or 0.0) > threshold


def select_overlays(
    choices: Sequence[TableChoice],
    points: Mapping[tuple[int, int, int, int], MeasuredPoint],
    rules: RuleMap,
    threshold: float,
) -> list[TableChoice]:
    """The choices that must be exact entries, in input order."""
    return [c for c in choices if needs_overlay(points[c.point], c, rules, threshold)]


def entries_of(choices: Sequence[TableChoice]) -> dict[int, dict[ExactKey, str]]:
    entries: dict[int, dict[ExactKey, str]] = {}
    for c in choices:
        entries.setdefault(c.codebook, {})[(c.m, c.n, c.k)] = c.variant
    return entries
