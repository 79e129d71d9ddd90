"""Cached reads (winners, dashboard) never show data older than the last commit, on SQLite and Postgres.

Writes come from outside the app, as a worker's would: the app is never told, only the trigger-bumped
generation in the database moves (service/api/read_cache.py, migration 0010).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, delete, text, update

from service.api.app import create_app
from service.api.read_cache import ReadCache, read_generation, triggers_present
from service.auth import create_token
from service.config import Settings
from service.db.models import Winner
from service.db.session import session_factory, session_scope
from service.winners import refresh_point
from tests.conftest import REPO, free_port
from tests.reliability.seed import seed_dispatches

POINT = ("host", "decode", "Q8_0", 1, 64, 64)


@pytest.fixture
def seeded(migrated_url: str, tmp_path: Path) -> Iterator[tuple[Settings, dict[str, str]]]:
    """One decided point (three variants with dispatch rows) and a token of each scope."""
    with session_scope(migrated_url) as session:
        seed_dispatches(session, 3, 40, label="cache")
        assert refresh_point(session, *POINT[:3], *POINT[3:]) is not None
        tokens = {
            scope: create_token(session, f"cache-{scope}", [scope]) for scope in ("read", "submit", "admin")
        }
    settings = Settings(home=tmp_path, database_url=migrated_url, embedded_worker=False)
    yield settings, tokens


def client(settings: Settings, token: str | None) -> TestClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return TestClient(create_app(settings, start_embedded_worker=False), headers=headers)


def set_winner(url: str, variant: str) -> None:
    """A write as a worker process would make it: its own session, committed."""
    with session_scope(url) as session:
        session.execute(update(Winner).values(variant=variant, median_us=1.5))


def test_winners_follow_every_write_and_revalidate_with_etags(
    seeded: tuple[Settings, dict[str, str]],
) -> None:
    settings, tokens = seeded
    url = settings.resolved_database_url
    api = client(settings, tokens["read"])
    cache: ReadCache = api.app.state.read_cache  # type: ignore[attr-defined]
    first = api.get("/v1/winners")
    assert first.status_code == 200 and first.json()["total"] == 1
    again = api.get("/v1/winners")
    assert again.content == first.content and again.headers["etag"] == first.headers["etag"]
    assert cache.hits >= 1 and cache.misses == 1  # the second answer came from memory
    assert api.get("/v1/winners", headers={"If-None-Match": first.headers["etag"]}).status_code == 304

    set_winner(url, "Written/Elsewhere")
    changed = api.get("/v1/winners", headers={"If-None-Match": first.headers["etag"]})
    assert changed.status_code == 200, "a stale ETag must not get 304 after a write"
    assert changed.json()["items"][0]["variant"] == "Written/Elsewhere"
    assert changed.json()["items"][0]["median_us"] == 1.5
    assert changed.headers["etag"] != first.headers["etag"]
    assert api.get("/v1/winners", headers={"If-None-Match": changed.headers["etag"]}).status_code == 304

    with session_scope(url) as session:  # refreshed from the measurements again: the real winner is back
        refresh_point(session, *POINT[:3], *POINT[3:])
    assert api.get("/v1/winners").json()["items"][0]["variant"] == first.json()["items"][0]["variant"]

    with session_scope(url) as session:
        session.execute(delete(Winner))
    assert api.get("/v1/winners").json() == {"total": 0, "limit": 500, "offset": 0, "items": []}
    filtered = api.get("/v1/winners", params={"format": "Q4_0"})  # another key, its own entry
    assert filtered.status_code == 200 and filtered.json()["total"] == 0


def test_rolled_back_writes_do_not_move_the_generation(seeded: tuple[Settings, dict[str, str]]) -> None:
    settings, _ = seeded
    factory = session_factory(settings.resolved_database_url)
    with factory() as session:
        assert triggers_present(session.connection())
        before = read_generation(session)
    with factory() as session:
        session.execute(update(Winner).values(variant="Never/Committed"))
        session.rollback()
    with factory() as session:
        assert read_generation(session) == before
    set_winner(settings.resolved_database_url, "Committed/Once")
    with factory() as session:
        after = read_generation(session)
    assert before is not None and after is not None and after > before


def test_a_commit_while_rendering_is_shown_by_the_next_read(seeded: tuple[Settings, dict[str, str]]) -> None:
    """The generation is read before the data: a write landing mid-render moves it past the stored entry."""
    settings, _ = seeded
    url = settings.resolved_database_url
    cache = ReadCache(session_factory(url))
    renders: list[str] = []

    def render(session: object) -> bytes:
        if not renders:
            set_winner(url, "Landed/MidRender")  # commits between the generation read and this render
        renders.append("rendered")
        with session_scope(url) as own:
            return str(own.scalar(text("SELECT variant FROM winners"))).encode()

    def admit(grant: object) -> None:
        return None

    cache.read("key", None, admit, render)
    assert cache.read("key", None, admit, render) == cache.read("key", None, admit, render)
    assert len(renders) == 2, "the entry rendered while a write landed must not outlive that write"
    assert cache.read("key", None, admit, render).body == b"Landed/MidRender"


def test_a_revoked_token_is_refused_on_the_next_cached_read(seeded: tuple[Settings, dict[str, str]]) -> None:
    settings, tokens = seeded
    reader, admin = client(settings, tokens["read"]), client(settings, tokens["admin"])
    assert reader.get("/v1/winners").status_code == 200
    assert reader.get("/v1/winners").status_code == 200  # now cached
    listed = admin.get("/v1/tokens").json()["items"]
    read_id = next(t["id"] for t in listed if t["name"] == "cache-read")
    assert admin.post(f"/v1/tokens/{read_id}/revoke").status_code == 200
    refused = reader.get("/v1/winners")
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
    assert client(settings, None).get("/v1/winners").status_code == 401
    assert client(settings, tokens["submit"]).get("/v1/winners").status_code == 200  # submit implies read


def test_dashboard_shows_a_cancelled_sweep_at_once(seeded: tuple[Settings, dict[str, str]]) -> None:
    settings, tokens = seeded
    submitter = client(settings, tokens["submit"])
    shapes = [{"name": "C", "n": 64, "k": 64}]
    spec = {"arch": "host", "phase": "decode", "formats": ["Q8_0"], "shapes": shapes, "m": [1]}
    submitted = submitter.post("/v1/sweeps", json=spec)
    assert submitted.status_code == 202, submitted.text
    sweep_id = submitted.json()["id"]
    browser = client(settings, None)
    page = browser.get("/")
    assert page.status_code == 200 and f'data-id="{sweep_id}"' in page.text
    assert 'class="status-queued"' in page.text
    assert browser.get("/").content == page.content  # from memory while nothing changed
    assert browser.get("/", headers={"If-None-Match": page.headers["etag"]}).status_code == 304
    assert submitter.post(f"/v1/sweeps/{sweep_id}/cancel").status_code == 200
    after = browser.get("/", headers={"If-None-Match": page.headers["etag"]})
    assert after.status_code == 200 and 'class="status-cancelled"' in after.text
    signed_in = browser.get("/", cookies={"tunebase_token": tokens["read"]})
    assert "sign out" in signed_in.text and "sign out" not in after.text  # the header is part of the key


def test_private_dashboard_still_checks_the_token(seeded: tuple[Settings, dict[str, str]]) -> None:
    settings, tokens = seeded
    private = settings.model_copy(update={"dashboard_public": False})
    anonymous = client(private, None).get("/", follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/login")
    assert client(private, "tb_not_a_token").get("/").status_code == 401
    assert client(private, tokens["read"]).get("/").status_code == 200


def test_missing_triggers_turn_the_cache_off(seeded: tuple[Settings, dict[str, str]]) -> None:
    """A later migration that rebuilds a watched table (SQLite batch mode) drops its trigger: then every
    read renders afresh rather than trusting a generation that no longer moves."""
    settings, tokens = seeded
    url = settings.resolved_database_url
    engine = create_engine(url)
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("DROP TRIGGER read_generation_winners ON winners"))
        else:
            connection.execute(text("DROP TRIGGER read_generation_winners_update"))
    engine.dispose()
    api = client(settings, tokens["read"])
    api.get("/v1/winners")
    set_winner(url, "Seen/Anyway")
    assert api.get("/v1/winners").json()["items"][0]["variant"] == "Seen/Anyway"
    assert api.app.state.read_cache.hits == 0  # type: ignore[attr-defined]


@pytest.mark.postgres
def test_every_server_process_answers_fresh_and_promptly(
    seeded: tuple[Settings, dict[str, str]], tmp_path: Path
) -> None:
    """`tunebase serve --workers 2`: each process has its own cache; none may answer from a stale one.
    And a small answer is not held back ~40 ms by Nagle's algorithm (service/api/listen.py)."""
    settings, tokens = seeded
    url = settings.resolved_database_url
    if not url.startswith("postgresql"):
        pytest.skip("two server processes over one SQLite file are not a supported deployment")
    port = free_port()
    env = {
        **os.environ,
        "TUNEBASE_HOME": str(tmp_path),
        "TUNEBASE_DATABASE_URL": url,
        "TUNEBASE_BROKER_URL": "",
        "TUNEBASE_EMBEDDED_WORKER": "false",
    }
    argv = [
        sys.executable,
        "-m",
        "service.cli",
        "serve",
        "--port",
        str(port),
        "--workers",
        "2",
        "--no-access-log",
    ]
    with (tmp_path / "serve.log").open("wb") as log:
        process = subprocess.Popen(argv, env=env, cwd=REPO, stdout=log, stderr=log)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and process.poll() is None, (
                tmp_path / "serve.log"
            ).read_text()
            time.sleep(0.2)
        headers = {"Authorization": f"Bearer {tokens['read']}"}
        with httpx.Client(base_url=base, headers=headers, timeout=10) as http:
            for round_ in range(3):
                for _ in range(8):  # new connections: both processes answer and fill their caches
                    assert http.get("/v1/winners", headers={"Connection": "close"}).status_code == 200
                set_winner(url, f"Round/{round_}")
                variants = {
                    http.get("/v1/winners", headers={"Connection": "close"}).json()["items"][0]["variant"]
                    for _ in range(8)
                }
                assert variants == {f"Round/{round_}"}
            seconds = []
            for _ in range(21):  # one keep-alive connection, one request at a time
                started = time.perf_counter()
                assert http.get("/healthz").status_code == 200  # headers and body: two writes
                seconds.append(time.perf_counter() - started)
            median = sorted(seconds)[10]
            assert median < 0.02, f"median small answer took {1000 * median:.1f} ms"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_cache_stays_within_its_bounds(seeded: tuple[Settings, dict[str, str]]) -> None:
    settings, _ = seeded
    cache = ReadCache(session_factory(settings.resolved_database_url), max_entries=3, max_bytes=250)

    def admit(grant: object) -> None:
        return None

    def body_of(key: int) -> Callable[[object], bytes]:
        return lambda session: bytes([key]) * 100

    for key in range(6):
        assert cache.read(key, None, admit, body_of(key)).body == bytes([key]) * 100
    assert cache.read(5, None, admit, lambda session: b"never rendered").body == bytes([5]) * 100
    assert cache.read(0, None, admit, lambda session: b"rendered again").body == b"rendered again"
    assert cache.read("big", None, admit, lambda session: b"x" * 251).body == b"x" * 251  # served, not kept
    assert cache.read("big", None, admit, lambda session: b"y" * 251).body == b"y" * 251
    assert len(cache._entries) <= 3 and cache._bytes <= 250
    assert cache._bytes == sum(len(rendered.body) for _, rendered in cache._entries.values())
