"""Token ownership and revocation (API and CLI), and what /readyz says when the pool or broker is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from service.api.app import create_app
from service.auth import create_token
from service.config import Settings
from service.db.session import session_scope
from tests.conftest import REPO
from tests.distributed.conftest import RedisServer

SPEC = {"arch": "host", "phase": "decode", "formats": ["Q8_0"], "shapes": [{"name": "S", "n": 64, "k": 64}],
        "m": [1], "variants": ["MX4/KB1/RW1/U4/RG1/PG0/PP0"]}  # fmt: skip


@pytest.fixture
def app_tokens(migrated_url: str, tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    settings = Settings(home=tmp_path, database_url=migrated_url, artifact_dir=tmp_path / "a")
    with session_scope(migrated_url) as session:
        tokens = {
            "alice": create_token(session, "alice", ["submit"]),
            "bob": create_token(session, "bob", ["submit"]),
            "root": create_token(session, "root", ["admin"]),
        }
    with TestClient(create_app(settings, start_embedded_worker=False)) as client:
        yield client, tokens


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_only_the_owner_or_an_admin_cancels_a_sweep(app_tokens: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = app_tokens
    first = client.post("/v1/sweeps", json=SPEC, headers=auth(tokens["alice"])).json()["id"]
    second = client.post("/v1/sweeps", json={**SPEC, "seed": 1}, headers=auth(tokens["alice"])).json()["id"]
    refused = client.post(f"/v1/sweeps/{first}/cancel", headers=auth(tokens["bob"]))
    assert refused.status_code == 403 and "submitted this sweep" in refused.json()["error"]["message"]
    assert client.get(f"/v1/sweeps/{first}", headers=auth(tokens["bob"])).json()["status"] == "queued"
    mine = client.post(f"/v1/sweeps/{first}/cancel", headers=auth(tokens["alice"]))
    assert mine.status_code == 200 and mine.json()["status"] == "cancelled"
    admin = client.post(f"/v1/sweeps/{second}/cancel", headers=auth(tokens["root"]))
    assert admin.status_code == 200 and admin.json()["cancelled_tasks"] == 1


def test_admin_lists_and_revokes_tokens(app_tokens: tuple[TestClient, dict[str, str]]) -> None:
    client, tokens = app_tokens
    assert client.get("/v1/tokens", headers=auth(tokens["alice"])).status_code == 403
    listed = client.get("/v1/tokens", headers=auth(tokens["root"]))
    assert listed.status_code == 200
    items = {item["name"]: item for item in listed.json()["items"]}
    assert set(items) == {"alice", "bob", "root"}
    assert items["bob"]["scopes"] == ["submit"] and items["bob"]["created_by"] == "cli"
    assert not any("hash" in key for key in items["bob"])
    assert client.get("/v1/sweeps", headers=auth(tokens["bob"])).status_code == 200
    revoked = client.post(f"/v1/tokens/{items['bob']['id']}/revoke", headers=auth(tokens["root"]))
    assert revoked.status_code == 200 and revoked.json()["revoked"] and revoked.json()["revoked_at"]
    assert client.get("/v1/sweeps", headers=auth(tokens["bob"])).status_code == 401
    assert client.post("/v1/tokens/999999/revoke", headers=auth(tokens["root"])).status_code == 404
    active = client.get("/v1/tokens", params={"revoked": "false"}, headers=auth(tokens["root"])).json()
    assert {item["name"] for item in active["items"]} == {"alice", "root"}


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)  # CLI runs are slow: one database
def test_cli_token_list_and_revoke(migrated_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "TUNEBASE_HOME": str(tmp_path), "TUNEBASE_DATABASE_URL": migrated_url}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "service.cli", "token", *args], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip

    assert cli("create", "--name", "ci", "--scopes", "submit").returncode == 0
    assert cli("create", "--name", "bad\x01\udcff", "--scopes", "read").returncode == 2
    listed = cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    (item,) = json.loads(listed.stdout)
    assert (item["name"], item["scopes"], item["revoked"]) == ("ci", ["submit"], False)
    assert cli("revoke", "nobody").returncode == 2
    revoked = cli("revoke", "ci")
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    assert json.loads(cli("list", "--json").stdout)[0]["revoked"] is True


def test_readyz_reports_an_exhausted_pool(migrated_url: str, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, database_url=migrated_url, artifact_dir=tmp_path / "a")
    app = create_app(settings, start_embedded_worker=False)
    engine = create_engine(migrated_url, pool_size=1, max_overflow=0, pool_timeout=1)
    app.state.session_factory = sessionmaker(bind=engine)
    try:
        with TestClient(app) as client:
            assert client.get("/readyz").status_code == 200
            with engine.connect():  # the only connection is busy
                busy = client.get("/readyz")
                assert busy.status_code == 503
                assert busy.json()["database"].startswith("error: connection pool exhausted (1 of 1")
            assert client.get("/readyz").json()["status"] == "ready"
    finally:
        engine.dispose()


def test_readyz_reports_a_lost_broker(migrated_url: str, tmp_path: Path) -> None:
    redis = RedisServer(tmp_path)
    redis.start()
    try:
        settings = Settings(home=tmp_path, database_url=migrated_url, artifact_dir=tmp_path / "a",
                            broker_url=f"redis://127.0.0.1:{redis.port}/0")  # fmt: skip
        with TestClient(create_app(settings, start_embedded_worker=False)) as client:
            assert client.get("/readyz").json()["broker"] == "ok"
            redis.stop()
            lost = client.get("/readyz")
            assert lost.status_code == 503 and lost.json()["broker"].startswith("error: ConnectionError")
    finally:
        redis.stop()
