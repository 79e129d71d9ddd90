"""The reconciler: the database says what should be in flight; make the broker agree.

Run periodically by Celery beat (`tunebase.reconcile`). Each pass
1. re-queues running tasks whose lease expired (their worker died or hung without renewing), or
   fails them with the reason once they used up their attempts;
2. re-sends queued tasks whose message is presumably lost: never sent; or sent a while ago while
   their arch queue is empty (Redis restarted without persistence); or sent very long ago.
Duplicate messages are harmless: claiming a task is a conditional UPDATE (workers/execute.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings
from service.db.models import Sweep, Task, utcnow
from service.sweeps.service import refresh_sweep_status
from workers.execute import as_utc, with_db_retry

log = logging.getLogger(__name__)

Sender = Callable[[Iterable[tuple[int, str]]], list[int]]
QueueSize = Callable[[str], int | None]  # arch -> messages waiting; None when unknown


@dataclass
class ReconcileReport:
    requeued: list[int] = field(default_factory=list)  # running tasks whose lease expired
    failed: list[int] = field(default_factory=list)  # out of attempts
    resent: list[int] = field(default_factory=list)  # queued tasks sent to the broker again

    def as_dict(self) -> dict[str, list[int]]:
        return {"requeued": self.requeued, "failed": self.failed, "resent": self.resent}


def expire_leases(session: Session, now: datetime, max_attempts: int, report: ReconcileReport) -> None:
    stale = session.scalars(
        select(Task).where(Task.state == "running", Task.lease_expires_at < now).with_for_update()
    ).all()
    sweeps: set[int] = set()
    for task in stale:
        lost = f"attempt {task.attempts} by {task.lease_owner} lost (lease expired)"
        if task.attempts >= max_attempts:
            task.state = "failed"
            task.error = f"gave up after {task.attempts} attempts; last: {lost}"
            task.finished_at = now
            report.failed.append(task.id)
        else:
            task.state = "queued"
            task.error = lost
            task.enqueued_at = None  # send it again below
            report.requeued.append(task.id)
        task.lease_owner = None
        task.lease_expires_at = None
        sweeps.add(task.sweep_id)
    for sweep_id in sweeps:
        sweep = session.get(Sweep, sweep_id)
        if sweep is not None:
            refresh_sweep_status(session, sweep)


def tasks_to_resend(
    session: Session, now: datetime, settings: Settings, queue_size: QueueSize
) -> list[tuple[int, str]]:
    lost_after = timedelta(seconds=settings.requeue_lost_after_seconds)
    any_after = timedelta(seconds=settings.requeue_any_after_seconds)
    rows = session.execute(
        select(Task.id, Task.arch, Task.enqueued_at).where(Task.state == "queued").order_by(Task.id)
    ).all()
    empty: dict[str, bool] = {}
    chosen: list[tuple[int, str]] = []
    for task_id, arch, enqueued in rows:
        sent_at = as_utc(enqueued)
        if sent_at is None or now - sent_at >= any_after:
            chosen.append((task_id, arch))
            continue
        if now - sent_at >= lost_after:
            if arch not in empty:
                size = queue_size(arch)
                empty[arch] = size == 0
            if empty[arch]:
                chosen.append((task_id, arch))
    return chosen


def reconcile(
    factory: sessionmaker[Session],
    settings: Settings,
    send: Sender | None,
    queue_size: QueueSize,
    now: datetime | None = None,
) -> ReconcileReport:
    """One pass; `send` None means there is no broker (only leases are handled)."""
    report = ReconcileReport()
    moment = now or utcnow()

    def leases() -> list[tuple[int, str]]:
        with factory.begin() as session:
            expire_leases(session, moment, settings.max_attempts, report)
            return tasks_to_resend(session, moment, settings, queue_size) if send else []

    resend = with_db_retry(leases, "reconcile")
    if send is not None and resend:
        from workers.enqueue import mark_enqueued

        sent = send(resend)
        with factory.begin() as session:
            mark_enqueued(session, sent)
        report.resent = sent
    if report.requeued or report.failed or report.resent:
        log.info("reconcile: %s", report.as_dict())
    return report


def broker_queue_size(broker_url: str) -> QueueSize:
    """Messages waiting in an arch queue, read through kombu (None when the broker cannot say)."""
    from workers.celery_app import arch_queue, celery_for

    def size(arch: str) -> int | None:
        try:
            with celery_for(broker_url).connection_for_read() as connection:
                channel = connection.default_channel
                try:
                    return int(channel.queue_declare(queue=arch_queue(arch), passive=True).message_count)
                except Exception as error:  # a queue the broker does not know is an empty queue
                    if "NOT_FOUND" in str(error) or "no queue" in str(error).lower():
                        return 0
                    raise
        except Exception as error:
            log.warning("cannot read the size of %s: %s", arch_queue(arch), error)
            return None

    return size
