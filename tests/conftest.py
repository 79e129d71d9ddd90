"""Shared fixtures: real databases (SQLite file and the running Postgres), a live `tunebase serve` process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

REPO = Path(__file__).resolve().parents[1]
POSTGRES_ADMIN_URL = os.environ.get(
    "TUNEBASE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def _postgres_database() -> Iterator[str]:
    name = f"tunebase_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        from service.db.session import engine_for

        engine_for.cache_clear()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each kind; tests using it run twice."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tunebase.sqlite3'}"
    else:
        yield from _postgres_database()


@pytest.fixture
def migrated_url(database_url: str) -> str:
    from service.db.migrate import upgrade

    upgrade(database_url)
    return database_url


@pytest.fixture(scope="session")
def artifact_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One compile cache for the whole run: later tests reuse what earlier ones compiled."""
    return tmp_path_factory.mktemp("artifacts")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LiveServer:
    url: str
    database_url: str
    home: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes]

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "service.cli", *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def start_server(
    home: Path, database_url: str, artifact_dir: Path, extra_env: dict[str, str] | None = None
) -> LiveServer:
    port = free_port()
    env = {
        **os.environ,
        "TUNEBASE_HOME": str(home),
        "TUNEBASE_DATABASE_URL": database_url,
        "TUNEBASE_ARTIFACT_DIR": str(artifact_dir),
        "TUNEBASE_BROKER_URL": "",
        "TUNEBASE_URL": f"http://127.0.0.1:{port}",
        **(extra_env or {}),
    }
    log = (home / "server.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {(home / 'server.log').read_text()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return LiveServer(url, database_url, home, env, process)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"server did not start: {(home / 'server.log').read_text()}")


def stop_server(server: LiveServer) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.process.kill()


@pytest.fixture
def live_server(migrated_url: str, tmp_path: Path, artifact_dir: Path) -> Iterator[LiveServer]:
    server = start_server(tmp_path, migrated_url, artifact_dir)
    try:
        yield server
    finally:
        stop_server(server)
