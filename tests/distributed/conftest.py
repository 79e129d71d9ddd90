"""Real processes for the fault tests: a private redis-server, a fresh Postgres DB, Celery workers.

The private Redis (its own port, `--save ""`) may be restarted by a test without touching the
shared server on 6379; every test gets its own Redis DB number and Postgres database.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from service.config import Settings
from service.db.models import Dispatch, Measurement, Task
from service.db.session import session_factory
from service.sweeps.service import submit_sweep, task_counts
from service.sweeps.spec import SweepSpec
from tests.conftest import REPO, _postgres_database, free_port

pytestmark = pytest.mark.postgres
_db_numbers = itertools.count(1)


class RedisServer:
    """A redis-server of our own that keeps nothing on disk (a restart empties every queue)."""

    def __init__(self, workdir: Path):
        self.port = free_port()
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [
            shutil.which("redis-server") or "redis-server",
            "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(self.workdir), "--databases", "64",
        ]  # fmt: skip
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return
            except redis.RedisError:
                time.sleep(0.1)
        raise RuntimeError("private redis-server did not start")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=20)
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="session")
def private_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (scripts/ensure-system.sh installs it)")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def descendants(pid: int) -> list[int]:
    """Every process below pid (from /proc), deepest last."""
    found: list[int] = []
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found.append(child)
            stack.append(child)
    return found


def kill_tree(pid: int) -> None:
    for target in [pid, *descendants(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)


@dataclass
class Cluster:
    """A Postgres DB, a Redis DB and the Celery workers a test starts (all killed at teardown)."""

    database_url: str
    broker_url: str
    home: Path
    artifact_dir: Path
    redis: RedisServer
    extra_env: dict[str, str] = field(default_factory=dict)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def settings(self) -> Settings:
        return Settings(
            home=self.home,
            database_url=self.database_url,
            broker_url=self.broker_url,
            artifact_dir=self.artifact_dir,
            lease_seconds=3,
            heartbeat_seconds=0.5,
            requeue_lost_after_seconds=1,
        )

    @property
    def factory(self) -> sessionmaker[Session]:
        return session_factory(self.database_url)

    def env(self, database_url: str | None = None) -> dict[str, str]:
        return {
            **os.environ,
            "TUNEBASE_HOME": str(self.home),
            "TUNEBASE_DATABASE_URL": database_url or self.database_url,
            "TUNEBASE_BROKER_URL": self.broker_url,
            "TUNEBASE_ARTIFACT_DIR": str(self.artifact_dir),
            "TUNEBASE_LEASE_SECONDS": "3",
            "TUNEBASE_HEARTBEAT_SECONDS": "0.5",
            "TUNEBASE_TASK_TIMEOUT_SECONDS": "120",
            "TUNEBASE_WORKER_ARCH": "host",
            **self.extra_env,
        }

    def start_worker(self, name: str, database_url: str | None = None) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable, "-m", "celery", "-A", "workers.celery_app", "worker",
            "--queues", "arch.host", "--concurrency", "1", "--prefetch-multiplier", "1",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--hostname", f"{name}@%h", "--loglevel", "INFO",
        ]  # fmt: skip
        log = (self.home / f"{name}.log").open("ab")
        process = subprocess.Popen(argv, env=self.env(database_url), cwd=REPO, stdout=log, stderr=log)
        self.workers.append(process)
        return process

    def log(self, name: str) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def submit(self, spec: dict[str, Any]) -> int:
        """Submit like the API does: one transaction, then send the task ids to the broker."""
        from workers.enqueue import enqueue_sweep

        with self.factory() as session:
            sweep, _ = submit_sweep(session, SweepSpec.model_validate(spec), None, "test")
            session.commit()
            enqueue_sweep(self.settings, session, sweep.id)
            return sweep.id

    def counts(self, sweep_id: int) -> dict[str, int]:
        with self.factory() as session:
            return task_counts(session, sweep_id)

    def wait(
        self,
        sweep_id: int,
        timeout: float,
        until: Callable[[dict[str, int]], bool] | None = None,
        every: Callable[[], object] | None = None,
    ) -> dict[str, int]:
        """Poll until `until(counts)` (default: nothing queued or running); `every` runs each poll."""
        until = until or (lambda c: c["queued"] == 0 and c["running"] == 0)
        deadline = time.monotonic() + timeout
        while True:
            counts = self.counts(sweep_id)
            if until(counts):
                return counts
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                                 for p in self.home.glob("*.log"))  # fmt: skip
                raise AssertionError(f"sweep {sweep_id} stuck at {counts}\n{logs}")
            if every is not None:
                every()
            time.sleep(0.3)

    def running_tasks(self, sweep_id: int) -> list[Task]:
        with self.factory() as session:
            query = select(Task).where(Task.sweep_id == sweep_id, Task.state == "running")
            return list(session.scalars(query))

    def assert_no_duplicates(self, sweep_id: int) -> None:
        """Each done task has one measurement per variant and exactly its dispatch rows, once each."""
        with self.factory() as session:
            done = select(Task).where(Task.sweep_id == sweep_id, Task.state == "done")
            for task in session.scalars(done):
                query = select(Measurement).where(Measurement.task_id == task.id)
                measurements = session.scalars(query).all()
                assert len(measurements) == len(task.variants), task.id
                for m in measurements:
                    rows, distinct = session.execute(
                        select(func.count(), func.count(func.distinct(Dispatch.seq))).where(
                            Dispatch.measurement_id == m.id
                        )
                    ).one()
                    assert rows == distinct == m.n_dispatches > 0, (task.id, m.id, rows, distinct)

    def stop(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                kill_tree(process.pid)
                process.wait(timeout=20)


@pytest.fixture
def cluster(private_redis: RedisServer, tmp_path: Path, artifact_dir: Path) -> Iterator[Cluster]:
    from service.db.migrate import upgrade

    for database_url in _postgres_database():
        upgrade(database_url)
        broker = f"redis://127.0.0.1:{private_redis.port}/{next(_db_numbers)}"
        created = Cluster(database_url, broker, tmp_path, artifact_dir, private_redis)
        try:
            yield created
        finally:
            created.stop()
            session_factory(database_url).kw["bind"].dispose()


def smoke_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "arch": "host",
        "phase": "decode",
        "formats": ["Q8_0"],
        "shapes": [{"name": f"Dist_{i}", "n": 256, "k": 256 * (i + 1)} for i in range(4)],
        "m": [1],
        "variants": ["MX4/KB1/RW1/U4/RG1/PG0/PP0", "MX4/KB4/RW1/U4/RG1/PG0/PP0"],
        "min_dispatches": 20,
        "warmup": 2,
    }
    spec.update(overrides)
    spec.setdefault("max_dispatches", max(200, int(spec["min_dispatches"])))  # exhaustive: min is what runs
    return spec
