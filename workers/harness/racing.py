"""Racing: spend dispatches only on variants that can still win (sweep strategy ``race``).

Every variant first gets ``min_dispatches`` interleaved dispatches. The policy then looks
at the data at *planned* round counts that grow geometrically (``min_dispatches``, then
x``look_growth`` each time, all below ``max_dispatches``): often early, when clearly slower
variants can be dropped cheaply, rarely late, when each look adds little. Because the
same data are tested at every look, each look's interval is widened for the number of
planned looks (Bonferroni): over the whole race, a variant is wrongly shown slower with
probability at most ``1 - confidence`` per comparison, not that much per look.

At a look, each contender is compared with the leader (lowest median) by the ratio of
medians and its interval (normal on the log ratio, standard error from seeded bootstrap
replicates; percentile tails at 99.5% would need ~10^4 replicates per look):

* a contender whose interval lies above ``1 + min_effect`` is *shown slower* and dropped
  (the same meaning of "shown slower" as winner selection, service.statistics.winners);
* the race stops ``decided`` when one contender is left;
* the race stops ``equivalent`` when every survivor's interval lies inside
  ``[1/(1+w), 1+w]`` with ``w = equivalence`` (default 2%, the gap below which DESIGN §5
  and issue 6 treat variants as interchangeable): more dispatches could at most separate
  them by less than ``w``, and the survivors are a tie group that winner selection breaks
  toward the incumbent, then the simpler variant. With probability ``confidence`` every
  survivor, and so the tie-break winner, is within ``w`` of the leader;
* otherwise the race stops at ``max_dispatches``.

Variants that failed parity can never win: they get ``min_dispatches`` (their timings
stay visible) and are then dropped; they are never the leader, so a broken kernel that
skips work cannot knock the correct ones out.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Protocol

from service.statistics.bootstrap import estimate_median, log_ratio_interval, stable_seed
from workers.backends.base import Dispatch, TaskSpec

DEFAULT_RACE_RESAMPLES = 500  # enough for a stable standard error; keeps a look in the low milliseconds
DEFAULT_LOOK_GROWTH = 1.25  # looks at 20, 25, 32, 40, 50, ... rounds for min_dispatches=20
DEFAULT_EQUIVALENCE = 0.02  # issue 6: gaps at or below 2% are not worth telling apart
MIN_LOOK_SAMPLES = 3


class RoundPolicy(Protocol):
    """Consulted by the interleave scheduler after every timed round."""

    def after_round(self, rounds_done: int, dispatches: Mapping[str, Sequence[Dispatch]]) -> Collection[str]:
        """Names of the live variants to keep running; an empty collection stops the task."""
        ...


def planned_looks(min_dispatches: int, max_dispatches: int, growth: float) -> tuple[int, ...]:
    """Round counts at which the race looks: geometric from ``min_dispatches``, all below the budget."""
    if growth <= 1.0:
        raise ValueError(f"look growth must be > 1, got {growth}")
    looks: list[int] = []
    n = min_dispatches
    while n < max_dispatches:
        looks.append(n)
        n = max(n + 1, math.ceil(n * growth))
    return tuple(looks)


def look_z(confidence: float, looks: int) -> float:
    """Two-sided normal quantile for one look when ``1 - confidence`` is split over ``looks`` looks."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(1.0 - (1.0 - confidence) / (2.0 * max(1, looks)))


@dataclass
class RacingPolicy:
    min_dispatches: int
    max_dispatches: int
    min_effect: float = 0.01
    eligible: frozenset[str] | None = None  # None: every variant may win
    look_growth: float = DEFAULT_LOOK_GROWTH
    equivalence: float = DEFAULT_EQUIVALENCE  # raised to min_effect when smaller
    resamples: int = DEFAULT_RACE_RESAMPLES
    confidence: float = 0.95  # over all planned looks (Bonferroni), per comparison with the leader
    seed: int | str = 0
    dropped: dict[str, int] = field(default_factory=dict)  # variant -> rounds it got
    survivors: list[str] = field(default_factory=list)  # contenders left at the last look
    stop_reason: str = ""
    stopped_at: int = 0  # rounds done when the race ended
    looks: tuple[int, ...] = field(init=False, default=())
    z: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        if self.min_dispatches < 1 or self.max_dispatches < self.min_dispatches:
            raise ValueError(f"bad race budget: min={self.min_dispatches} max={self.max_dispatches}")
        if self.min_effect < 0 or self.equivalence < 0:
            raise ValueError(f"bad effect sizes: min_effect={self.min_effect} equivalence={self.equivalence}")
        self.looks = planned_looks(self.min_dispatches, self.max_dispatches, self.look_growth)
        self.z = look_z(self.confidence, len(self.looks))

    def after_round(self, rounds_done: int, dispatches: Mapping[str, Sequence[Dispatch]]) -> Collection[str]:
        live = list(dispatches)
        if rounds_done >= self.max_dispatches:
            self.stop_reason = self.stop_reason or "max_dispatches"
            self.stopped_at = self.stopped_at or rounds_done
            return []
        if rounds_done not in self.looks:
            return live
        survivors = self.evaluate({name: [d.device_ns for d in rows] for name, rows in dispatches.items()})
        for name in live:
            if name not in survivors:
                self.dropped.setdefault(name, rounds_done)
        self.survivors = survivors
        if self.stop_reason:
            self.stopped_at = rounds_done
            return []
        return survivors

    def evaluate(self, times: Mapping[str, Sequence[float]]) -> list[str]:
        """One look: the contenders still in the race; sets ``stop_reason`` when it is over."""
        contenders = [
            name
            for name, values in times.items()
            if (self.eligible is None or name in self.eligible) and len(values) >= MIN_LOOK_SAMPLES
        ]
        if not contenders:
            self.stop_reason = "no eligible variant"
            return []
        estimates = {
            name: estimate_median(times[name], stable_seed(self.seed, name, len(times[name])), self.resamples)
            for name in contenders
        }
        leader = min(contenders, key=lambda name: (estimates[name].median, name))
        width = max(self.equivalence, self.min_effect)
        survivors = [leader]
        equivalent = True
        for name in contenders:
            if name == leader:
                continue
            _, (lo, hi) = log_ratio_interval(estimates[name], estimates[leader], self.z)
            if lo > 1.0 + self.min_effect:
                continue  # shown slower by more than the effect
            survivors.append(name)
            equivalent = equivalent and hi < 1.0 + width and lo > 1.0 / (1.0 + width)
        if len(survivors) == 1:
            self.stop_reason = "decided"
        elif equivalent:
            self.stop_reason = "equivalent"
        return survivors


def timed_rounds(spec: TaskSpec) -> int:
    """Rounds a backend plans: a race may run to max_dispatches (its policy usually ends it sooner)."""
    return spec.max_dispatches if spec.strategy == "race" else spec.min_dispatches


def policy_for(spec: TaskSpec, eligible: Collection[str] | None = None) -> RacingPolicy | None:
    """The round policy a task's strategy asks for; None for ``exhaustive``."""
    if spec.strategy != "race":
        return None
    from service.config import get_settings

    return RacingPolicy(
        min_dispatches=spec.min_dispatches,
        max_dispatches=spec.max_dispatches,
        min_effect=get_settings().min_effect,
        eligible=frozenset(eligible) if eligible is not None else None,
        seed=stable_seed(spec.arch, spec.phase, spec.format, spec.m, spec.n, spec.k, spec.seed),
    )
