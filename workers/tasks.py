"""Celery tasks: thin, idempotent wrappers; the work and the state live in workers/execute.py and the DB."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from celery import Task as CeleryTask
from celery.signals import worker_process_shutdown
from sqlalchemy import update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings, get_settings
from service.db.models import Device, Task, utcnow
from service.db.session import session_factory, session_scope
from workers.backends.base import Backend
from workers.backends.registry import backend_name_for_arch
from workers.celery_app import COMPILE_UNIT, NIGHTLY_TABLES, RECONCILE, RUN_TASK, app
from workers.execute import (
    ACTIVE,
    Policy,
    execute_task,
    is_transient,
    owner_name,
    upsert_device,
    with_db_retry,
)
from workers.isolation import BackendRef, IsolatedBackend, load_backend

log = logging.getLogger(__name__)
MESSAGE_RETRIES = 10
COMPILE_TIME_LIMIT_S = 1800  # a compile job past this is killed (its pool process is replaced)


class Heartbeat:
    """Renews the leases of the tasks this process is executing (workers.execute.ACTIVE), and its
    device's last_seen_at. Only those: a task this process claimed but no longer runs must lose its
    lease, or it would stay "running" for as long as the process lives."""

    def __init__(self, factory: sessionmaker[Session], owner: str, settings: Settings, device_id: int | None):
        self.factory = factory
        self.owner = owner
        self.lease = timedelta(seconds=settings.lease_seconds)
        self.interval = settings.heartbeat_seconds
        self.device_id = device_id
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="tunebase-heartbeat", daemon=True)

    def beat(self) -> None:
        now = utcnow()
        active = ACTIVE.snapshot()
        with self.factory.begin() as session:
            if active:
                session.execute(
                    update(Task)
                    .where(Task.id.in_(active), Task.lease_owner == self.owner, Task.state == "running")
                    .values(lease_expires_at=now + self.lease)
                )
            if self.device_id is not None:
                session.execute(update(Device).where(Device.id == self.device_id).values(last_seen_at=now))

    def _loop(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self.beat()
            except Exception as error:  # the lease may lapse; the reconciler copes
                log.warning("heartbeat failed: %s", error)


@dataclass
class WorkerContext:
    settings: Settings
    factory: sessionmaker[Session]
    backend: Backend
    owner: str
    policy: Policy
    heartbeat: Heartbeat


_context: WorkerContext | None = None
_context_lock = threading.Lock()


def build_backend(settings: Settings, arch: str) -> Backend:
    """The arch's backend; behind the watchdog (a resident child, or one per call: task_isolation)
    unless the timeout is 0."""
    artifacts = str(settings.resolved_artifact_dir)
    ref = BackendRef(backend_name_for_arch(arch), artifacts, settings.backend_factory)
    if settings.task_timeout_seconds > 0:
        return IsolatedBackend(
            ref,
            settings.task_timeout_seconds,
            mode=settings.task_isolation,
            recycle_calls=settings.task_isolation_recycle_calls,
            max_rss_mb=settings.task_isolation_max_rss_mb,
        )
    return load_backend(ref.name, settings.resolved_artifact_dir, ref.factory)


def register_device(factory: sessionmaker[Session], backend: Backend) -> int | None:
    """Detect the pinned device and record it (devices table); None when none was found."""
    info = backend.detect()
    if info is None:
        log.error("backend %s found no device in this process", backend.name)
        return None

    def write() -> int:
        with factory.begin() as session:
            return upsert_device(session, info).id

    device_id = with_db_retry(write, "register device")
    log.info("registered device %s (%s, uuid %s) as id %d", info.name, info.arch, info.uuid, device_id)
    return device_id


def worker_context() -> WorkerContext:
    """Built once per pool process, lazily: pinning env vars are set before any backend starts."""
    global _context
    with _context_lock:
        if _context is None or _context.owner != owner_name():  # a forked child builds its own
            settings = get_settings()
            factory = session_factory(settings.resolved_database_url)
            arch = os.environ.get("TUNEBASE_WORKER_ARCH", settings.worker_arch)
            backend = build_backend(settings, arch)
            owner = owner_name()
            device_id = register_device(factory, backend)
            heartbeat = Heartbeat(factory, owner, settings, device_id)
            heartbeat.thread.start()
            lease = timedelta(seconds=settings.lease_seconds)
            policy = Policy(lease=lease, max_attempts=settings.max_attempts)
            _context = WorkerContext(settings, factory, backend, owner, policy, heartbeat)
        return _context


@worker_process_shutdown.connect
def _stop_heartbeat(**_: Any) -> None:
    """Stop renewing leases, and stop the resident watchdog child (it would also go at EOF)."""
    if _context is not None:
        _context.heartbeat.stop.set()
        close = getattr(_context.backend, "close", None)
        if callable(close):
            try:
                close()
            except Exception as error:  # shutting down anyway
                log.warning("closing backend %s failed: %s", _context.backend.name, error)


@app.task(name=RUN_TASK, bind=True, max_retries=MESSAGE_RETRIES)
def run_task(self: CeleryTask, task_id: int) -> str:
    """Execute one task by id; redeliveries and duplicates are no-ops (the DB decides).

    A database that stayed away through execute's own retries gets a bounded number of message
    retries; the claim then takes the task back (its attempts count, so it ends failed with the
    reason at max_attempts). A permanent database error never reaches here: execute fails the task.
    """
    context = worker_context()
    try:
        outcome = execute_task(
            context.factory, int(task_id), context.backend, owner=context.owner, policy=context.policy
        )
    except DBAPIError as error:
        if not is_transient(error):
            log.error("task %s: permanent database error: %s", task_id, error)
            raise
        raise self.retry(exc=error, countdown=5) from error
    log.info("task %s: %s", task_id, outcome)
    return outcome


@app.task(name=COMPILE_UNIT, acks_late=False, time_limit=COMPILE_TIME_LIMIT_S)
def compile_unit(task_id: int) -> dict[str, Any]:
    """Compile the units task ``task_id`` needs into the shared artifact directory (no device).

    Acked on receipt, unlike run_task: precompiling is an optimisation, and a job that crashes its
    process (or hits the time limit) must not be redelivered forever; the GPU task compiles on a miss.
    A failure is logged as an error with the compiler's log, never raised.
    """
    from workers.precompile import precompile_task

    settings = get_settings()
    factory = session_factory(settings.resolved_database_url)
    report = precompile_task(factory, int(task_id), settings.resolved_artifact_dir)
    if report.ok:
        log.info(report.line())
    else:
        details = report.error or "\n".join(u.log[-2000:] for u in report.units if not u.ok)
        log.error("%s\n%s", report.line(), details)
    return report.as_dict()


@app.task(name=RECONCILE)
def reconcile() -> dict[str, list[int]]:
    """Periodic (beat): re-send lost messages, re-queue expired leases, fail tasks out of attempts."""
    from workers.enqueue import send_tasks
    from workers.reconciler import broker_queue_size
    from workers.reconciler import reconcile as reconcile_once

    settings = get_settings()
    factory = session_factory(settings.resolved_database_url)
    broker = settings.broker_url

    def send(items: Any) -> list[int]:
        return send_tasks(broker, items)

    report = reconcile_once(factory, settings, send if broker else None, broker_queue_size(broker))
    return report.as_dict()


@app.task(name=NIGHTLY_TABLES)
def nightly_tables() -> str:
    """Nightly (beat): regenerate every table from the stored winners."""
    from service.tables.nightly import regenerate_all  # type: ignore[import-not-found,unused-ignore]

    with session_scope(get_settings().resolved_database_url) as session:
        result = regenerate_all(session)
    log.info("nightly tables: %s", result)
    return str(result)
