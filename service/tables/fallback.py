"""The regret-optimal fallback (DESIGN §6): per (codebook, M, aspect class) up to
three work-size (N*K) segments, cut at midpoints between distinct work values.

Each segment takes the variant that minimises worst, then mean, regret over every
measured variant time (not only winners). How many segments a group gets is
chosen by grouped cross-validation over shapes, so a segment is only added when
it also helps shapes it was not fitted on. Pure functions over plain data.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from service.tables.model import FallbackRule, MeasuredPoint
from service.tables.validity import DomainValidity, Validity, always_valid, domain_of

ASPECT_CLASSES: tuple[str, ...] = ("very_wide", "wide", "balanced", "tall")
MAX_SEGMENTS = 3
LOSO_MAX_SHAPES = 12  # up to this many shapes: leave-one-shape-out; beyond: K folds
CV_FOLDS = 5
# Held-out regret charged when the fitted variant was not (parity-)measured at a
# held-out shape: picking it there is at least as bad as a 100% slowdown.
UNMEASURED_PENALTY = 1.0

GroupKey = tuple[int, int, str]
RuleMap = dict[GroupKey, tuple[FallbackRule, ...]]


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
    """Regret used for fitting: 0 for variants tied with the winner, 0/1 mismatch without times."""
    if variant in point.ties:
        return 0.0
    if point.times_us is None:
        return 0.0 if variant == point.winner else 1.0
    t = point.times_us.get(variant)
    if t is None:
        return math.inf  # not parity-passing (or not measured) here: never choose it
    return t / min(point.times_us.values()) - 1.0


def regret_rows(points: Sequence[MeasuredPoint], names: Sequence[str]) -> np.ndarray:
    """points x names of point_regret (inf where not parity-passing), one pass per point's own times
    instead of one call per cell: the fitting loops build this for every fold."""
    col = {v: j for j, v in enumerate(names)}
    out = np.full((len(points), len(names)), math.inf, dtype=np.float64)
    for i, p in enumerate(points):
        if p.times_us is None:
            out[i] = 1.0
            if p.winner in col:
                out[i, col[p.winner]] = 0.0
        else:
            best = min(p.times_us.values())
            for v, t in p.times_us.items():
                j = col.get(v)
                if j is not None:
                    out[i, j] = t / best - 1.0
        for v in p.ties:
            j = col.get(v)
            if j is not None:
                out[i, j] = 0.0
    return out


@dataclass(frozen=True)
class _Segment:
    variant: str
    worst: float
    mean: float
    timed_worst: float | None  # worst true regret over points that have times
    timed_mean: float | None


def _fit_segments(
    codebook: int,
    m: int,
    aspect: str,
    points: Sequence[MeasuredPoint],
    max_segments: int,
    validity: Validity = always_valid,
) -> tuple[FallbackRule, ...]:
    """Best segmentation with at most `max_segments` segments (worst, then mean, then fewer)."""
    return _fit_segmentations(codebook, m, aspect, points, max_segments, validity)[-1]


def aspect_classes(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    """aspect_class over arrays: indices into ASPECT_CLASSES."""
    return np.where(n >= 16 * k, 0, np.where(n >= 2 * k, 1, np.where(4 * n >= 3 * k, 2, 3)))


def work_validity(
    domain: DomainValidity, codebook: int, m: int, aspect: str, names: Sequence[str], works: Sequence[int]
) -> np.ndarray:
    """len(works) x names: valid (DomainValidity.safe) at every cell of the domain grid in the aspect
    class whose work N*K a segment holding ``works[t]`` answers: from the cut below it to the cut above
    (midpoints between neighbouring works; the first from 0, the last open-ended, as pick_rule)."""
    n, k = np.meshgrid(domain.ns, domain.ks, indexing="ij")
    inside = aspect_classes(n, k) == ASPECT_CLASSES.index(aspect)
    safe = domain.safe(codebook, m, names)[inside]
    cuts = [(a + b) // 2 for a, b in itertools.pairwise(works)]
    interval = np.searchsorted(cuts, (n * k)[inside], side="left")
    order = np.argsort(interval, kind="stable")
    interval, safe = interval[order], safe[order]
    starts = np.flatnonzero(np.r_[True, interval[1:] != interval[:-1]]) if interval.size else interval
    out = np.ones((len(works), len(names)), dtype=bool)
    if interval.size:
        out[interval[starts]] = np.logical_and.reduceat(safe, starts, axis=0)
    return out


def _fit_segmentations(
    codebook: int,
    m: int,
    aspect: str,
    points: Sequence[MeasuredPoint],
    max_segments: int,
    validity: Validity = always_valid,
) -> list[tuple[FallbackRule, ...]]:
    """_fit_segments for every limit 1..max_segments at once (one pass over the cuts: the best with
    at most s segments is the best of the first s cut counts), entry s - 1 for limit s.

    A segment takes the variant minimising worst-then-mean regret over its points; ties go to the
    modal winner, then the name. Only variants seen at a segment's points (as winner or timed) compete,
    and with ``validity`` only those valid across the segment's range on the domain grid (work_validity):
    its last segment answers every larger work, where a ring's shared memory may no longer fit. A
    segment no variant is valid across scores an infinite worst regret (any other segmentation wins;
    when none is left, the rules answer a ruled-out variant and the policy's domain check says so)."""
    works = sorted({p.work_items for p in points})
    by_work: dict[int, list[MeasuredPoint]] = defaultdict(list)
    for p in points:
        by_work[p.work_items].append(p)
    rows = [p for w in works for p in by_work[w]]  # contiguous per work size
    first = [0]
    for w in works:
        first.append(first[-1] + len(by_work[w]))
    # every segment's variant at once: regret and presence matrices (rows x variants)
    names = sorted({p.winner for p in rows} | {v for p in rows if p.times_us is not None for v in p.times_us})
    col = {v: x for x, v in enumerate(names)}
    regret = regret_rows(rows, names)
    present = np.zeros_like(regret, dtype=bool)
    won = np.zeros(regret.shape, dtype=np.int64)
    for r, p in enumerate(rows):
        present[r, col[p.winner]] = True
        won[r, col[p.winner]] = 1
        if p.times_us is not None:
            present[r, [col[v] for v in p.times_us]] = True
    timed = np.array([p.times_us is not None for p in rows])
    domain = domain_of(validity)
    valid_at = None if domain is None else work_validity(domain, codebook, m, aspect, names, works)
    n_works = len(works)
    choice = np.zeros((n_works, n_works + 1), dtype=np.int64)  # [i, j]: variant of works[i:j]
    seg_worst = np.zeros((n_works, n_works + 1))
    seg_mean = np.zeros((n_works, n_works + 1))
    for i in range(n_works):
        lo = first[i]
        ends = np.array(first[i + 1 :]) - lo - 1  # last row of works[i:j], j = i+1..
        worst = np.maximum.accumulate(regret[lo:], axis=0)[ends]
        mean = np.cumsum(regret[lo:], axis=0)[ends] / (ends + 1)[:, None]
        wins = np.cumsum(won[lo:], axis=0)[ends]
        # least worst, then mean, then most wins, then the first name (the names are sorted)
        tied = np.logical_or.accumulate(present[lo:], axis=0)[ends]
        feasible = np.ones(len(ends), dtype=bool)
        if valid_at is not None:  # row r: works[i : i + r + 1]
            valid = tied & np.logical_and.accumulate(valid_at[i:], axis=0)
            feasible = valid.any(axis=1)
            tied = np.where(feasible[:, None], valid, tied)
        for key, best_of in ((worst, np.min), (mean, np.min), (wins, np.max)):
            fill = np.inf if best_of is np.min else -1
            target = best_of(np.where(tied, key, fill), axis=1)
            tied &= key == target[:, None]
        c = np.argmax(tied, axis=1)
        choice[i, i + 1 :] = c
        seg_worst[i, i + 1 :] = np.where(feasible, worst[np.arange(len(c)), c], np.inf)
        seg_mean[i, i + 1 :] = np.where(feasible, mean[np.arange(len(c)), c], np.inf)
    worst_of, mean_of = seg_worst.tolist(), seg_mean.tolist()

    def segment(i: int, j: int) -> _Segment:
        lo, hi = first[i], first[j]
        c = int(choice[i, j])
        t = regret[lo:hi][timed[lo:hi], c]
        return _Segment(
            names[c], worst_of[i][j], mean_of[i][j],
            float(t.max()) if t.size else None, float(t.mean()) if t.size else None,
        )  # fmt: skip

    def count(i: int, j: int) -> int:
        return first[j] - first[i]

    best: tuple[tuple[float, float, int], tuple[int, ...]] | None = None
    chosen: list[tuple[int, ...]] = []  # per limit 1..max_segments, the best bounds
    for n_cuts in range(max_segments):
        for cuts in itertools.combinations(range(1, len(works)), n_cuts):  # none once n_cuts >= works
            bounds = (0, *cuts, len(works))
            worst_cut = max(worst_of[i][j] for i, j in itertools.pairwise(bounds))
            total = sum(mean_of[i][j] * count(i, j) for i, j in itertools.pairwise(bounds))
            score = (worst_cut, total / len(points), len(bounds) - 1)
            if best is None or score < best[0]:
                best = (score, bounds)
        assert best is not None
        chosen.append(best[1])
    built: dict[tuple[int, ...], tuple[FallbackRule, ...]] = {}
    for bounds in chosen:
        if bounds not in built:
            built[bounds] = _rules(codebook, m, aspect, works, bounds, segment, count)
    return [built[bounds] for bounds in chosen]


def _rules(
    codebook: int,
    m: int,
    aspect: str,
    works: Sequence[int],
    bounds: tuple[int, ...],
    segment: Callable[[int, int], _Segment],
    count: Callable[[int, int], int],
) -> tuple[FallbackRule, ...]:
    """The rules of one segmentation (adjacent segments of one variant merged)."""
    rules: list[FallbackRule] = []
    for idx, (i, j) in enumerate(itertools.pairwise(bounds)):
        seg = segment(i, j)
        last = idx == len(bounds) - 2
        # Cut at the midpoint between neighbouring distinct work sizes; the last
        # segment is open-ended at run time, its bound only records the data range.
        max_work = works[j - 1] if last else (works[j - 1] + works[j]) // 2
        n_points = count(i, j)
        worst_r, mean_r = seg.timed_worst, seg.timed_mean
        if rules and rules[-1].variant == seg.variant:  # adjacent equal segments merge
            prev = rules.pop()
            known = [w for w in (worst_r, prev.worst_regret) if w is not None]
            worst_r = max(known) if known else None
            if mean_r is not None and prev.mean_regret is not None:
                mean_r = (mean_r * n_points + prev.mean_regret * prev.points) / (n_points + prev.points)
            n_points += prev.points
        rules.append(FallbackRule(codebook, m, aspect, max_work, seg.variant, n_points, worst_r, mean_r))
    return tuple(rules)


def pick_rule(rules: Sequence[FallbackRule], work_items: int) -> FallbackRule:
    """Mirror of the C++ rule pick: first rule covering work, else the last."""
    for rule in rules:
        if rule.max_work_items >= work_items:
            return rule
    return rules[-1]


def _held_out_regret(point: MeasuredPoint, variant: str) -> float:
    regret = point_regret(point, variant)
    return UNMEASURED_PENALTY if math.isinf(regret) else regret


def shape_folds(points: Sequence[MeasuredPoint]) -> list[list[int]]:
    """Indices of points grouped by shape (N, K) into CV folds.

    Leave-one-shape-out when there are few shapes; otherwise shapes are dealt
    round-robin in work order into CV_FOLDS folds (deterministic, stratified by size).
    """
    shapes = sorted({(p.n, p.k) for p in points}, key=lambda s: (s[0] * s[1], s))
    n_folds = len(shapes) if len(shapes) <= LOSO_MAX_SHAPES else CV_FOLDS
    fold_of = {shape: i % n_folds for i, shape in enumerate(shapes)}
    folds: list[list[int]] = [[] for _ in range(n_folds)]
    for idx, p in enumerate(points):
        folds[fold_of[(p.n, p.k)]].append(idx)
    return folds


def cv_regret(
    points: Sequence[MeasuredPoint], max_segments: int, validity: Validity = always_valid
) -> float | None:
    """Mean held-out regret of fitting with at most `max_segments` (None if < 2 shapes)."""
    return cv_regrets(points, max_segments, validity)[-1]


def cv_regrets(
    points: Sequence[MeasuredPoint], max_segments: int, validity: Validity = always_valid
) -> list[float | None]:
    """cv_regret for every limit 1..max_segments, each fold's training points prepared once (one
    (codebook, M, aspect class) group's points)."""
    folds = shape_folds(points)
    if len(folds) < 2:
        return [None] * max_segments
    held: list[list[float]] = [[] for _ in range(max_segments)]
    for fold in folds:
        out = set(fold)
        train = [p for i, p in enumerate(points) if i not in out]
        p0 = points[fold[0]]
        aspect = aspect_class(p0.n, p0.k)
        fits = _fit_segmentations(p0.codebook, p0.m, aspect, train, max_segments, validity)
        for s, rules in enumerate(fits):
            held[s] += [
                _held_out_regret(points[i], pick_rule(rules, points[i].work_items).variant) for i in fold
            ]
    return [sum(h) / len(h) for h in held]


def choose_segments(
    points: Sequence[MeasuredPoint], max_segments: int = MAX_SEGMENTS, validity: Validity = always_valid
) -> tuple[int, float | None]:
    """Segment count with the lowest held-out mean regret; ties go to fewer segments."""
    distinct = len({p.work_items for p in points})
    limit = max(1, min(max_segments, distinct))
    scored: list[tuple[float, int]] = []
    for s, score in enumerate(cv_regrets(points, limit, validity), start=1):
        if score is None:
            return 1, None
        scored.append((round(score, 12), s))
    best_score, best_s = min(scored)
    return best_s, best_score


@dataclass(frozen=True)
class FallbackFit:
    """Fitted rules plus the held-out regret that chose each group's segment count."""

    rules: RuleMap
    cv_regret: dict[GroupKey, float | None]

    @property
    def mean_cv_regret(self) -> float | None:
        known = [v for v in self.cv_regret.values() if v is not None]
        return sum(known) / len(known) if known else None


def group_points(points: Iterable[MeasuredPoint]) -> dict[GroupKey, list[MeasuredPoint]]:
    groups: dict[GroupKey, list[MeasuredPoint]] = defaultdict(list)
    for p in points:
        groups[(p.codebook, p.m, aspect_class(p.n, p.k))].append(p)
    return {key: sorted(g, key=lambda p: (p.work_items, p.n, p.k)) for key, g in sorted(groups.items())}


def fit_fallback_cv(
    points: Iterable[MeasuredPoint], max_segments: int = MAX_SEGMENTS, validity: Validity = always_valid
) -> FallbackFit:
    """Fit every (codebook, M, aspect) group with a CV-chosen number of segments; with ``validity``
    each segment answers only variants valid across its range (_fit_segmentations)."""
    rules: RuleMap = {}
    scores: dict[GroupKey, float | None] = {}
    for key, group in group_points(points).items():
        n_segments, score = choose_segments(group, max_segments, validity)
        rules[key] = _fit_segments(*key, group, n_segments, validity)
        scores[key] = score
    return FallbackFit(rules, scores)


def fit_fallback(points: Iterable[MeasuredPoint], max_segments: int = MAX_SEGMENTS) -> RuleMap:
    """Rules per (codebook, M, aspect class), segment counts chosen by grouped CV."""
    return fit_fallback_cv(points, max_segments).rules


def fit_fallback_fixed(points: Iterable[MeasuredPoint], segments: int) -> RuleMap:
    """Rules with at most `segments` segments per group, no CV (for baselines and tests)."""
    return {key: _fit_segments(*key, group, segments) for key, group in group_points(points).items()}
