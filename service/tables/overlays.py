"""Exact (M, N, K) overlays above the fallback (DESIGN §6).

An exact entry costs table size and review effort, so one is kept only where the
fallback's answer is measurably worse than both the threshold (settings.overlay_regret_threshold,
default 2%) and the chosen variant: its measured regret exceeds the threshold and the chosen
variant's. So the final table's regret at a measured point is at most the larger of the
threshold and the chosen variant's own (zero unless a tie, i.e. noise, was broken toward the
incumbent or the simpler variant). Points without per-variant times cannot be judged, so they
get an entry whenever the fallback disagrees with their winner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from service.tables.fallback import RuleMap
from service.tables.lookup import ExactKey, TableLookup
from service.tables.metrics import regret_of
from service.tables.model import MeasuredPoint, TableChoice
from service.tables.policy import Fallback, as_fallback


def fallback_regret(point: MeasuredPoint, fallback: Fallback | RuleMap) -> tuple[str | None, float | None]:
    """What the fallback alone answers at the point, and that answer's regret."""
    fb = as_fallback(fallback)
    variant = TableLookup({}, fb.rules, trees=fb.trees).select(*point.point)[0]
    return variant, regret_of(point, variant)


def needs_overlay(
    point: MeasuredPoint, choice: TableChoice, fallback: Fallback | RuleMap, threshold: float
) -> bool:
    variant, regret = fallback_regret(point, fallback)
    if variant is None:
        return True  # the fallback has no answer here at all
    if variant == choice.variant:
        return False
    if regret is None:
        return True  # cannot judge: keep the measured winner
    chosen = regret_of(point, choice.variant)
    return regret > threshold and regret > (chosen or 0.0)


def select_overlays(
    choices: Sequence[TableChoice],
    points: Mapping[tuple[int, int, int, int], MeasuredPoint],
    rules: Fallback | RuleMap,
    threshold: float,
) -> list[TableChoice]:
    """The choices that must be exact entries, in input order."""
    return [c for c in choices if needs_overlay(points[c.point], c, rules, threshold)]


def entries_of(choices: Sequence[TableChoice]) -> dict[int, dict[ExactKey, str]]:
    entries: dict[int, dict[ExactKey, str]] = {}
    for c in choices:
        entries.setdefault(c.codebook, {})[(c.m, c.n, c.k)] = c.variant
    return entries
