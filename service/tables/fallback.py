"""A simple work-size fallback fit: per (codebook, M, aspect class) up to three
segments over work_items = N*K.

Placeholder for the regret-optimal, cross-validated fit of DESIGN §6; it is a
pure function over plain data so that replacement is local.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from service.tables.model import FallbackRule, MeasuredPoint

ASPECT_CLASSES: tuple[str, ...] = ("very_wide", "wide", "balanced", "tall")
MAX_SEGMENTS = 3


def aspect_class(n: int, k: int) -> str:
    """Classify N/K with integer arithmetic so C++ and Python agree exactly."""
    if k <= 0 or n <= 0:
        raise ValueError(f"aspect of non-positive shape {n}x{k}")
    if n >= 16 * k:
        return "very_wide"
    if n >= 2 * k:
        return "wide"
    if 4 * n >= 3 * k:
        return "balanced"
    return "tall"


def point_regret(point: MeasuredPoint, variant: str) -> float:
    """Regret of `variant` at a point; 0/1 mismatch when times are unknown."""
    if point.times_us is None:
        return 0.0 if variant == point.winner else 1.0
    t = point.times_us.get(variant)
    if t is None:
        return math.inf  # not parity-passing (or not measured) here: never choose it
    return t / min(point.times_us.values()) - 1.0


def _best_variant(points: Sequence[MeasuredPoint]) -> tuple[str, float, float, float | None]:
    """Variant minimising worst-then-mean regret; ties go to the modal winner.

    Returns (variant, worst, mean, worst true regret over points with times).
    """
    wins = Counter(p.winner for p in points)
    candidates = set(wins)
    for p in points:
        if p.times_us is not None:
            candidates.update(p.times_us)
    scored = []
    for v in candidates:
        regrets = [point_regret(p, v) for p in points]
        worst = max(regrets)
        mean = sum(regrets) / len(regrets)
        scored.append((worst, mean, -wins[v], v))
    worst, mean, _, v = min(scored)
    timed = [point_regret(p, v) for p in points if p.times_us is not None]
    return v, worst, mean, max(timed) if timed else None


def _fit_group(
    codebook: int, m: int, aspect: str, points: Sequence[MeasuredPoint]
) -> tuple[FallbackRule, ...]:
    works = sorted({p.work_items for p in points})
    by_work: dict[int, list[MeasuredPoint]] = defaultdict(list)
    for p in points:
        by_work[p.work_items].append(p)

    segment_cache: dict[tuple[int, int], tuple[str, float, float, float | None]] = {}

    def segment(i: int, j: int) -> tuple[str, float, float, float | None]:
        if (i, j) not in segment_cache:
            seg = [p for w in works[i:j] for p in by_work[w]]
            segment_cache[(i, j)] = _best_variant(seg)
        return segment_cache[(i, j)]

    best: tuple[tuple[float, float, int], tuple[int, ...]] | None = None
    n_cut_positions = len(works) - 1
    for n_cuts in range(min(MAX_SEGMENTS - 1, n_cut_positions) + 1):
        for cuts in itertools.combinations(range(1, len(works)), n_cuts):
            bounds = (0, *cuts, len(works))
            worst = 0.0
            total = 0.0
            for i, j in itertools.pairwise(bounds):
                _, seg_worst, seg_mean, _ = segment(i, j)
                count = sum(len(by_work[w]) for w in works[i:j])
                worst = max(worst, seg_worst)
                total += seg_mean * count
            score = (worst, total / len(points), len(bounds) - 1)
            if best is None or score < best[0]:
                best = (score, bounds)
    assert best is not None
    bounds = best[1]

    rules: list[FallbackRule] = []
    for idx, (i, j) in enumerate(itertools.pairwise(bounds)):
        variant, _, _, rule_worst = segment(i, j)
        last = idx == len(bounds) - 2
        # Cut at the midpoint between neighbouring distinct work sizes; the last
        # segment is open-ended at run time, its bound only records the data range.
        max_work = works[j - 1] if last else (works[j - 1] + works[j]) // 2
        count = sum(len(by_work[w]) for w in works[i:j])
        if rules and rules[-1].variant == variant:
            prev = rules.pop()
            count += prev.points
            known = [w for w in (rule_worst, prev.worst_regret) if w is not None]
            rule_worst = max(known) if known else None
        rules.append(FallbackRule(codebook, m, aspect, max_work, variant, count, rule_worst))
    return tuple(rules)


def fit_fallback(
    points: Iterable[MeasuredPoint],
) -> dict[tuple[int, int, str], tuple[FallbackRule, ...]]:
    """Fit rules per (codebook, M, aspect class) from the measured points."""
    groups: dict[tuple[int, int, str], list[MeasuredPoint]] = defaultdict(list)
    for p in points:
        groups[(p.codebook, p.m, aspect_class(p.n, p.k))].append(p)
    return {
        key: _fit_group(*key, sorted(group, key=lambda p: (p.work_items, p.n)))
        for key, group in sorted(groups.items())
    }


def pick_rule(rules: Sequence[FallbackRule], work_items: int) -> FallbackRule:
    """Mirror of pickROCmNativeVNNIDecodeAspectRule: first rule covering work, else last."""
    for rule in rules:
        if rule.max_work_items >= work_items:
            return rule
    return rules[-1]
