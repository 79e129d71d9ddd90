"""Grouped cross-validation picks the segment count; overlays only above the threshold."""

from __future__ import annotations

import pytest

from service.tables import GeneratedTable, PointTimes, TableChoice, generate_table
from service.tables.fallback import (
    LOSO_MAX_SHAPES,
    choose_segments,
    cv_regret,
    fit_fallback,
    fit_fallback_fixed,
    shape_folds,
)
from service.tables.model import MeasuredPoint
from service.tables.overlays import select_overlays


def balanced(n: int, times: dict[str, float], shape: str | None = None) -> MeasuredPoint:
    winner = min(sorted(times), key=times.__getitem__)
    return MeasuredPoint(19, 1, n, n, shape or f"S{n}", winner, times)


def test_loso_folds_when_few_shapes_kfold_when_many() -> None:
    few = [balanced(1000 + 64 * i, {"A": 1.0}) for i in range(5)]
    assert [len(f) for f in shape_folds(few)] == [1] * 5
    many = [balanced(1000 + 64 * i, {"A": 1.0}) for i in range(LOSO_MAX_SHAPES + 8)]
    folds = shape_folds(many)
    assert len(folds) == 5 and sorted(i for f in folds for i in f) == list(range(len(many)))


def test_cv_adds_segments_that_generalise() -> None:
    # A regime change: small shapes want A (B 30% slower), large shapes want B. Several shapes
    # on each side, so a split learned without any one shape still answers it right.
    small = [balanced(n, {"A": 1.0, "B": 1.3}) for n in (1000, 1200, 1400, 1600)]
    large = [balanced(n, {"A": 1.4, "B": 1.0}) for n in (4000, 4400, 4800, 5200)]
    segments, score = choose_segments(small + large)
    assert segments == 2
    assert score == pytest.approx(0.0)
    # one segment takes B (worst 30% < A's 40%): held out, the 4 small shapes pay 30% each
    assert cv_regret(small + large, 1) == pytest.approx(0.3 * 4 / 8)
    (first, second) = fit_fallback(small + large)[(19, 1, "balanced")]
    assert (first.variant, second.variant) == ("A", "B")
    assert first.max_work_items == (1600 * 1600 + 4000 * 4000) // 2  # midpoint cut


def test_cv_refuses_segments_that_only_fit_noise() -> None:
    # Alternating winners by a hair, plus one variant that is never bad: held out, extra
    # segments cannot predict the alternation, so the single robust segment wins.
    pts = [
        balanced(n, {"A": 1.0, "B": 1.02, "C": 1.005} if i % 2 else {"A": 1.02, "B": 1.0, "C": 1.005})
        for i, n in enumerate((1000, 1100, 1200, 1300, 1400, 1500))
    ]
    segments, _ = choose_segments(pts)
    assert segments == 1
    (rule,) = fit_fallback(pts)[(19, 1, "balanced")]
    assert rule.variant == "C" and rule.worst_regret == pytest.approx(0.005)


def test_single_shape_group_gets_one_segment() -> None:
    assert choose_segments([balanced(1000, {"A": 1.0, "B": 2.0})]) == (1, None)


A, B = "KB1/TW4", "KB8/TW8"


def _table(threshold: float) -> GeneratedTable:
    # P1..P4 balanced; the single-segment fallback (B) is 1% off at P1 and 10% off at P4.
    rows = {
        "P1": (1000, {A: 1.00, B: 1.01}),
        "P2": (1100, {A: 1.05, B: 1.00}),
        "P3": (1200, {A: 1.05, B: 1.00}),
        "P4": (1300, {A: 1.00, B: 1.10}),
    }
    choices = [
        TableChoice(19, ("Q8_0",), 1, n, n, s, min(t, key=t.__getitem__), min(t.values()))
        for s, (n, t) in rows.items()
    ]
    times = [PointTimes(19, 1, n, n, s, t) for s, (n, t) in rows.items()]
    return generate_table(choices, times, "gfx906", ["1"], overlay_threshold=threshold)


def test_overlays_only_where_fallback_regret_exceeds_threshold() -> None:
    rows = {
        "P1": (1000, {A: 1.00, B: 1.20}),
        "P2": (1100, {A: 1.10, B: 1.00}),
        "P3": (1200, {A: 1.00, B: 1.20}),
        "P4": (1300, {A: 1.01, B: 1.00}),
    }
    points = {(19, 1, n, n): balanced(n, t, s) for s, (n, t) in rows.items()}
    choices = [TableChoice(19, ("Q8_0",), 1, p.n, p.k, p.shape, p.winner, 1.0) for p in points.values()]
    rules = fit_fallback_fixed(list(points.values()), 1)  # one segment: A (worst 10% < B's 20%)
    assert [r.variant for r in rules[(19, 1, "balanced")]] == [A]
    # The fallback costs 10% at P2 (overlay) and 1% at P4 (kept on the fallback at 2%).
    assert [c.shape for c in select_overlays(choices, points, rules, 0.02)] == ["P2"]
    assert [c.shape for c in select_overlays(choices, points, rules, 0.0)] == ["P2", "P4"]
    assert select_overlays(choices, points, rules, 0.2) == []


@pytest.mark.parametrize("threshold", [0.0, 0.02, 0.05])
def test_generated_table_regret_bounded_by_threshold(threshold: float) -> None:
    g = _table(threshold)
    assert {d.shape for d in g.decisions} == {"P1", "P2", "P3", "P4"}
    for d in g.decisions:
        assert d.fallback_regret is not None and d.regret is not None
        assert (d.source == "exact") == (d.fallback_regret > threshold), d
        assert d.regret <= threshold + 1e-12
    assert g.metrics.entries == sum(d.source == "exact" for d in g.decisions)
    assert g.metrics.exact_entry_rate == pytest.approx(g.metrics.entries / 4)
    assert g.metrics.overlay_threshold == threshold
