"""GET /v1/compare end to end on a real database (SQLite and Postgres) through the real app."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.api.app import create_app
from service.config import Settings
from service.db.session import session_scope
from tests.conftest import LiveServer
from tests.statistics.dbdata import POINT, add_measurement, device, noisy


@pytest.fixture
def client(migrated_url: str, tmp_path: Path) -> Iterator[TestClient]:
    rng = np.random.default_rng(2)
    with session_scope(migrated_url) as session:
        dev = device(session)
        add_measurement(session, "MX4/KB1/RW1/U4/RG1/PG0/PP0", noisy(rng, 10.0, n=50), dev)
        add_measurement(session, "MX4/KB1/RW2/U4/RG1/PG0/PP0", noisy(rng, 12.0, n=40), dev)
    settings = Settings(home=tmp_path, database_url=migrated_url, anonymous_read=True)
    with TestClient(create_app(settings, start_embedded_worker=False)) as test_client:
        yield test_client


def _params(**overrides: object) -> dict[str, object]:
    return {**POINT, "a": "MX4/KB1/RW2/U4/RG1/PG0/PP0", "b": "MX4/KB1/RW1/U4/RG1/PG0/PP0", **overrides}


def test_compare_gives_ratio_interval_and_samples(client: TestClient) -> None:
    response = client.get("/v1/compare", params=_params())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["samples"] == 90 and body["a"]["n"] == 40 and body["b"]["n"] == 50
    assert body["ratio"] == pytest.approx(body["a"]["median_us"] / body["b"]["median_us"])
    lo, hi = body["ratio_ci"]
    assert 1.1 < lo <= body["ratio"] <= hi < 1.3
    assert body["faster"] == "MX4/KB1/RW1/U4/RG1/PG0/PP0" and body["a"]["stale"] is False
    again = client.get("/v1/compare", params=_params()).json()
    assert again["ratio_ci"] == body["ratio_ci"]  # seeded: same answer every time
    swapped = client.get(
        "/v1/compare", params=_params(a="MX4/KB1/RW1/U4/RG1/PG0/PP0", b="MX4/KB1/RW2/U4/RG1/PG0/PP0")
    ).json()
    assert swapped["ratio"] == pytest.approx(1 / body["ratio"])


def test_compare_404_and_422(client: TestClient) -> None:
    missing = client.get("/v1/compare", params=_params(a="MX4/KB4/RW2/U4/RG1/PG0/PP0"))
    assert missing.status_code == 404 and "MX4/KB4/RW2/U4/RG1/PG0/PP0" in missing.json()["error"]["message"]
    for overrides, field in (
        ({"format": "Q9_9"}, "format"),
        ({"a": "MX4/KB3/RW1/U4/RG1/PG0/PP0"}, "a"),
        ({"b": "nonsense"}, "b"),
        ({"b": "MX4/KB1/RW2/U4/RG1/PG0/PP0"}, "b"),
        ({"m": 0}, "m"),
        ({"arch": "gfx1"}, "arch"),
    ):
        response = client.get("/v1/compare", params=_params(**overrides))
        assert response.status_code == 422, (overrides, response.text)
        assert [f["field"] for f in response.json()["error"]["fields"]] == [field]
    no_k = {key: value for key, value in _params().items() if key != "k"}
    response = client.get("/v1/compare", params=no_k)
    assert response.status_code == 422 and response.json()["error"]["fields"][0]["field"] == "k"


def test_compare_cli_against_a_live_server(live_server: LiveServer) -> None:
    rng = np.random.default_rng(3)
    with session_scope(live_server.database_url) as session:
        dev = device(session)
        add_measurement(session, "MX4/KB1/RW1/U4/RG1/PG0/PP0", noisy(rng, 10.0, n=30), dev)
        add_measurement(session, "MX4/KB1/RW2/U4/RG1/PG0/PP0", noisy(rng, 12.0, n=30), dev)
    token = live_server.cli("token", "create", "--name", "cmp", "--scopes", "read").stdout.strip()
    env_token = ("--token", token)
    point = ["--arch", "host", "--format", "Q8_0", "--m", "1", "--n", "512", "--k", "256"]
    result = live_server.cli(
        "compare", "MX4/KB1/RW2/U4/RG1/PG0/PP0", "MX4/KB1/RW1/U4/RG1/PG0/PP0", *point, "--json", *env_token
    )
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert (
        body["samples"] == 60 and body["faster"] == "MX4/KB1/RW1/U4/RG1/PG0/PP0" and body["ratio_ci"][0] > 1.1
    )
    bad = live_server.cli(
        "compare", "MX4/KB1/RW2/U4/RG1/PG0/PP0", "MX4/KB3/RW1/U4/RG1/PG0/PP0", *point, *env_token
    )
    assert bad.returncode == 2 and "b:" in bad.stderr, bad.stderr
    missing = live_server.cli(
        "compare", "MX4/KB1/RW2/U4/RG1/PG0/PP0", "MX4/KB4/RW2/U4/RG1/PG0/PP0", *point, *env_token
    )
    assert missing.returncode == 1 and "404" in missing.stderr
