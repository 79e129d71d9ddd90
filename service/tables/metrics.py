"""Table quality figures over the measured points (DESIGN §6).

regret(point) = time(chosen) / time(best) - 1, only where every parity-passing
variant's time is known; otherwise the point counts for coverage and hits only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from service.tables.lookup import DecodeLookup
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


def compute_metrics(
    lookup: DecodeLookup,
    points: Sequence[MeasuredPoint],
    fallback_rules: int,
) -> TableMetrics:
    """Coverage, exact-hit rate and regret of `lookup` over `points`."""
    answered = hits = 0
    regrets: list[float] = []
    for p in points:
        chosen = lookup.select_point(p.point)
        if chosen is None:
            continue
        answered += 1
        hits += chosen == p.winner
        if p.times_us and chosen in p.times_us:
            regrets.append(p.times_us[chosen] / min(p.times_us.values()) - 1.0)
    total = len(points)
    return TableMetrics(
        coverage=answered / total if total else 0.0,
        exact_hit_rate=hits / total if total else 0.0,
        mean_regret=sum(regrets) / len(regrets) if regrets else None,
        p95_regret=percentile(regrets, 95.0) if regrets else None,
        entries=sum(len(t) for t in lookup.entries.values()),
        fallback_rules=fallback_rules,
        points=total,
        regret_points=len(regrets),
    )
