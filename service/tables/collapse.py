"""Alias collapse to the runtime dispatch surface (DESIGN §6).

Formats that share a codebook id go through one decode path at run time, so a
table holds one choice per (codebook, M, N, K). The choice maximises the worst
alias-relative performance: for each candidate variant, its slowdown relative to
each alias's own best variant is computed, and the variant whose worst slowdown
is smallest wins. Only variants that passed parity for every alias with times
can be chosen: when none did, no single choice serves the key, and collapse
refuses with AliasConflict (the table request fails naming the key and what each
alias passed; never a silent pick of a variant that is wrong for one format).

The table is judged by measured regret, so among variants statistically tied
with an alias's best only the incumbent (the variant the latest table chose at
the key) counts as equal to the best: nightly tables do not churn on
noise, and a new key takes the measured best. A tie broken toward the "simpler"
variant (winner selection's last resort, DESIGN §5.5) is not carried into the
table, where it would only cost measured regret. The times handed on keep the
measured ratios (so reported regret is the measured one) and name the tied
incumbent separately.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from service.tables.model import AtPoint, PointKey, PointTimes, TableChoice


@dataclass(frozen=True)
class AliasPoint(AtPoint):
    """One format's result at a point: its declared winner and every parity-passing time."""

    format: str
    codebook: int
    m: int
    n: int
    k: int
    shape: str
    winner: str
    winner_median_us: float
    times_us: Mapping[str, float]  # empty when only the winner is known (imported winners)
    tie_group: tuple[str, ...] = ()  # variants statistically tied with the winner
    incumbent: str | None = None  # what the latest table chose at this key


class AliasConflict(ValueError):
    """No variant passed parity for every alias of a codebook key: one table choice cannot serve them."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("no variant passed parity for every alias:\n  " + "\n  ".join(self.problems))


@dataclass(frozen=True)
class CollapsedPoint:
    choice: TableChoice
    times: PointTimes | None  # worst alias-relative time ratio per candidate variant
    worst_alias_regret: float | None  # chosen variant's worst slowdown vs an alias's best - 1


def worst_relative(group: Sequence[AliasPoint], ties_equal: bool = True) -> dict[str, tuple[int, float]]:
    """Per variant: (aliases lacking it, worst time / alias-best ratio over aliases having it).

    With ties_equal, the incumbent counts as ratio 1.0 for an alias whose tie group holds it.
    """
    timed = [a for a in group if a.times_us]
    variants = sorted({v for a in timed for v in a.times_us})
    scores: dict[str, tuple[int, float]] = {}
    for v in variants:
        ratios = [
            1.0
            if ties_equal and v == a.incumbent and v in a.tie_group
            else a.times_us[v] / min(a.times_us.values())
            for a in timed
            if v in a.times_us
        ]
        scores[v] = (len(timed) - len(ratios), max(ratios))
    return scores


def collapse_point(group: Sequence[AliasPoint]) -> CollapsedPoint:
    """The single choice for one (codebook, M, N, K) from its aliases' results."""
    if not group:
        raise ValueError("collapse of an empty alias group")
    if len({a.point for a in group}) != 1:
        raise ValueError("alias group mixes points")
    if len({a.format for a in group}) != len(group):
        raise ValueError(f"alias group at {group[0].point} repeats a format")
    wins = Counter(a.winner for a in group)
    scores = worst_relative(group)
    if scores and min(s[0] for s in scores.values()) > 0:
        cb, m, n, k = group[0].point
        passed = "; ".join(f"{a.format}: {', '.join(sorted(a.times_us))}" for a in group if a.times_us)
        raise AliasConflict(
            [f"CB={cb} M={m} {n}x{k} ({group[0].shape}): no variant passed parity for every alias "
             f"({passed}); the table holds one choice per codebook key: re-measure the failing variants"]
        )  # fmt: skip
    if scores:
        # missing-for-no-alias first, then worst ratio, then the variant more aliases declared, then name
        chosen = min(scores, key=lambda v: (scores[v][0], scores[v][1], -wins[v], v))
    else:  # no times at all: the winner most aliases agree on
        chosen = min(wins, key=lambda v: (-wins[v], v))
    representative = min(group, key=lambda a: (a.winner != chosen, chosen not in a.times_us, a.format))
    median = representative.times_us.get(chosen, representative.winner_median_us)
    cb, m, n, k = group[0].point
    choice = TableChoice(
        cb, tuple(sorted(a.format for a in group)), m, n, k, representative.shape, chosen, median
    )
    measured = worst_relative(group, ties_equal=False)
    complete = {v: s[1] for v, s in measured.items() if s[0] == 0}
    ties = frozenset(v for v, s in scores.items() if s[0] == 0 and s[1] == 1.0 and v in complete)
    times = PointTimes(cb, m, n, k, representative.shape, complete, ties) if chosen in complete else None
    worst = measured[chosen][1] - 1.0 if chosen in measured and measured[chosen][0] == 0 else None
    return CollapsedPoint(choice, times, worst)


def collapse_aliases(points: Sequence[AliasPoint]) -> list[CollapsedPoint]:
    """One CollapsedPoint per (codebook, M, N, K), sorted by point; AliasConflict lists every bad key."""
    groups: dict[PointKey, list[AliasPoint]] = defaultdict(list)
    for a in points:
        groups[a.point].append(a)
    out: list[CollapsedPoint] = []
    problems: list[str] = []
    for _, g in sorted(groups.items()):
        try:
            out.append(collapse_point(sorted(g, key=lambda a: a.format)))
        except AliasConflict as conflict:
            problems += conflict.problems
    if problems:
        raise AliasConflict(problems)
    return out
