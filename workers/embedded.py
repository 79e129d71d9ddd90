"""The embedded worker: a thread inside `tunebase serve` / `tunebase demo` when no broker is configured."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings
from service.db.models import Task
from workers.backends.base import Backend
from workers.backends.registry import create_backend
from workers.execute import execute_task

log = logging.getLogger(__name__)


def next_queued_task(factory: sessionmaker[Session], arches: Iterable[str]) -> int | None:
    with factory() as session:
        return session.scalar(
            select(Task.id)
            .where(Task.state == "queued", Task.arch.in_(list(arches)))
            .order_by(Task.id)
            .limit(1)
        )


def run_until_idle(
    factory: sessionmaker[Session],
    backend: Backend,
    arches: Iterable[str],
    stop: threading.Event | None = None,
) -> int:
    """Run queued tasks of the given arches until none is left (or stop is set); returns how many ran."""
    arch_list = list(arches)
    ran = 0
    while not (stop and stop.is_set()) and (task_id := next_queued_task(factory, arch_list)) is not None:
        execute_task(factory, task_id, backend)
        ran += 1
    return ran


class EmbeddedWorker:
    def __init__(
        self, factory: sessionmaker[Session], backend: Backend, arches: Iterable[str], poll_seconds: float
    ):
        self._factory = factory
        self._backend = backend
        self._arches = list(arches)
        self._poll = poll_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tunebase-embedded-worker", daemon=True)
        self.companions: list[EmbeddedWorker] = []  # workers of other backends (a detected GPU)

    @property
    def arches(self) -> list[str]:
        """Every arch this worker and its companions serve (one entry per worker thread)."""
        return self._arches + [a for c in self.companions for a in c.arches]

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        for companion in self.companions:
            companion.stop(timeout)
        self._stop.set()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if run_until_idle(self._factory, self._backend, self._arches, self._stop) == 0:
                    self._stop.wait(self._poll)
            except Exception:  # keep serving; the failing task already carries its reason
                log.exception("embedded worker iteration failed")
                self._stop.wait(self._poll)


def start_embedded_worker(settings: Settings, factory: sessionmaker[Session]) -> EmbeddedWorker | None:
    """The host backend always exists; GPU backends join here once they can detect their device."""
    backend = create_backend("host", settings.resolved_artifact_dir)
    if backend.detect() is None:
        log.warning("no backend can run on this machine; the embedded worker is not started")
        return None
    worker = EmbeddedWorker(factory, backend, ["host"], settings.embedded_poll_seconds)
    worker.start()
    cuda = create_backend("cuda", settings.resolved_artifact_dir)
    if cuda.detect() is not None:  # an NVIDIA sm_90 GPU: its tasks run on a thread of their own
        gpu_worker = EmbeddedWorker(factory, cuda, ["sm_90"], settings.embedded_poll_seconds)
        gpu_worker.start()
        worker.companions.append(gpu_worker)
    return worker
