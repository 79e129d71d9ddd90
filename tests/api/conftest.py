"""A database holding one real host sweep (compiled C kernels, timed dispatches), shared per module."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from service.api.app import create_app
from service.auth import create_token
from service.config import Settings
from service.db.migrate import upgrade
from service.db.models import Task
from service.db.session import session_factory, session_scope
from service.sweeps.service import submit_sweep
from service.sweeps.spec import SweepSpec
from workers.backends.registry import create_backend
from workers.execute import execute_task

SWEEP: dict[str, Any] = {
    "arch": "host",
    "phase": "decode",
    "formats": ["Q8_0", "Q4_0"],
    "shapes": [{"name": "Api_Wide", "n": 256, "k": 256}, {"name": "Api_Tall", "n": 128, "k": 512}],
    "m": [1, 2],
    "variants": ["MX4/KB1/RW1/U4/RG1/PG0/PP0", "MX4/KB1/RW2/U2/RG1/PG0/PP0", "MX4/KB1/RW2/U4/RG1/PG0/PP0"],
    "min_dispatches": 6,
    "max_dispatches": 6,
    "labels": {"suite": "api"},
}


@dataclass
class Populated:
    settings: Settings
    sweep_id: int
    submit_token: str
    read_token: str

    def client(self, token: str | None = None) -> TestClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return TestClient(create_app(self.settings, start_embedded_worker=False), headers=headers)


def run_sweep(settings: Settings, spec: dict[str, Any]) -> int:
    """Submit and execute a sweep in-process through the real host backend."""
    url = settings.resolved_database_url
    factory = session_factory(url)
    with factory.begin() as session:
        sweep, _ = submit_sweep(session, SweepSpec(**spec), None, "tests")
        sweep_id = sweep.id
        task_ids = list(session.scalars(select(Task.id).where(Task.sweep_id == sweep_id).order_by(Task.id)))
    backend = create_backend("host", settings.resolved_artifact_dir)
    for task_id in task_ids:
        assert execute_task(factory, task_id, backend) == "done"
    return sweep_id


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory, artifact_dir: Path) -> Iterator[Populated]:
    home = tmp_path_factory.mktemp("api")
    settings = Settings(
        home=home, database_url=f"sqlite:///{home / 'api.sqlite3'}", artifact_dir=artifact_dir
    )
    upgrade(settings.resolved_database_url)
    sweep_id = run_sweep(settings, SWEEP)
    with session_scope(settings.resolved_database_url) as session:
        submit = create_token(session, "api-submit", ["submit"])
        read = create_token(session, "api-read", ["read"])
    yield Populated(settings, sweep_id, submit, read)
