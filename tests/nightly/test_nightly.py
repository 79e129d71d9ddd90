"""Nightly regeneration: only changed targets, only changed content; real beat + worker on Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from service.db.models import TableVersion
from service.imports.llaminar_csv import parse_files, store_rows
from service.tables.nightly import regenerate_all
from tests.conftest import REPO, _postgres_database
from tests.imports.test_llaminar_data import decode_csv, prefill_csv

REDIS_URL = "redis://127.0.0.1:6379/11"  # a DB of its own: other tests' queues never mix in


def _import(url: str, *files: tuple[str, str]) -> None:
    engine = create_engine(url)
    with Session(engine) as session:
        store_rows(session, parse_files(list(files), "gfx906"))
        session.commit()
    engine.dispose()


def _versions(url: str) -> list[tuple[int, str, str, str, int | None]]:
    engine = create_engine(url)
    with engine.connect() as c:
        rows = c.execute(
            select(
                TableVersion.id,
                TableVersion.arch,
                TableVersion.phase,
                TableVersion.dialect,
                TableVersion.parent_id,
            ).order_by(TableVersion.id)
        ).all()
    engine.dispose()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def test_regenerate_all_only_where_winners_or_content_changed(migrated_url: str) -> None:
    _import(migrated_url, ("p.csv", prefill_csv()), ("d.csv", decode_csv()))
    engine = create_engine(migrated_url)
    with Session(engine) as session:
        first = regenerate_all(session)
        session.commit()
    targets = {(r.arch, r.phase, r.dialect) for r in first}
    assert targets == {
        ("gfx906", "decode", "llaminar-rocm-decode"),
        ("gfx906", "decode", "json"),
        ("gfx906", "prefill", "llaminar-rocm-prefill"),
        ("gfx906", "prefill", "json"),
    }
    assert {r.status for r in first} == {"stored"}

    with Session(engine) as session:
        again = regenerate_all(session)
        session.commit()
    assert {r.status for r in again} == {"unchanged_winners"}
    assert len(_versions(migrated_url)) == 4

    # Only prefill winners move: prefill targets get new versions (parented), decode ones do not.
    _import(migrated_url, ("p2.csv", prefill_csv(("Q8_0",), (64, 600), salt="rerun")))
    with Session(engine) as session:
        third = {(r.phase, r.dialect): r for r in regenerate_all(session)}
        session.commit()
    engine.dispose()
    assert third[("decode", "llaminar-rocm-decode")].status == "unchanged_winners"
    assert third[("prefill", "llaminar-rocm-prefill")].status == "stored"
    versions = _versions(migrated_url)
    assert len(versions) == 6
    newest = {v[3]: v for v in versions if v[2] == "prefill"}
    assert all(v[4] is not None for v in newest.values())


@pytest.fixture
def fresh_postgres() -> Iterator[str]:
    from service.db.migrate import upgrade

    for url in _postgres_database():
        upgrade(url)
        yield url


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("wb")
    return subprocess.Popen(argv, env=env, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT)


def _wait(predicate: object, timeout: float, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.5)
    raise AssertionError("timed out; logs:\n" + "\n".join(p.read_text()[-3000:] for p in logs))


@pytest.mark.postgres
def test_celery_beat_and_worker_regenerate_tables(fresh_postgres: str, tmp_path: Path) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    env = {
        **os.environ,
        "TUNEBASE_DATABASE_URL": fresh_postgres,
        "TUNEBASE_BROKER_URL": REDIS_URL,
        "TUNEBASE_HOME": str(tmp_path),
        "NIGHTLY_EVERY": "2",
    }
    _import(
        fresh_postgres,
        ("p.csv", prefill_csv(("Q4_1", "Q8_0"), (64,))),
        ("d.csv", decode_csv(("Q8_0",), (1,))),
    )
    celery = [sys.executable, "-m", "celery", "-A", "tests.nightly.beat_app"]
    beat_log, worker_log = tmp_path / "beat.log", tmp_path / "worker.log"
    worker = _spawn(
        [*celery, "worker", "-Q", "maintenance", "--pool", "solo", "--without-gossip", "--without-mingle",
         "--loglevel", "INFO"],
        env, worker_log,
    )  # fmt: skip
    beat = _spawn(
        [*celery, "beat", "--schedule", str(tmp_path / "beat-schedule"), "--loglevel", "INFO"], env, beat_log
    )
    logs = [beat_log, worker_log]
    try:
        _wait(lambda: len(_versions(fresh_postgres)) == 4, 120, logs)
        first = _versions(fresh_postgres)
        assert {(v[2], v[3]) for v in first} == {
            ("decode", "llaminar-rocm-decode"), ("decode", "json"),
            ("prefill", "llaminar-rocm-prefill"), ("prefill", "json"),
        }  # fmt: skip
        # Several more beats with nothing changed: no new versions.
        beats_before = beat_log.read_text().count("Scheduler: Sending due task")
        _wait(lambda: beat_log.read_text().count("Scheduler: Sending due task") >= beats_before + 3, 60, logs)
        assert _versions(fresh_postgres) == first
        # Prefill winners change: the next beat stores new prefill versions only.
        _import(fresh_postgres, ("p2.csv", prefill_csv(("Q8_0",), (64,), salt="rerun")))
        _wait(lambda: len(_versions(fresh_postgres)) == 6, 120, logs)
        added = _versions(fresh_postgres)[4:]
        assert {v[2] for v in added} == {"prefill"} and all(v[4] is not None for v in added)
        assert "tunebase.tables.nightly" in worker_log.read_text()
    finally:
        for process in (beat, worker):
            process.terminate()
        for process in (beat, worker):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        client.flushdb()
        client.close()
