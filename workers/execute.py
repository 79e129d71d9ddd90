"""Run one task by id: claim it, time its variants through a backend, store everything in one transaction.

Celery tasks and the embedded worker both call this; arguments are ids, the database knows the state.
State machine: queued -> running -> done | failed | cancelled. A claim is a conditional UPDATE, so a
redelivered message is harmless: a task already done (or failed, or cancelled) is a no-op, a task
running under a live lease is left to its owner, and a task whose lease expired or whose owner process
died is claimed again (attempts + 1) until max_attempts, after which it fails with the reason.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from sqlalchemy import ColumnElement, and_, delete, update
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from kernels.formats.registry import FORMATS
from service.db.models import Artifact, Device, Measurement, Sweep, Task, Variant, utcnow
from service.db.upsert import get_or_create
from service.kernel_store import get_package
from service.statistics.summary import summarize_ns
from service.sweeps.service import refresh_sweep_status
from service.text import storable, storable_or_none
from service.winners import refresh_point
from workers.backends.base import Backend, DeviceInfo, Dispatch, ProgressCallback, TaskResult, TaskSpec
from workers.bulk import DispatchRow, insert_dispatch_rows

log = logging.getLogger(__name__)

LEASE = timedelta(minutes=30)
DB_RETRIES = 5
# serialization_failure, deadlock_detected, lock_not_available, query_canceled, admin/crash shutdown
TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57014", "57P01", "57P02", "57P03"})
MAX_ERROR_CHARS = 20_000  # a task's or variant's failure reason, as stored
MAX_LOG_CHARS = 200_000  # a compiler log, as stored
T = TypeVar("T")


@dataclass(frozen=True)
class Policy:
    """How long a claim lasts without renewal and how often a task may be claimed."""

    lease: timedelta = LEASE
    max_attempts: int = 3


def owner_name() -> str:
    """hostname:pid of this process: lets a worker on the same host see that an owner died."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_is_dead(owner: str | None) -> bool:
    """True only when the owner ran on this host and its process is gone (other hosts: use the lease)."""
    if not owner or ":" not in owner:
        return False
    host, _, pid_text = owner.rpartition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def as_utc(value: datetime | None) -> datetime | None:
    """SQLite hands datetimes back naive; they were stored as UTC."""
    if value is not None and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def is_transient(error: BaseException) -> bool:
    """A broken connection or a lost race the database asks us to retry; anything else (a constraint,
    a value the column cannot hold) fails the same way every time and must not be retried."""
    if isinstance(error, OperationalError):
        return True
    if isinstance(error, DBAPIError):
        if error.connection_invalidated:
            return True
        code = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
        return code in TRANSIENT_SQLSTATES
    return False


def with_db_retry(action: Callable[[], T], what: str, retries: int = DB_RETRIES) -> T:
    """Retry a whole transaction when the connection broke (it rolled back: nothing was half-written)."""
    for attempt in range(1, retries + 1):
        try:
            return action()
        except DBAPIError as error:
            if not is_transient(error) or attempt == retries:
                raise
            log.warning("%s: database error (attempt %d/%d), retrying: %s", what, attempt, retries, error)
            time.sleep(min(0.2 * 2**attempt, 5.0))
    raise AssertionError("unreachable")


class ActiveTasks:
    """Task ids this process is executing right now: the heartbeat renews only their leases, so a
    task whose execution ended without a final state (an escaped error) loses its lease and the
    reconciler takes it back, instead of a live process renewing it forever."""

    def __init__(self) -> None:
        self._ids: set[int] = set()
        self._lock = threading.Lock()

    def add(self, task_id: int) -> None:
        with self._lock:
            self._ids.add(task_id)

    def discard(self, task_id: int) -> None:
        with self._lock:
            self._ids.discard(task_id)

    def snapshot(self) -> list[int]:
        with self._lock:
            return sorted(self._ids)

    def __contains__(self, task_id: object) -> bool:
        with self._lock:
            return task_id in self._ids


ACTIVE = ActiveTasks()


def _refresh_sweep(session: Session, sweep_id: int) -> None:
    sweep = session.get(Sweep, sweep_id)
    if sweep is not None:
        refresh_sweep_status(session, sweep)


def claim_task(session: Session, task_id: int, owner: str, policy: Policy | None = None) -> Task | None:
    """Move a claimable task to running under `owner`; None when there is nothing to do."""
    policy = policy or Policy()
    now = utcnow()
    task = session.get(Task, task_id)
    if task is None:
        return None
    condition: ColumnElement[bool]
    if task.state == "queued":
        condition = and_(Task.state == "queued", Task.attempts == task.attempts)
        previous = None
    elif task.state == "running":
        expires = as_utc(task.lease_expires_at)
        expired = expires is None or expires <= now
        orphaned = task.lease_owner == owner and task_id not in ACTIVE  # our earlier run ended unfinished
        if not (expired or orphaned or owner_is_dead(task.lease_owner)):
            return None  # a live owner holds it (this message is a duplicate)
        condition = and_(
            Task.state == "running", Task.attempts == task.attempts, Task.lease_owner == task.lease_owner
        )
        why = "lease expired" if expired else "ended unfinished" if orphaned else "its process died"
        previous = f"attempt {task.attempts} by {task.lease_owner} lost ({why})"
    else:
        return None  # done, failed or cancelled: a redelivery is a no-op
    if task.attempts >= policy.max_attempts:
        reason = f"gave up after {task.attempts} attempts; last: {previous or task.error or 'unknown'}"
        session.execute(
            update(Task)
            .where(Task.id == task_id, condition)
            .values(state="failed", error=reason, finished_at=now, lease_owner=None, lease_expires_at=None)
        )
        session.refresh(task)
        _refresh_sweep(session, task.sweep_id)
        return None
    values: dict[str, object] = {
        "state": "running",
        "attempts": task.attempts + 1,
        "lease_owner": owner,
        "lease_expires_at": now + policy.lease,
        "started_at": now,
    }
    if previous:
        values["error"] = previous
    result = session.execute(update(Task).where(Task.id == task_id, condition).values(**values))
    if not getattr(result, "rowcount", 0):
        return None  # another worker won the race
    session.refresh(task)
    _refresh_sweep(session, task.sweep_id)
    return task


def still_owned(task: Task, owner: str) -> bool:
    """May this owner write the task's outcome? Yes while it holds the claim, or when the reconciler
    re-queued it (lease lapsed) and nobody has claimed it since: the work is done, keep it."""
    return (task.state == "running" and task.lease_owner == owner) or task.state == "queued"


def task_spec(task: Task, sweep: Sweep, kernel_root: str = "") -> TaskSpec:
    spec = sweep.spec
    return TaskSpec(
        arch=task.arch,
        phase=task.phase,
        format=task.format,
        shape=task.shape,
        n=task.n,
        k=task.k,
        m=task.m,
        variants=tuple(task.variants),
        min_dispatches=int(spec.get("min_dispatches", 20)),
        max_dispatches=int(spec.get("max_dispatches", 200)),
        warmup=int(spec.get("warmup", 3)),
        seed=int(spec.get("seed", 0)),
        warm_cache=bool(spec.get("warm_cache", False)),
        strategy=str(spec.get("strategy", "exhaustive")),
        kernel=task.kernel,
        kernel_version=task.kernel_version,
        kernel_root=kernel_root,
    )


def execute_task(
    factory: sessionmaker[Session],
    task_id: int,
    backend: Backend,
    owner: str | None = None,
    progress: ProgressCallback | None = None,
    policy: Policy | None = None,
) -> str:
    """Returns 'done', 'failed', 'skipped' (not claimable) or 'lost' (someone else owns it now)."""
    owner = owner or owner_name()

    def claim() -> TaskSpec | None:
        with factory.begin() as session:
            task = claim_task(session, task_id, owner, policy)
            if task is None:
                return None
            sweep = session.get(Sweep, task.sweep_id)
            assert sweep is not None
            package = get_package(session, task.kernel, task.kernel_version or None)
            return task_spec(task, sweep, str(package.root))

    spec = with_db_retry(claim, f"claim task {task_id}")
    if spec is None:
        return "skipped"
    ACTIVE.add(task_id)
    try:
        return _run_and_store(factory, task_id, spec, backend, owner, progress)
    finally:
        ACTIVE.discard(task_id)


def _run_and_store(
    factory: sessionmaker[Session],
    task_id: int,
    spec: TaskSpec,
    backend: Backend,
    owner: str,
    progress: ProgressCallback | None,
) -> str:
    try:
        result = backend.run_task(spec, progress)
    except Exception as error:  # the task fails with its reason; the worker lives on
        reason = f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=5)}"
        return with_db_retry(lambda: _finish_failed(factory, task_id, owner, reason), f"fail task {task_id}")

    def store() -> str:
        with factory.begin() as session:
            task = session.get(Task, task_id, with_for_update=True)
            if task is None or not still_owned(task, owner):
                return "lost"
            store_task_result(session, task, result)
            task.state = "done"
            task.finished_at = utcnow()
            task.error = None
            task.lease_owner = None
            task.lease_expires_at = None
            refresh_point(
                session, task.arch, task.phase, task.format, task.m, task.n, task.k, kernel=task.kernel
            )
            _refresh_sweep(session, task.sweep_id)
            return "done"

    try:
        return with_db_retry(store, f"store task {task_id}")
    except Exception as error:
        if is_transient(error):
            raise  # the database stayed away: the lease lapses and the reconciler re-queues the task
        # The results cannot be stored as they are and never will be: retrying would repeat the
        # failure, so the task fails now with the reason (the store transaction rolled back whole).
        detail = error.orig if isinstance(error, DBAPIError) and error.orig is not None else error
        reason = f"storing the results failed: {type(error).__name__}: {detail}"
        log.error("task %s: %s", task_id, reason)
        return with_db_retry(lambda: _finish_failed(factory, task_id, owner, reason), f"fail task {task_id}")


def _check_unique_seq(variant: str, dispatches: list[Dispatch]) -> None:
    """(measurement_id, seq) is a dispatch row's key: a harness that numbered two launches alike
    fails its task with this reason, not with the key's constraint name."""
    seen: set[int] = set()
    for dispatch in dispatches:
        if dispatch.seq in seen:
            raise ValueError(f"variant {variant}: two timed dispatches share seq {dispatch.seq}")
        seen.add(dispatch.seq)


def _finish_failed(factory: sessionmaker[Session], task_id: int, owner: str, reason: str) -> str:
    with factory.begin() as session:
        task = session.get(Task, task_id, with_for_update=True)
        if task is None or not still_owned(task, owner):
            return "lost"
        task.state = "failed"
        task.error = storable(reason, MAX_ERROR_CHARS)
        task.finished_at = utcnow()
        task.lease_owner = None
        task.lease_expires_at = None
        _refresh_sweep(session, task.sweep_id)
        return "failed"


def upsert_device(session: Session, info: DeviceInfo) -> Device:
    """The device row (created once, even when two workers of one device register at once)."""
    device = get_or_create(
        session,
        Device,
        {
            "uuid": storable(info.uuid, 80),
            "driver_version": storable(info.driver_version, 80),
            "runtime_version": storable(info.runtime_version, 200),
        },
        {
            "backend": info.backend,
            "arch": info.arch,
            "name": storable(info.name, 200),
            "compute_units": info.compute_units,
            "hostname": storable(socket.gethostname(), 200),
            "created_at": utcnow(),
            "last_seen_at": utcnow(),
        },
    )
    device.last_seen_at = utcnow()
    return device


def upsert_variant(session: Session, family: str, name: str, params: dict[str, int], order: int) -> Variant:
    return get_or_create(
        session,
        Variant,
        {"family": family, "name": name},
        {"params": params, "declared_order": order},
    )


def upsert_artifact(session: Session, task: Task, result: TaskResult) -> Artifact:
    """The compiled unit's row; its text (toolchain banner, compiler log) comes from tools, so it is
    made storable rather than trusted."""
    info = result.artifact
    return get_or_create(
        session,
        Artifact,
        {"cache_key": storable(info.cache_key, 80)},
        {
            "backend": result.device.backend,
            "arch": task.arch,
            "family": task.kernel,
            "format": task.format,
            "source_hash": storable(info.source_hash, 80),
            "toolchain": storable(info.toolchain, 300),
            "flags": [storable(str(flag), 500) for flag in info.flags],
            "path": storable(info.path, 500),
            "ok": info.ok,
            "log": storable(info.log, MAX_LOG_CHARS),
            "resources": dict(info.resources),
            "created_at": utcnow(),
        },
    )


def store_task_result(session: Session, task: Task, result: TaskResult) -> None:
    """Replace this task's measurements (a redelivered task must not duplicate rows).

    Measurements go in with one flush; their dispatch rows with one COPY (Postgres) or one
    executemany (SQLite); all inside the caller's transaction.
    """
    session.execute(delete(Measurement).where(Measurement.task_id == task.id))  # dispatches cascade
    device = upsert_device(session, result.device)
    task.device_id = device.id
    artifact = upsert_artifact(session, task, result)
    family = get_package(session, task.kernel, task.kernel_version or None)
    backend_name = result.device.backend
    codebook = FORMATS[task.format].codebook
    pending: list[tuple[Measurement, list[Dispatch]]] = []
    for variant_result in result.results:
        _check_unique_seq(variant_result.variant, variant_result.dispatches)
        parsed = family.parse(variant_result.variant, backend_name)
        variant = upsert_variant(session, family.name, parsed.name, dict(parsed.params), parsed.order)
        summary = summarize_ns([d.device_ns for d in variant_result.dispatches])
        wall = summarize_ns([d.wall_ns for d in variant_result.dispatches])
        parity = variant_result.parity
        measurement = Measurement(
            task_id=task.id,
            sweep_id=task.sweep_id,
            variant_id=variant.id,
            artifact_id=artifact.id,
            device_id=device.id,
            arch=task.arch,
            phase=task.phase,
            format=task.format,
            codebook=codebook,
            shape=task.shape,
            n=task.n,
            k=task.k,
            m=task.m,
            source="sweep",
            kernel=task.kernel,
            kernel_version=task.kernel_version,
            source_hash=artifact.source_hash,
            toolchain=artifact.toolchain,
            n_dispatches=len(variant_result.dispatches),
            wall_median_us=wall.median_us if wall else None,
            cosine=parity.cosine if parity else None,
            rel_l2=parity.rel_l2 if parity else None,
            max_abs=parity.max_abs if parity else None,
            parity_pass=bool(parity and parity.passed and variant_result.error is None),
            parity_sampled_rows=parity.sampled_rows if parity else None,
            error=storable_or_none(variant_result.error, MAX_ERROR_CHARS),
        )
        if summary is not None:
            measurement.median_us = summary.median_us
            measurement.min_us = summary.min_us
            measurement.p10_us = summary.p10_us
            measurement.p90_us = summary.p90_us
            measurement.mean_us = summary.mean_us
            measurement.stddev_us = summary.stddev_us
            measurement.cv = summary.cv
        session.add(measurement)
        pending.append((measurement, variant_result.dispatches))
    session.flush()  # one batched INSERT ... RETURNING for all measurements
    rows: list[DispatchRow] = [
        (measurement.id, d.seq, d.device_ns, d.wall_ns, d.buffer_index, d.event_ns)
        for measurement, dispatches in pending
        for d in dispatches
    ]
    insert_dispatch_rows(session, rows)
