"""Winner selection over plain data. For now: lowest median among parity-passing variants."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Candidate:
    variant: str
    median_us: float
    parity_pass: bool
    measurement_id: int
    declared_order: int = 0


@dataclass(frozen=True)
class Decision:
    winner: Candidate
    runner_up: Candidate | None
    margin: float | None  # runner-up median / winner median - 1
    decided: bool
    tie_group: list[str] = field(default_factory=list)


def choose_winner(candidates: Sequence[Candidate]) -> Decision | None:
    """A variant that failed parity can never win; None when no variant passed."""
    passing = sorted(
        (c for c in candidates if c.parity_pass), key=lambda c: (c.median_us, c.declared_order, c.variant)
    )
    if not passing:
        return None
    winner = passing[0]
    runner_up = passing[1] if len(passing) > 1 else None
    margin = (runner_up.median_us / winner.median_us - 1.0) if runner_up and winner.median_us > 0 else None
    return Decision(
        winner=winner, runner_up=runner_up, margin=margin, decided=runner_up is None or bool(margin)
    )
