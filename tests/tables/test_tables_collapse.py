"""Alias collapse: one choice per (codebook, M, N, K) maximising worst alias-relative performance."""

from __future__ import annotations

import pytest

from service.tables import generate_table
from service.tables.collapse import AliasConflict, AliasPoint, collapse_aliases, collapse_point


def alias(fmt: str, times: dict[str, float], winner: str | None = None, cb: int = 5) -> AliasPoint:
    win = winner or min(sorted(times), key=times.__getitem__)
    return AliasPoint(fmt, cb, 1, 4096, 4096, "S", win, times.get(win, 1.0), times)


def test_picks_the_variant_with_the_best_worst_alias_ratio() -> None:
    # Q4_1 wants A (B +30%), Q4_K wants B (A +20%, C +5%); C is +10% on Q4_1.
    # worst ratios: A 1.20, B 1.30, C 1.10 -> C, though it wins neither alias.
    q41 = alias("Q4_1", {"A": 10.0, "B": 13.0, "C": 11.0})
    q4k = alias("Q4_K", {"A": 24.0, "B": 20.0, "C": 21.0})
    got = collapse_point([q41, q4k])
    assert got.choice.variant == "C"
    assert got.choice.formats == ("Q4_1", "Q4_K")
    assert got.worst_alias_regret == pytest.approx(0.10)
    assert got.times is not None
    assert got.times.times_us == pytest.approx({"A": 1.2, "B": 1.3, "C": 1.1})


def test_variant_failing_parity_on_one_alias_is_excluded() -> None:
    # A is fastest everywhere it passes, but fails parity on Q4_K (absent): B must win.
    q41 = alias("Q4_1", {"A": 10.0, "B": 10.5})
    q4k = alias("Q4_K", {"B": 20.0, "C": 30.0})
    got = collapse_point([q41, q4k])
    assert got.choice.variant == "B"
    assert got.times is not None and set(got.times.times_us) == {"B"}  # only variants valid for every alias


def test_single_alias_is_its_own_winner_and_ties_go_to_declared_winner() -> None:
    one = collapse_point([alias("Q8_0", {"A": 10.0, "B": 12.0}, cb=19)])
    assert one.choice.variant == "A" and one.worst_alias_regret == 0.0
    tie = collapse_point(
        [alias("Q4_1", {"A": 10.0, "B": 10.0}, winner="B"), alias("Q4_K", {"A": 5.0, "B": 5.0}, winner="B")]
    )
    assert tie.choice.variant == "B"  # equal ratios: the variant the aliases declared


def test_winners_without_times_use_the_majority() -> None:
    a = AliasPoint("IQ4_NL", 4, 2, 1024, 1024, "S", "B", 3.0, {})
    b = AliasPoint("IQ4_XS", 4, 2, 1024, 1024, "S", "B", 2.0, {})
    got = collapse_point([a, b])
    assert got.choice.variant == "B" and got.times is None and got.worst_alias_regret is None


def test_collapse_groups_by_point_and_rejects_bad_groups() -> None:
    pts = [alias("Q4_1", {"A": 1.0}), alias("Q4_K", {"A": 2.0}), alias("Q8_0", {"B": 1.0}, cb=19)]
    out = collapse_aliases(pts)
    assert [(c.choice.codebook, c.choice.formats) for c in out] == [(5, ("Q4_1", "Q4_K")), (19, ("Q8_0",))]
    with pytest.raises(ValueError, match="repeats a format"):
        collapse_point([alias("Q4_1", {"A": 1.0}), alias("Q4_1", {"A": 2.0})])
    with pytest.raises(ValueError, match="empty"):
        collapse_point([])


def test_tie_keeps_the_incumbent_only_and_reports_measured_regret() -> None:
    # B is the declared winner (a tie broken toward the incumbent); A's median is 0.5% lower
    # but statistically tied. With B the incumbent the choice stays B (no churn on noise); the
    # measured ratios are kept and B is named as tied.
    a, b, c = "KB8/TW8", "KB1/TW4", "KB2/TW4"
    times = {a: 10.0, b: 10.05, c: 12.0}
    tied = AliasPoint("Q8_0", 19, 1, 4096, 4096, "S", b, 10.05, times, (a, b), incumbent=b)
    got = collapse_point([tied])
    assert got.choice.variant == b and got.worst_alias_regret == pytest.approx(0.005)
    assert got.times is not None and got.times.times_us == pytest.approx({a: 1.0, b: 1.005, c: 1.2})
    assert b in got.times.ties
    # The fit keeps B for a one-shape group (no chasing noise); the reported regret is the measured 0.5%.
    table = generate_table([got.choice], [got.times], "gfx906", ["1"])
    (decision,) = table.decisions
    assert decision.variant == b and decision.regret == pytest.approx(0.005)
    # Without an incumbent (a first table) a tie broken toward the simpler variant is not carried
    # into the table: it takes the measured best.
    fresh = collapse_point([AliasPoint("Q8_0", 19, 1, 4096, 4096, "S", b, 10.05, times, (a, b))])
    assert fresh.choice.variant == a and fresh.worst_alias_regret == 0.0


def test_alias_group_without_a_common_variant_is_refused_naming_the_key() -> None:
    q41 = alias("Q4_1", {"A": 10.0, "B": 10.5})
    q4k = alias("Q4_K", {"C": 20.0})  # A and B fail parity on Q4_K, C fails on Q4_1
    with pytest.raises(AliasConflict) as info:
        collapse_aliases([q41, q4k, alias("Q8_0", {"A": 1.0}, cb=19)])
    (problem,) = info.value.problems
    assert problem.startswith("CB=5 M=1 ") and "Q4_1: A, B; Q4_K: C" in problem
