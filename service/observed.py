"""Observed shapes (DESIGN §5.7): an engine reports a GEMV/GEMM point its table missed; the next sweep of
that arch that asks for them (`"include_observed": true`) tunes them too.

Reports are deduplicated per (arch, phase, format, M, N, K) with a count and last_seen, so a chatty engine
costs one row per point. M is stored as reported and rounded up to the phase's M policy only when offered
to a sweep (that is what the runtime does with it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.db.models import ObservedShape, utcnow
from service.sweeps.policy import PHASE_M


def default_phase(m: int) -> str:
    """Engines decode with M <= 4 (verifier batches included); anything larger is a prefill GEMM."""
    return "decode" if m <= max(PHASE_M["decode"]) else "prefill"


def bucket_m(phase: str, m: int) -> int:
    """Round M up to the phase's next bucket (the largest bucket for M beyond it), like the runtime does."""
    buckets = sorted(PHASE_M[phase])
    for bucket in buckets:
        if m <= bucket:
            return bucket
    return buckets[-1]


def record_observed(
    session: Session, arch: str, phase: str, format_name: str, m: int, n: int, k: int, source: str = ""
) -> ObservedShape:
    """Insert or bump one point. A race with a concurrent insert of the same point turns into a bump."""
    key = (
        ObservedShape.arch == arch,
        ObservedShape.phase == phase,
        ObservedShape.format == format_name,
        ObservedShape.m == m,
        ObservedShape.n == n,
        ObservedShape.k == k,
    )
    now = utcnow()
    bumped = session.execute(
        update(ObservedShape).where(*key).values(count=ObservedShape.count + 1, last_seen=now, source=source)
    )
    if not getattr(bumped, "rowcount", 0):
        try:
            with session.begin_nested():
                session.add(
                    ObservedShape(
                        arch=arch,
                        phase=phase,
                        format=format_name,
                        m=m,
                        n=n,
                        k=k,
                        count=1,
                        source=source,
                        first_seen=now,
                        last_seen=now,
                    )
                )
        except IntegrityError:
            session.execute(
                update(ObservedShape)
                .where(*key)
                .values(count=ObservedShape.count + 1, last_seen=now, source=source)
            )
    row = session.scalar(select(ObservedShape).where(*key).execution_options(populate_existing=True))
    assert row is not None
    return row


@dataclass(frozen=True)
class OfferedPoint:
    """One task point taken from observed shapes, M already bucketed."""

    format: str
    shape: str
    n: int
    k: int
    m: int
    observed_ids: tuple[int, ...]


def offered_points(session: Session, arch: str, phase: str, formats: Iterable[str]) -> list[OfferedPoint]:
    """Every observed point of this arch/phase/formats, bucketed and deduplicated, most-reported first."""
    rows = session.scalars(
        select(ObservedShape)
        .where(
            ObservedShape.arch == arch,
            ObservedShape.phase == phase,
            ObservedShape.format.in_(list(formats)),
        )
        .order_by(ObservedShape.count.desc(), ObservedShape.id)
    ).all()
    points: dict[tuple[str, int, int, int], list[int]] = {}
    for row in rows:
        points.setdefault((row.format, row.n, row.k, bucket_m(phase, row.m)), []).append(row.id)
    return [
        OfferedPoint(format=f, shape=f"Observed_{n}x{k}", n=n, k=k, m=m, observed_ids=tuple(ids))
        for (f, n, k, m), ids in points.items()
    ]


def mark_offered(session: Session, observed_ids: Iterable[int], sweep_id: int) -> None:
    ids = list(observed_ids)
    if ids:
        session.execute(update(ObservedShape).where(ObservedShape.id.in_(ids)).values(last_sweep_id=sweep_id))
