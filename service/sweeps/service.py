"""Sweep lifecycle over the database: submit (idempotent), status with progress, cancel."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from kernels.packages.package import NOT_APPLICABLE_PREFIX, KernelPackage
from service.db.models import Measurement, Sweep, Task, utcnow
from service.kernel_store import PackageNotFound, resolve
from service.observed import OfferedPoint, mark_offered, offered_points
from service.sweeps.availability import Presence, waiting_warnings
from service.sweeps.planning import PlannedTask, plan_tasks
from service.sweeps.runnable import unrunnable_point_problems
from service.sweeps.skip_spilling import variants_per_format
from service.sweeps.spec import SpecProblem, SweepSpec

TASK_STATES = ("queued", "running", "done", "failed", "cancelled")


class IdempotencyConflict(Exception):
    """The same Idempotency-Key was used before with a different spec."""


class InvalidSpec(ValueError):
    """A spec that names fields pydantic cannot check alone (package, variants, formats per package)."""

    def __init__(self, problems: list[SpecProblem]):
        self.problems = problems
        super().__init__("; ".join(f"{p.field}: {p.message}" for p in problems))


def validate_spec(session: Session, spec: SweepSpec) -> KernelPackage:
    """The package the sweep runs, or InvalidSpec naming every bad field."""
    try:
        package = resolve(session, spec.kernel, spec.phase)
    except PackageNotFound as error:
        raise InvalidSpec([SpecProblem(("kernel",), str(error))]) from None
    problems = spec.problems(package)
    if problems:
        raise InvalidSpec(problems)
    return package


def spec_fingerprint(spec: SweepSpec) -> str:
    return hashlib.sha256(json.dumps(spec.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


def submit_sweep(
    session: Session, spec: SweepSpec, idempotency_key: str | None, submitted_by: str
) -> tuple[Sweep, bool]:
    """Create the sweep and its tasks in one transaction; returns (sweep, created).

    Raises InvalidSpec before anything is written when the spec does not fit its package.
    """
    package = validate_spec(session, spec)
    if idempotency_key:
        existing = session.scalar(select(Sweep).where(Sweep.idempotency_key == idempotency_key))
        if existing is not None:
            return _same_or_conflict(existing, spec), False
    variants, warnings, problems = variants_per_format(
        session, spec, package, spec.resolved_variants(package)
    )
    planned = plan_tasks(spec)
    problems.extend(unrunnable_point_problems(spec, package, variants, planned))
    if problems:
        raise InvalidSpec(problems)
    spec_json = spec.model_dump(mode="json")
    spec_json["fingerprint"] = spec_fingerprint(spec)
    spec_json["warnings"] = warnings
    sweep = Sweep(
        idempotency_key=idempotency_key or None,
        arch=spec.arch,
        phase=spec.phase,
        kernel=package.name,
        kernel_version=package.version,
        strategy=spec.strategy,
        spec=spec_json,
        labels=dict(spec.labels),
        status="queued",
        submitted_by=submitted_by,
    )
    sweep.tasks = [_new_task(spec, package, t, variants[t.format]) for t in planned]
    observed_tasks, observed_ids = _observed_tasks(session, spec, package, sweep.tasks, variants)
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
    session: Session,
    spec: SweepSpec,
    package: KernelPackage,
    planned: list[Task],
    variants: dict[str, list[str]],
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
        tasks.append(_new_task(spec, package, point, variants[point.format]))
    return tasks, covered


def _new_task(
    spec: SweepSpec, package: KernelPackage, point: PlannedTask | OfferedPoint, variants: list[str]
) -> Task:
    """The queued task measuring `variants` of one package version at one planned or observed point."""
    return Task(
        arch=spec.arch,
        phase=spec.phase,
        kernel=package.name,
        kernel_version=package.version,
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
        "kernel": sweep.kernel,
        "kernel_version": sweep.kernel_version,
        "strategy": sweep.strategy,
        "labels": sweep.labels,
        "warnings": list((sweep.spec or {}).get("warnings", [])),
        "tasks": counts,
        "progress": (finished / counts["total"]) if counts["total"] else 1.0,
        "parity_failures": parity_failures(session, sweep.id),
        "created_at": sweep.created_at.isoformat() if sweep.created_at else None,
        "finished_at": sweep.finished_at.isoformat() if sweep.finished_at else None,
    }
    if presence is not None:  # the spec's own warnings (skipped variants), then why it waits, if it does
        body["workers_online"] = None if presence.error else presence.count(sweep.arch)
        body["warnings"] += waiting_warnings(sweep.arch, counts, presence)
    return body


def parity_failed() -> ColumnElement[bool]:
    """A measurement whose variant failed parity (or errored); a variant its own restrictions exclude at
    the point (stored with NOT_APPLICABLE_PREFIX) did not fail. One condition for
    the sweep status and /metrics."""
    return and_(
        Measurement.parity_pass.is_(False),
        or_(
            Measurement.error.is_(None),
            ~Measurement.error.startswith(NOT_APPLICABLE_PREFIX, autoescape=True),
        ),
    )


def parity_failures(session: Session, sweep_id: int) -> int:
    """Measurements of this sweep that failed parity: CI fails the build on these."""
    count = session.scalar(
        select(func.count()).select_from(Measurement).where(Measurement.sweep_id == sweep_id, parity_failed())
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
