"""The Celery application (DESIGN §8): one queue per arch, late acks, prefetch 1, concurrency 1.

The broker only carries task ids; the database holds task state (workers/execute.py), so a lost
or duplicated message costs nothing but a re-send (workers/reconciler.py).
Run a worker with `tunebase worker --gpu N --arch A` or `celery -A workers.celery_app worker -Q arch.A`;
the compile queues (workers/precompile.py: one per backend, compile.cuda / compile.rocm / compile.host, so a
CUDA image's compile worker never takes a job only a ROCm image can build) with `tunebase worker --compile
[--backend B]` (no GPU, one process per core).
"""

from __future__ import annotations

from functools import lru_cache

from celery import Celery
from celery.schedules import crontab
from kombu import Queue

from kernels.arches import ARCH_NAMES, BACKENDS, get_arch
from service.config import Settings, get_settings

ARCHES = ARCH_NAMES
MAINTENANCE_QUEUE = "maintenance"
RUN_TASK = "tunebase.run_task"
COMPILE_UNIT = "tunebase.compile_unit"
RECONCILE = "tunebase.reconcile"
NIGHTLY_TABLES = "tunebase.tables.nightly"


def arch_queue(arch: str) -> str:
    return get_arch(arch).queue


def compile_queue(backend: str) -> str:
    """The compile queue of one backend's toolchain (an image without that toolchain does not consume it)."""
    if backend not in BACKENDS:
        raise KeyError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    return f"compile.{backend}"


COMPILE_QUEUES = tuple(compile_queue(b) for b in BACKENDS)


def parse_cron(expression: str) -> crontab:
    """'minute hour day-of-month month day-of-week' (UTC), e.g. '0 3 * * *'."""
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"cron {expression!r} needs 5 fields: minute hour day-of-month month day-of-week")
    minute, hour, day_of_month, month, day_of_week = fields
    return crontab(
        minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month, day_of_week=day_of_week
    )


def make_celery(settings: Settings) -> Celery:
    celery = Celery("tunebase", broker=settings.broker_url or "memory://", include=["workers.tasks"])
    celery.conf.update(
        task_queues=[Queue(arch_queue(a)) for a in ARCHES]
        + [Queue(q) for q in COMPILE_QUEUES]
        + [Queue(MAINTENANCE_QUEUE)],
        task_default_queue=MAINTENANCE_QUEUE,
        task_routes={
            RECONCILE: {"queue": MAINTENANCE_QUEUE},
            NIGHTLY_TABLES: {"queue": MAINTENANCE_QUEUE},
        },
        task_acks_late=True,  # a worker that dies mid-task leaves its message to be redelivered
        task_reject_on_worker_lost=True,  # ... including when the pool process is killed
        worker_prefetch_multiplier=1,  # a GPU worker holds no message it is not running
        worker_concurrency=1,  # one task at a time per GPU: timings never share the device
        task_ignore_result=True,  # no result backend: the database is the source of truth
        task_serializer="json",
        accept_content=["json"],
        timezone="UTC",
        enable_utc=True,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": settings.visibility_timeout_seconds},
        worker_hijack_root_logger=False,
        beat_schedule={
            "reconcile": {"task": RECONCILE, "schedule": settings.reconcile_seconds},
            "nightly-tables": {"task": NIGHTLY_TABLES, "schedule": parse_cron(settings.nightly_cron)},
        },
    )
    return celery


@lru_cache
def celery_for(broker_url: str) -> Celery:
    """One app per broker URL for processes that only send (the API, the reconciler)."""
    return make_celery(get_settings().model_copy(update={"broker_url": broker_url}))


app = make_celery(get_settings())
