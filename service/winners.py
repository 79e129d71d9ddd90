"""Keep the winners table in step with measurements, one point at a time."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from kernels.formats.registry import FORMATS
from service.db.models import Measurement, Variant, Winner, utcnow
from service.statistics.winners import Candidate, choose_winner


def refresh_point(
    session: Session, arch: str, phase: str, format_name: str, m: int, n: int, k: int
) -> Winner | None:
    """Recompute the winner of one point from the newest measurement of each variant."""
    rows = session.execute(
        select(Measurement, Variant)
        .join(Variant, Measurement.variant_id == Variant.id)
        .where(
            Measurement.arch == arch,
            Measurement.phase == phase,
            Measurement.format == format_name,
            Measurement.m == m,
            Measurement.n == n,
            Measurement.k == k,
            Measurement.median_us.is_not(None),
        )
        .order_by(Measurement.id)
    ).all()
    newest: dict[str, tuple[Measurement, Variant]] = {}
    for measurement, variant in rows:
        newest[variant.name] = (measurement, variant)
    candidates = [
        Candidate(
            variant=variant.name,
            median_us=float(measurement.median_us or 0.0),
            parity_pass=measurement.parity_pass,
            measurement_id=measurement.id,
            declared_order=variant.declared_order,
        )
        for measurement, variant in newest.values()
    ]
    decision = choose_winner(candidates)
    point = (
        Winner.arch == arch,
        Winner.phase == phase,
        Winner.format == format_name,
        Winner.m == m,
        Winner.n == n,
        Winner.k == k,
    )
    if decision is None:
        session.execute(delete(Winner).where(*point))
        return None
    winner = session.scalar(select(Winner).where(*point))
    if winner is None:
        winner = Winner(arch=arch, phase=phase, format=format_name, m=m, n=n, k=k)
        session.add(winner)
    chosen = newest[decision.winner.variant][0]
    winner.codebook = FORMATS[format_name].codebook
    winner.shape = chosen.shape
    winner.variant = decision.winner.variant
    winner.measurement_id = chosen.id
    winner.median_us = decision.winner.median_us
    winner.runner_up = decision.runner_up.variant if decision.runner_up else None
    winner.runner_up_median_us = decision.runner_up.median_us if decision.runner_up else None
    winner.margin = decision.margin
    winner.margin_ci_lo = None
    winner.margin_ci_hi = None
    winner.decided = decision.decided
    winner.tie_group = list(decision.tie_group)
    winner.sweep_ids = sorted({m.sweep_id for m, _ in newest.values() if m.sweep_id is not None})
    winner.computed_at = utcnow()
    return winner
