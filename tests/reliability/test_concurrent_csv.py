"""Concurrent CSV downloads on Postgres: every body complete, other routes served meanwhile.

Each download used to hold two pooled connections (the request's session and a second one for the
stream); sixteen at once exhausted the pool, waited on each other and ended in empty 200 bodies.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from service.db.session import session_scope
from tests.conftest import LiveServer, _postgres_database, start_server, stop_server
from tests.reliability.seed import seed_dispatches

pytestmark = pytest.mark.postgres
ROWS = 20_000
CLIENTS = 24


@pytest.fixture
def csv_server(tmp_path: Path, artifact_dir: Path) -> Iterator[tuple[LiveServer, list[int]]]:
    from service.db.migrate import upgrade

    for url in _postgres_database():
        upgrade(url)
        with session_scope(url) as session:
            ids = seed_dispatches(session, 4, ROWS)
        # a small pool: 24 clients share 6 connections, so any request needing two would starve
        env = {
            "TUNEBASE_EMBEDDED_WORKER": "false",
            "TUNEBASE_ANONYMOUS_READ": "true",
            "TUNEBASE_DB_POOL_SIZE": "3",
            "TUNEBASE_DB_MAX_OVERFLOW": "3",
            "TUNEBASE_DB_POOL_TIMEOUT": "60",
        }
        server = start_server(tmp_path, url, artifact_dir, env)
        try:
            yield server, ids
        finally:
            stop_server(server)


def test_concurrent_csv_downloads_are_all_complete(csv_server: tuple[LiveServer, list[int]]) -> None:
    server, ids = csv_server

    def download(index: int) -> tuple[int, int, str]:
        measurement = ids[index % len(ids)]
        url = f"{server.url}/v1/measurements/{measurement}/dispatches?format=csv"
        response = httpx.get(url, timeout=120)
        lines = response.text.splitlines()
        return response.status_code, len(lines) - 1, lines[-1] if lines else ""

    def winners() -> int:
        return httpx.get(f"{server.url}/v1/winners", timeout=120).status_code

    with ThreadPoolExecutor(CLIENTS + 1) as pool:
        downloads = [pool.submit(download, i) for i in range(CLIENTS)]
        other = pool.submit(winners)
        results = [d.result() for d in downloads]
        assert other.result() == 200
    for status, rows, last in results:
        assert status == 200
        assert rows == ROWS, (rows, last)
        assert last.startswith(f"{ROWS - 1},"), last
    ready = httpx.get(f"{server.url}/readyz", timeout=30)
    assert ready.status_code == 200, ready.text
    assert ready.json()["pool"]["limit"] == 6
