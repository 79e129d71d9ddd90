"""Winner selection over plain data: decisions with intervals, tie groups, incumbency (DESIGN §5.5).

The rule, for one point:

1. Eligible candidates passed parity, are not stale (§5.4, §5.6) and were not raced
   out (a race already showed them slower than its leader by more than the effect, at a
   level corrected for its repeated looks; with the few dispatches they got, their wide
   interval would otherwise let them back into a tie group, where being the simpler
   variant would hand them the win).
2. The *leader* has the lowest median. Every other candidate is compared with it by
   the ratio of medians (candidate / leader) and its seeded bootstrap interval.
   A candidate is *shown slower* when the interval's lower bound exceeds
   ``1 + min_effect``; otherwise it is indistinguishable from the leader.
3. The *tie group* is the leader plus every indistinguishable candidate. A group of
   one is ``decided``. A larger group is undecided and the tie is broken toward the
   incumbent (the variant of the latest table for the key), then toward the simpler
   variant (lowest declared order), so nightly tables do not churn on noise.
4. Imported summaries (no per-dispatch times; min, mean, stddev and the run count of a
   trainer CSV) rank by their minimum, as the trainer does (their ``median_us`` holds it),
   and two of them are compared by the normal interval of the ratio of minimums
   (service.statistics.summaries): the same "lower end above 1 + min_effect" rule.
   Only a comparison between a summary and a candidate with dispatch times, whose point
   estimates are not alike (a minimum against a median), still falls back to the bare
   ratio and counts as shown slower only when the gap is at least ``summary_gap`` (10%).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from service.statistics import summaries
from service.statistics.bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    MedianEstimate,
    estimate_median,
    ratio_interval,
    stable_seed,
)

DEFAULT_MIN_EFFECT = 0.01
SUMMARY_ONLY_GAP = 0.10
MIN_BOOTSTRAP_SAMPLES = 3  # fewer dispatches than this give no meaningful interval


@dataclass(frozen=True)
class Candidate:
    """One variant's newest measurement at a point, as plain data."""

    variant: str
    median_us: float
    parity_pass: bool
    measurement_id: int
    declared_order: int = 0
    times_us: tuple[float, ...] | None = None  # per-dispatch device times; None for imported summaries
    stale: bool = False  # provenance differs from the point's current one: visible, never a winner
    raced_out: bool = False  # a race showed it slower than its leader and stopped timing it: never a winner
    summary: summaries.SummaryStats | None = None  # imported min/mean/stddev/n when there are no times


@dataclass(frozen=True)
class CandidateStats:
    """What the decision saw of one candidate; ratios are candidate / leader."""

    variant: str
    measurement_id: int
    n: int
    median_us: float
    median_ci: tuple[float, float] | None
    eligible: bool
    stale: bool
    ratio_to_leader: float | None = None
    ratio_ci: tuple[float, float] | None = None
    tied_with_leader: bool = False


@dataclass(frozen=True)
class Decision:
    winner: Candidate
    runner_up: Candidate | None
    margin: float | None  # runner-up median / winner median - 1
    decided: bool
    tie_group: list[str] = field(default_factory=list)
    margin_ci: tuple[float, float] | None = None  # interval of the margin (bootstrap), None without times
    leader: str = ""  # the lowest median (differs from winner when a tie went to the incumbent)
    reason: str = ""  # decided | single | tie:incumbent | tie:simplest
    stats: list[CandidateStats] = field(default_factory=list)


def _bootstrappable(candidate: Candidate) -> bool:
    return candidate.times_us is not None and len(candidate.times_us) >= MIN_BOOTSTRAP_SAMPLES


def choose_winner(
    candidates: Sequence[Candidate],
    min_effect: float = DEFAULT_MIN_EFFECT,
    incumbent: str | None = None,
    seed: int | str = 0,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    summary_gap: float = SUMMARY_ONLY_GAP,
) -> Decision | None:
    """Choose a point's winner; None when no candidate is eligible (parity-passing, not stale, not raced out).

    ``seed`` should identify the point (e.g. ``stable_seed(arch, phase, format, m, n, k)``):
    the same data and seed always give the same intervals and the same decision.
    """
    if min_effect < 0:
        raise ValueError(f"min_effect must be >= 0, got {min_effect}")
    estimates: dict[str, MedianEstimate] = {}
    for c in candidates:
        if _bootstrappable(c) and c.times_us is not None:
            estimates[c.variant] = estimate_median(
                c.times_us, stable_seed(seed, c.variant), resamples, confidence
            )

    def median_of(c: Candidate) -> float:
        est = estimates.get(c.variant)
        return est.median if est is not None else c.median_us

    eligible = sorted(
        (c for c in candidates if c.parity_pass and not c.stale and not c.raced_out and median_of(c) > 0),
        key=lambda c: (median_of(c), c.declared_order, c.variant),
    )
    if not eligible:
        return None
    leader = eligible[0]

    def compare(c: Candidate, base: Candidate) -> tuple[float, tuple[float, float] | None]:
        """Ratio of medians c / base, with its interval when both have dispatch times."""
        a, b = estimates.get(c.variant), estimates.get(base.variant)
        if a is not None and b is not None:
            return ratio_interval(a, b, confidence)
        if a is None and b is None and c.summary is not None and base.summary is not None:
            return summaries.ratio_interval(c.summary, base.summary, confidence)
        return median_of(c) / median_of(base), None

    tie_group = [leader.variant]
    stats: list[CandidateStats] = []
    eligible_names = {c.variant for c in eligible}
    for c in candidates:
        est = estimates.get(c.variant)
        ratio: float | None = None
        ci: tuple[float, float] | None = None
        tied = False
        if c.variant in eligible_names and c.variant != leader.variant:
            ratio, ci = compare(c, leader)
            tied = ci[0] <= 1.0 + min_effect if ci is not None else ratio < 1.0 + summary_gap
            if tied:
                tie_group.append(c.variant)
        elif c.variant == leader.variant:
            ratio, ci, tied = 1.0, None, True
        stats.append(
            CandidateStats(
                variant=c.variant,
                measurement_id=c.measurement_id,
                n=est.n if est is not None else (len(c.times_us) if c.times_us is not None else 0),
                median_us=median_of(c),
                median_ci=est.ci if est is not None else None,
                eligible=c.variant in eligible_names,
                stale=c.stale,
                ratio_to_leader=ratio,
                ratio_ci=ci,
                tied_with_leader=tied,
            )
        )

    if len(eligible) == 1:
        winner, reason = leader, "single"
    elif len(tie_group) == 1:
        winner, reason = leader, "decided"
    else:
        group = [c for c in eligible if c.variant in tie_group]
        chosen = next((c for c in group if c.variant == incumbent), None)
        if chosen is not None:
            winner, reason = chosen, "tie:incumbent"
        else:
            winner = min(group, key=lambda c: (c.declared_order, c.variant))
            reason = "tie:simplest"
    others = [c for c in eligible if c.variant != winner.variant]
    runner_up = others[0] if others else None
    margin: float | None = None
    margin_ci: tuple[float, float] | None = None
    if runner_up is not None:
        ratio, ci = compare(runner_up, winner)
        margin = ratio - 1.0
        margin_ci = (ci[0] - 1.0, ci[1] - 1.0) if ci is not None else None
    ordered_group = [c.variant for c in eligible if c.variant in tie_group]  # leader first, by median
    return Decision(
        winner=winner,
        runner_up=runner_up,
        margin=margin,
        decided=reason in ("decided", "single"),
        tie_group=ordered_group if len(ordered_group) > 1 else [],
        margin_ci=margin_ci,
        leader=leader.variant,
        reason=reason,
        stats=stats,
    )


def infer_raced_out(runs: Mapping[str, tuple[int | None, int]]) -> set[str]:
    """Variants a race stopped timing, from stored data: variant -> (task id, dispatches).

    In one task every live variant gets one dispatch per round, so a variant with fewer
    dispatches than another of the same task was dropped by the race (errors and parity
    failures are excluded from winning on their own). Measurements from different tasks,
    or without a task (imports), are never compared.
    """
    longest: dict[int, int] = {}
    for task_id, n in runs.values():
        if task_id is not None:
            longest[task_id] = max(longest.get(task_id, 0), n)
    return {name for name, (task_id, n) in runs.items() if task_id is not None and n < longest[task_id]}
