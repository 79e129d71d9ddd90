"""Input the service must refuse before writing anything, and text it must always be able to render.

Real databases (SQLite and Postgres) behind the app; the latency test runs a real `tunebase serve`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.api.app import create_app
from service.auth import create_token
from service.config import Settings
from service.db.models import Capture, Sweep
from service.db.session import session_scope
from tests.conftest import LiveServer, _postgres_database, start_server, stop_server

SPEC = '{"arch":"host","phase":"decode","formats":["Q8_0"],"shapes":[{"name":"S","n":64,"k":64}],"m":[1],'
TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "rocprof" / "v3_rocm63_kernel_trace.csv"


@pytest.fixture
def api(migrated_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, str]]:
    settings = Settings(
        home=tmp_path, database_url=migrated_url, artifact_dir=tmp_path / "a", max_body_bytes=1 << 20
    )
    with session_scope(migrated_url) as session:
        token = create_token(session, "limits", ["submit"])
    app = create_app(settings, start_embedded_worker=False)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with TestClient(app, headers=headers, raise_server_exceptions=False) as client:
        yield client, migrated_url


def sweeps(url: str) -> int:
    with session_scope(url) as session:
        return int(session.scalar(select(func.count()).select_from(Sweep)) or 0)


@pytest.mark.parametrize(
    ("labels", "field", "message"),
    [
        (r'{"a":"\ud800"}', "labels.a", "lone UTF-16 surrogate"),
        (r'{"a":"x\u0000y"}', "labels.a", "NUL"),
        ('{"a":"' + "x" * 257 + '"}', "labels.a", "at most 256"),
        (r'{"a b":"x"}', "labels.a b.[key]", "pattern"),
        (r'{"\udfff":"x"}', "labels.*.[key]", "lone UTF-16 surrogate"),
    ],
)
def test_bad_text_is_refused_before_anything_is_written(
    api: tuple[TestClient, str], labels: str, field: str, message: str
) -> None:
    client, url = api
    response = client.post("/v1/sweeps", content=SPEC + f'"labels":{labels}}}')
    assert response.status_code == 422, response.text
    fields = response.json()["error"]["fields"]
    assert len(fields) == 1
    if "*" in field:  # the offending key itself cannot be echoed as it came
        assert fields[0]["field"].startswith("labels.") and fields[0]["field"].endswith(".[key]")
    else:
        assert fields[0]["field"] == field
    assert message in fields[0]["message"]
    assert sweeps(url) == 0


def test_nul_in_a_query_parameter_is_422_naming_it(api: tuple[TestClient, str]) -> None:
    """Postgres cannot compare text holding NUL; the driver's DataError used to be the answer."""
    client, _ = api
    response = client.get("/v1/winners", params={"arch": "gfx\x00906", "phase": "decode"})
    assert response.status_code == 422
    fields = response.json()["error"]["fields"]
    assert fields == [{"field": "arch", "message": "must not contain a NUL character"}]
    assert client.get("/v1/winners", params={"arch": "gfx906"}).status_code == 200


def test_a_body_over_the_limit_is_413_declared_or_streamed(api: tuple[TestClient, str]) -> None:
    client, url = api
    big = SPEC + '"labels":{"a":"' + "x" * (2 << 20) + '"}}'
    assert client.post("/v1/sweeps", content=big).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        data = big.encode()
        for start in range(0, len(data), 65536):
            yield data[start : start + 65536]

    response = client.post("/v1/sweeps", content=chunks())
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "too_large"
    assert sweeps(url) == 0


def test_text_stored_before_validation_still_renders(api: tuple[TestClient, str]) -> None:
    """Rows written by an older version (a lone surrogate in a label) must not break every page."""
    client, url = api
    with session_scope(url) as session:
        sweep = Sweep(arch="host", phase="decode", spec={}, labels={"legacy": "bad\ud800text"})
        session.add(sweep)
        session.flush()
        sweep_id = sweep.id
    listed = client.get("/v1/sweeps")
    assert listed.status_code == 200, listed.text
    assert listed.json()["items"][0]["labels"] == {"legacy": "bad\ud800text"}  # escaped as \ud800
    assert client.get(f"/v1/sweeps/{sweep_id}").status_code == 200
    page = client.get("/")
    assert page.status_code == 200 and "bad\ufffdtext" in page.text


@pytest.fixture
def pg_server(tmp_path: Path, artifact_dir: Path) -> Iterator[LiveServer]:
    from service.db.migrate import upgrade

    for url in _postgres_database():
        upgrade(url)
        server = start_server(tmp_path, url, artifact_dir, {"TUNEBASE_EMBEDDED_WORKER": "false"})
        try:
            yield server
        finally:
            stop_server(server)


@pytest.mark.postgres
def test_healthz_answers_while_a_large_import_is_parsed(pg_server: LiveServer) -> None:
    """A ~24 MB rocprofv3 trace whose last line is damaged: parsed in full, refused with 422. The
    parse used to run on the event loop and stall every other request for its whole duration."""
    token = pg_server.cli("token", "create", "--name", "big", "--scopes", "submit").stdout.strip()
    header, *rows = TRACE.read_text().splitlines()
    body_rows = [rows[i % len(rows)] for i in range(150_000)]
    content = "\n".join([header, *body_rows, '"KERNEL_DISPATCH","Agent 4",1,0,1,x']) + "\n"
    payload = json.dumps({"label": "big", "files": [{"name": "kernel_trace.csv", "content": content}]})
    latencies: list[float] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=pg_server.url, timeout=120) as client:
            while not done.is_set():
                start = time.perf_counter()
                assert client.get("/healthz").status_code == 200
                latencies.append(time.perf_counter() - start)
                time.sleep(0.02)

    prober = threading.Thread(target=probe)
    prober.start()
    time.sleep(0.3)
    start = time.perf_counter()
    response = httpx.post(
        f"{pg_server.url}/v1/imports/rocprof",
        content=payload,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=300,
    )
    duration = time.perf_counter() - start
    done.set()
    prober.join(150)
    assert response.status_code == 422, response.text[:500]
    assert response.json()["error"]["fields"][0]["field"] == "files.0.content"
    with session_scope(pg_server.database_url) as session:
        assert session.scalar(select(func.count()).select_from(Capture)) == 0
    # relative, not a wall-clock limit: a blocked event loop makes one probe wait for (nearly) the whole
    # parse; half of it leaves room for a 2-core machine's scheduling noise and still catches that
    assert len(latencies) >= 10
    assert max(latencies) < 0.5 * duration, (max(latencies), duration, len(latencies))
