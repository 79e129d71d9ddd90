"""Sweep lifecycle over the database: submit (idempotent), status with progress, cancel."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.db.models import Measurement, Sweep, Task, utcnow
from service.observed import OfferedPoint, mark_offered, offered_points
from service.sweeps.availability import Presence, waiting_warnings
from service.sweeps.planning import PlannedTask, plan_tasks
from service.sweeps.spec import SweepSpec

TASK_STATES = ("queued", "running", "done", "failed", "cancelled")


class IdempotencyConflict(Exception):
    """The same Idempotency-Key was used before with a different spec."""


def spec_fingerprint(spec: SweepSpec) -> str:
    return hashlib.sha256(json.dumps(spec.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


def submit_sweep(
    session: Session, spec: SweepSpec, idempotency_key: str | None, submitted_by: str
) -> tuple[Sweep, bool]:
    """Create the sweep and its tasks in one transaction; returns (sweep, created)."""
    if idempotency_key:
        existing = session.scalar(select(Sweep).where(Sweep.idempotency_key == idempotency_key))
        if existing is not None:
            return _same_or_conflict(existing, spec), False
    spec_json = spec.model_dump(mode="json")
    spec_json["fingerprint"] = spec_fingerprint(spec)
    sweep = Sweep(
        idempotency_key=idempotency_key or None,
        arch=spec.arch,
        phase=spec.phase,
        strategy=spec.strategy,
        spec=spec_json,
        labels=dict(spec.labels),
        status="queued",
        submitted_by=submitted_by,
    )
    variants = spec.resolved_variants()
    sweep.tasks = [_new_task(spec, t, variants) for t in plan_tasks(spec)]
    observed_tasks, observed_ids = _observed_tasks(session, spec, sweep.tasks, variants)
    sweep.tasks.extend(observed_tasks)
    session.add(sweep)
    try:
        session.flush()
    except IntegrityError:  # a concurrent request with the same key won the race
        session.rollback()
        existing = session.scalar(select(Sweep).where(Sweep.idempotency_key == idempotency_key))
        if existing is None:
            raise
        return _same_or_conflict(existing, spec), False
    mark_offered(session, observed_ids, sweep.id)
    return sweep, True


def _observed_tasks(
    session: Session, spec: SweepSpec, planned: list[Task], variants: list[str]
) -> tuple[list[Task], list[int]]:
    """Observed points not already planned (DESIGN §5.7), when the spec asks for them, and the ids of
    every observed row the sweep covers (planned or added)."""
    if not spec.include_observed:
        return [], []
    seen = {(t.format, t.n, t.k, t.m) for t in planned}
    tasks: list[Task] = []
    covered: list[int] = []
    for point in offered_points(session, spec.arch, spec.phase, spec.formats):
        covered.extend(point.observed_ids)
        if (point.format, point.n, point.k, point.m) in seen:
            continue
        seen.add((point.format, point.n, point.k, point.m))
        tasks.append(_new_task(spec, point, variants))
    return tasks, covered


def _new_task(spec: SweepSpec, point: PlannedTask | OfferedPoint, variants: list[str]) -> Task:
    """The queued task measuring `variants` at one planned or observed point."""
    return Task(
        arch=spec.arch,
        phase=spec.phase,
        format=point.format,
        shape=point.shape,
        n=point.n,
        k=point.k,
        m=point.m,
        variants=variants,
    )


def _same_or_conflict(existing: Sweep, spec: SweepSpec) -> Sweep:
    if existing.spec.get("fingerprint") != spec_fingerprint(spec):
        raise IdempotencyConflict(
            f"Idempotency-Key already used for sweep {existing.id} with a different spec"
        )
    return existing


def task_counts(session: Session, sweep_id: int) -> dict[str, int]:
    rows = session.execute(
        select(Task.state, func.count()).where(Task.sweep_id == sweep_id).group_by(Task.state)
    )
    counts = Counter({state: 0 for state in TASK_STATES})
    for state, count in rows:
        counts[state] = count
    result = {state: counts[state] for state in TASK_STATES}
    result["total"] = sum(result.values())
    return result


def derive_status(counts: dict[str, int]) -> str:
    """Sweep status from its tasks: the database is the source of truth, not the broker."""
    total = counts["total"]
    if total and counts["cancelled"] == total:
        return "cancelled"
    if counts["queued"] or counts["running"]:
        return "running" if (counts["running"] or counts["done"] or counts["failed"]) else "queued"
    if counts["failed"]:
        return "failed"
    if counts["cancelled"]:
        return "cancelled"
    return "done"


def refresh_sweep_status(session: Session, sweep: Sweep) -> dict[str, int]:
    counts = task_counts(session, sweep.id)
    status = derive_status(counts)
    if status != sweep.status:
        sweep.status = status
        if status in ("done", "failed", "cancelled") and sweep.finished_at is None:
            sweep.finished_at = utcnow()
    return counts


def sweep_status_body(session: Session, sweep: Sweep, presence: Presence | None = None) -> dict[str, Any]:
    """The DESIGN §7 status; with `presence`, also the workers online for its arch and why it waits."""
    counts = task_counts(session, sweep.id)
    finished = counts["done"] + counts["failed"] + counts["cancelled"]
    body: dict[str, Any] = {
        "id": sweep.id,
        "status": sweep.status,
        "arch": sweep.arch,
        "phase": sweep.phase,
        "strategy": sweep.strategy,
        "labels": sweep.labels,
        "tasks": counts,
        "progress": (finished / counts["total"]) if counts["total"] else 1.0,
        "parity_failures": parity_failures(session, sweep.id),
        "created_at": sweep.created_at.isoformat() if sweep.created_at else None,
        "finished_at": sweep.finished_at.isoformat() if sweep.finished_at else None,
        "warnings": [],
    }
    if presence is not None:
        body["workers_online"] = None if presence.error else presence.count(sweep.arch)
        body["warnings"] = waiting_warnings(sweep.arch, counts, presence)
    return body


def parity_failures(session: Session, sweep_id: int) -> int:
    """Measurements of this sweep whose variant failed parity (or errored): CI fails the build on these."""
    count = session.scalar(
        select(func.count())
        .select_from(Measurement)
        .where(Measurement.sweep_id == sweep_id, Measurement.parity_pass.is_(False))
    )
    return int(count or 0)


def cancel_sweep(session: Session, sweep: Sweep) -> int:
    """Cancel queued tasks (running ones finish; their results are kept)."""
    result = session.execute(
        update(Task)
        .where(Task.sweep_id == sweep.id, Task.state == "queued")
        .values(state="cancelled", finished_at=utcnow())
    )
    refresh_sweep_status(session, sweep)
    return int(getattr(result, "rowcount", 0) or 0)
