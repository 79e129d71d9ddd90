"""Racing: spend dispatches only on variants that can still win (sweep strategy ``race``).

Every variant first gets ``min_dispatches`` interleaved dispatches. From then on, every
``check_every`` rounds, the policy compares each contender with the leader (lowest
median) by the seeded bootstrap interval of the ratio of medians, the same rule winner
selection uses (service.statistics.winners): a contender shown slower than the leader
by more than ``min_effect`` is dropped. The race stops when one contender is left
(decided), when every survivor is shown equivalent to the leader (the whole interval
of the ratio lies below ``1 + min_effect``: more dispatches would not separate them
by a margin that matters), or at ``max_dispatches``.

Variants that failed parity can never win: they get ``min_dispatches`` (their timings
stay visible) and are then dropped; they are never the leader, so a broken kernel
that skips work cannot knock the correct ones out.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from service.statistics.bootstrap import estimate_median, ratio_interval, stable_seed
from workers.backends.base import Dispatch, TaskSpec

DEFAULT_RACE_RESAMPLES = 500  # enough for a 95% interval's tails; keeps a check in the low milliseconds


class RoundPolicy(Protocol):
    """Consulted by the interleave scheduler after every timed round."""

    def after_round(self, rounds_done: int, dispatches: Mapping[str, Sequence[Dispatch]]) -> Collection[str]:
        """Names of the live variants to keep running; an empty collection stops the task."""
        ...


@dataclass
class RacingPolicy:
    min_dispatches: int
    max_dispatches: int
    min_effect: float = 0.01
    eligible: frozenset[str] | None = None  # None: every variant may win
    check_every: int = 0  # 0: max(1, min_dispatches // 4)
    resamples: int = DEFAULT_RACE_RESAMPLES
    confidence: float = 0.95
    seed: int | str = 0
    dropped: dict[str, int] = field(default_factory=dict)  # variant -> rounds it got
    survivors: list[str] = field(default_factory=list)  # contenders left at the last check
    stop_reason: str = ""

    def __post_init__(self) -> None:
        if self.min_dispatches < 1 or self.max_dispatches < self.min_dispatches:
            raise ValueError(f"bad race budget: min={self.min_dispatches} max={self.max_dispatches}")
        if self.check_every <= 0:
            self.check_every = max(1, self.min_dispatches // 4)

    def after_round(self, rounds_done: int, dispatches: Mapping[str, Sequence[Dispatch]]) -> Collection[str]:
        live = list(dispatches)
        if rounds_done >= self.max_dispatches:
            self.stop_reason = self.stop_reason or "max_dispatches"
            return []
        if rounds_done < self.min_dispatches or (rounds_done - self.min_dispatches) % self.check_every:
            return live
        survivors = self.evaluate({name: [d.device_ns for d in rows] for name, rows in dispatches.items()})
        for name in live:
            if name not in survivors:
                self.dropped.setdefault(name, rounds_done)
        self.survivors = survivors
        return [] if self.stop_reason else survivors

    def evaluate(self, times: Mapping[str, Sequence[float]]) -> list[str]:
        """One check: the contenders still in the race; sets ``stop_reason`` when it is over."""
        contenders = [
            name
            for name, values in times.items()
            if (self.eligible is None or name in self.eligible) and len(values) >= 3
        ]
        if not contenders:
            self.stop_reason = "no eligible variant"
            return []
        estimates = {
            name: estimate_median(times[name], stable_seed(self.seed, name, len(times[name])), self.resamples)
            for name in contenders
        }
        leader = min(contenders, key=lambda name: (estimates[name].median, name))
        survivors = [leader]
        equivalent = True
        for name in contenders:
            if name == leader:
                continue
            _, (lo, hi) = ratio_interval(estimates[name], estimates[leader], self.confidence)
            if lo > 1.0 + self.min_effect:
                continue  # shown slower by more than the effect
            survivors.append(name)
            equivalent = equivalent and hi < 1.0 + self.min_effect
        if len(survivors) == 1:
            self.stop_reason = "decided"
        elif equivalent:
            self.stop_reason = "tie (equivalent within min_effect)"
        return survivors


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
