"""Fallback fit, unseen-shape answers and hand-worked metrics."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.tables import PointTimes, TableChoice, generate_decode_table
from service.tables.dialects import get_dialect
from service.tables.dialects.base import ReplayAnswers
from service.tables.fallback import aspect_class, fit_fallback, fit_fallback_fixed, pick_rule
from service.tables.lookup import DecodeLookup
from service.tables.metrics import compute_metrics, percentile
from service.tables.model import MeasuredPoint

Data = tuple[list[TableChoice], list[PointTimes]]
Replay = Callable[..., ReplayAnswers]  # the conftest `replay` fixture


def choice(cb: int, m: int, n: int, k: int, variant: str, us: float, shape: str = "S") -> TableChoice:
    return TableChoice(cb, ("Q8_0",), m, n, k, shape, variant, us)


@pytest.mark.parametrize(
    ("n", "k", "expected"),
    [
        (16 * 5120, 5120, "very_wide"),
        (16 * 5120 - 1, 5120, "wide"),
        (248320, 5120, "very_wide"),
        (2048, 1024, "wide"),
        (2047, 1024, "balanced"),
        (3, 4, "balanced"),
        (74, 100, "tall"),
        (5120, 17408, "tall"),
    ],
)
def test_aspect_class_boundaries(n: int, k: int, expected: str) -> None:
    assert aspect_class(n, k) == expected


def test_fallback_segments_cut_at_midpoints_and_minimise_regret() -> None:
    # Square (balanced) shapes, work 1e6, 4e6, 9e6, 16e6: KB1/TW4 wins small, KB8/TW8 large.
    def pt(n: int, a: float, b: float) -> MeasuredPoint:
        times = {"KB1/TW4": a, "KB8/TW8": b, "KB2/TW4": max(a, b) * 2}
        return MeasuredPoint(19, 1, n, n, "S", min(times, key=times.__getitem__), times)

    points = [pt(1000, 1.0, 2.0), pt(2000, 1.0, 1.5), pt(3000, 2.0, 1.0), pt(4000, 3.0, 1.0)]
    rules = fit_fallback_fixed(points, 3)[(19, 1, "balanced")]
    assert [(r.max_work_items, r.variant) for r in rules] == [(6_500_000, "KB1/TW4"), (16_000_000, "KB8/TW8")]
    assert all(r.worst_regret == 0.0 for r in rules)
    assert pick_rule(rules, 6_500_000).variant == "KB1/TW4"
    assert pick_rule(rules, 6_500_001).variant == "KB8/TW8"
    assert pick_rule(rules, 10**12).variant == "KB8/TW8"  # beyond the data: the last rule


def test_fallback_uses_times_not_only_winners() -> None:
    # Winner counts favour KB1/TW4 (2 of 3) but it is 50% slower at the third point;
    # KB8/TW8 is within 1% everywhere, so a single segment must pick it (worst regret).
    same_work = [
        MeasuredPoint(19, 1, 1000, 1000, "a", "KB1/TW4", {"KB1/TW4": 1.00, "KB8/TW8": 1.01}),
        MeasuredPoint(19, 1, 1000, 1000, "b", "KB1/TW4", {"KB1/TW4": 1.00, "KB8/TW8": 1.01}),
        MeasuredPoint(19, 1, 1000, 1000, "c", "KB8/TW8", {"KB1/TW4": 1.50, "KB8/TW8": 1.00}),
    ]
    (rule,) = fit_fallback(same_work)[(19, 1, "balanced")]
    assert rule.variant == "KB8/TW8"
    assert rule.worst_regret == pytest.approx(0.01)


def test_fallback_without_times_takes_modal_winner() -> None:
    pts = [
        MeasuredPoint(0, 2, 1000, 1000, s, v)
        for s, v in [("a", "KB4/TW8"), ("b", "KB4/TW8"), ("c", "KB1/TW4")]
    ]
    (rule,) = fit_fallback(pts)[(0, 2, "balanced")]
    assert rule.variant == "KB4/TW8" and rule.worst_regret is None


def test_fallback_has_at_most_three_segments(data: Data) -> None:
    _, times = data
    points = [
        MeasuredPoint(*t.point, t.shape, min(t.times_us, key=t.times_us.__getitem__), t.times_us)
        for t in times
    ]
    rules = fit_fallback(points)
    assert rules and all(1 <= len(r) <= 3 for r in rules.values())


def test_fallback_on_unseen_shape_returns_known_variant(data: Data, replay: Replay) -> None:
    choices, times = data
    table = generate_decode_table(choices, times, "gfx906", ["s"])
    dialect = get_dialect("llaminar-rocm-decode")
    known = {dialect.parse_variant(v) for v in times[0].times_us}
    unseen = [
        (19, 1, 151936, 4096),  # very wide, not measured
        (5, 2, 13824, 5120),  # wide
        (0, 3, 5120, 5120),  # balanced
        (19, 4, 5120, 13824),  # tall
    ]
    answers = replay(table.text, [*unseen, (19, 7, 5120, 5120)])
    for q in unseen:
        assert answers[q] is not None and answers[q] in known, q
    assert answers[(19, 7, 5120, 5120)] is None  # M never tuned: no answer, engine keeps its default
    assert any("replay reproduces" in c for c in table.checks)


def test_metrics_hand_worked_example() -> None:
    # Three balanced points, work 1M (P1), 4M (P2), 16M (P3); P1's declared winner KB4/TW4
    # (a tie broken to the incumbent) is 10% slower than KB8/TW8 there.
    c1 = choice(19, 1, 1024, 1024, "KB4/TW4", 11.0, "P1")
    c2 = choice(19, 1, 2048, 2048, "KB8/TW8", 20.0, "P2")
    c3 = choice(19, 1, 4096, 4096, "KB8/TW8", 40.0, "P3")
    times = [
        PointTimes(19, 1, 1024, 1024, "P1", {"KB8/TW8": 10.0, "KB4/TW4": 11.0}),
        PointTimes(19, 1, 2048, 2048, "P2", {"KB8/TW8": 20.0, "KB4/TW4": 25.0}),
        PointTimes(19, 1, 4096, 4096, "P3", {"KB8/TW8": 40.0, "KB4/TW4": 48.0}),
    ]
    table = generate_decode_table([c1, c2, c3], times, "gfx906", ["sw1"])
    m = table.metrics
    # The fit: KB8/TW8 everywhere has zero worst regret, so one segment; the fallback's
    # regret at P1 against the chosen KB4/TW4 is 0 - 0.10 < 2%: no overlay anywhere.
    assert m.points == 3 and m.regret_points == 3
    assert m.entries == 0 and m.fallback_rules == 1
    assert m.coverage == 1.0
    assert m.exact_entry_rate == 0.0  # nothing answered by an exact entry
    assert m.exact_hit_rate == pytest.approx(2 / 3)  # P1 answered KB8/TW8, not its winner
    assert m.mean_regret == 0.0 and m.p95_regret == 0.0
    assert (
        "mean regret: 0.00%" in table.text
        and "exact-entry rate (answered by an overlay entry): 0.00%" in table.text
    )

    # Make KB4/TW4 win P3 by 25%: a single KB8/TW8 segment now costs 25% at P3 and a split
    # at the 4M/16M midpoint fits training data, but held out it cannot be learned from 1 point.
    times[2] = PointTimes(19, 1, 4096, 4096, "P3", {"KB8/TW8": 50.0, "KB4/TW4": 40.0})
    c3 = choice(19, 1, 4096, 4096, "KB4/TW4", 40.0, "P3")
    table = generate_decode_table([c1, c2, c3], times, "gfx906", ["sw1"])
    m = table.metrics
    # Whatever the segment count, the final table's regret is 0 at P2 and P3 (exact overlay or fit)
    # and 0 at P1 (KB8/TW8); P1's winner match depends on the fallback.
    assert m.coverage == 1.0 and m.mean_regret == 0.0 and m.max_regret == 0.0
    assert {d.shape: d.regret for d in table.decisions} == {"P1": 0.0, "P2": 0.0, "P3": 0.0}


def test_metrics_direct_two_points() -> None:
    pts = [
        MeasuredPoint(19, 1, 64, 64, "a", "KB8/TW8", {"KB8/TW8": 10.0, "KB4/TW4": 12.0}),
        MeasuredPoint(19, 1, 96, 64, "b", "KB8/TW8", {"KB8/TW8": 10.0, "KB4/TW4": 8.0}),
    ]
    lookup = DecodeLookup({19: {}}, {(19, 1, "balanced"): fit_fallback_fixed(pts, 2)[(19, 1, "balanced")]})
    # Both balanced; work 4096 vs 6144 allows a cut at 5120, so each point gets its
    # fastest variant: KB8/TW8 then KB4/TW4 (b's declared winner is not its fastest).
    m = compute_metrics(lookup, pts, fallback_rules=2)
    assert m.coverage == 1.0
    assert m.exact_entry_rate == 0.0  # no exact entries
    assert m.exact_hit_rate == 0.5  # b's declared winner KB8/TW8 differs from the answer KB4/TW4
    assert m.mean_regret == 0.0 and m.p95_regret == 0.0

    forced = DecodeLookup({19: {}}, {(19, 1, "balanced"): fit_fallback(pts[:1])[(19, 1, "balanced")]})
    m = compute_metrics(forced, pts, fallback_rules=1)  # KB8/TW8 everywhere: regrets 0, 0.25
    assert m.mean_regret == pytest.approx(0.125)
    assert m.p95_regret == pytest.approx(0.2375)


def test_percentile() -> None:
    assert percentile([0.0, 0.2], 95.0) == pytest.approx(0.19)
    assert percentile([5.0], 95.0) == 5.0
