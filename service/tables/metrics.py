"""Table quality figures over the measured points (DESIGN §6), on the final table.

regret(point) = time(chosen) / time(best) - 1, only where every parity-passing
variant's time is known; otherwise the point counts for coverage and hits only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from service.tables.lookup import TableLookup
from service.tables.model import MeasuredPoint, TableMetrics


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def regret_of(point: MeasuredPoint, variant: str | None) -> float | None:
    """True regret of answering `variant` at `point`; None when it cannot be known."""
    if variant is None or not point.times_us or variant not in point.times_us:
        return None
    return point.times_us[variant] / min(point.times_us.values()) - 1.0


def compute_metrics(
    lookup: TableLookup,
    points: Sequence[MeasuredPoint],
    fallback_rules: int,
    *,
    overlay_threshold: float | None = None,
    cv_regret: float | None = None,
) -> TableMetrics:
    """Coverage, exact-hit rate (answer = winner), exact-entry rate and regret over `points`."""
    answered = exact = matches = 0
    regrets: list[float] = []
    for p in points:
        chosen, source = lookup.select(*p.point)
        if chosen is None:
            continue
        answered += 1
        exact += source == "exact"
        matches += chosen == p.winner
        regret = regret_of(p, chosen)
        if regret is not None:
            regrets.append(regret)
    total = len(points)
    return TableMetrics(
        coverage=answered / total if total else 0.0,
        exact_hit_rate=matches / total if total else 0.0,
        mean_regret=sum(regrets) / len(regrets) if regrets else None,
        p95_regret=percentile(regrets, 95.0) if regrets else None,
        entries=sum(len(t) for t in lookup.entries.values()),
        fallback_rules=fallback_rules,
        points=total,
        regret_points=len(regrets),
        exact_entry_rate=exact / total if total else 0.0,
        max_regret=max(regrets) if regrets else None,
        overlay_threshold=overlay_threshold,
        segments_cv_regret=cv_regret,
    )
