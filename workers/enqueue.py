"""Send task ids to their arch queue and note when (tasks.enqueued_at); for GPU arches, first one
compile-queue message per unit the sweep needs (workers/precompile.py).

A broker that is down never fails a submission: the tasks stay queued in the database with no
enqueued_at, and the reconciler sends them when the broker is back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from kernels.arches import get_arch
from service.config import Settings
from service.db.models import Task, utcnow
from workers.celery_app import COMPILE_UNIT, RUN_TASK, arch_queue, celery_for, compile_queue
from workers.precompile import compile_jobs

log = logging.getLogger(__name__)
CHUNK = 500
SEND_RETRY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1.0}


def send_tasks(broker_url: str, items: Iterable[tuple[int, str]]) -> list[int]:
    """Publish (task id, arch) pairs over one connection; returns the ids that were sent."""
    celery = celery_for(broker_url)
    sent: list[int] = []
    try:
        with celery.producer_or_acquire() as producer:
            for task_id, arch in items:
                celery.send_task(
                    RUN_TASK,
                    args=(task_id,),
                    queue=arch_queue(arch),
                    producer=producer,
                    retry=True,
                    retry_policy=SEND_RETRY,
                )
                sent.append(task_id)
    except Exception as error:  # broker down: the reconciler sends the rest later
        log.warning("broker unavailable after %d of the tasks were sent: %s", len(sent), error)
    return sent


def send_compile_jobs(broker_url: str, jobs: Sequence[tuple[int, str]]) -> list[int]:
    """One message per (representative task id, arch) on its backend's compile queue (workers/precompile.py);
    best effort."""
    celery = celery_for(broker_url)
    sent: list[int] = []
    try:
        with celery.producer_or_acquire() as producer:
            for task_id, arch in jobs:
                celery.send_task(
                    COMPILE_UNIT,
                    args=(task_id,),
                    queue=compile_queue(get_arch(arch).backend),
                    producer=producer,
                    retry=True,
                    retry_policy=SEND_RETRY,
                )
                sent.append(task_id)
    except Exception as error:  # the GPU tasks compile what is missing
        log.warning("broker unavailable after %d of the compile jobs were sent: %s", len(sent), error)
    return sent


def mark_enqueued(session: Session, task_ids: Sequence[int]) -> None:
    now = utcnow()
    for start in range(0, len(task_ids), CHUNK):
        chunk = list(task_ids[start : start + CHUNK])
        session.execute(
            update(Task).where(Task.id.in_(chunk), Task.state == "queued").values(enqueued_at=now)
        )


def enqueue_sweep(settings: Settings, session: Session, sweep_id: int) -> int:
    """After a committed submit: send the sweep's queued tasks (a no-op on the embedded path)."""
    if not settings.broker_url:
        return 0
    rows = session.execute(
        select(Task.id, Task.arch, Task.format, Task.kernel, Task.kernel_version, Task.variants)
        .where(Task.sweep_id == sweep_id, Task.state == "queued")
        .order_by(Task.id)
    ).all()
    jobs = compile_jobs((tuple(r) for r in rows), settings.precompile)
    if jobs:  # first, so the compile workers start while the GPUs take their first tasks
        arch_of = {int(r[0]): str(r[1]) for r in rows}
        send_compile_jobs(settings.broker_url, [(job, arch_of[job]) for job in jobs])
    sent = send_tasks(settings.broker_url, [(int(r[0]), str(r[1])) for r in rows])
    mark_enqueued(session, sent)
    session.commit()
    return len(sent)
