"""Migration 0011 on a database holding dispatch rows: (measurement_id, seq) becomes the key, rows and
their read order survive (duplicates of an older writer renumbered), and the downgrade restores ids."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from service.db.migrate import downgrade, upgrade
from service.db.session import session_factory
from tests.reliability.seed import seed_dispatches

TABLE = "dispatches"
# (measurement index, seq, device_ns), inserted in this order (so ids follow it)
ROWS = [
    (0, 4, 104), (0, 0, 100), (0, 2, 102),  # unique seqs, stored out of order: left as they are
    (1, 0, 200), (1, 1, 211), (1, 3, 203), (1, 1, 212),  # seq 1 twice: an older writer's duplicate
]  # fmt: skip


INSERT = text("INSERT INTO dispatches (measurement_id, seq, device_ns, buffer_index) VALUES (:m, :s, :d, 0)")


def _rows(connection: Connection, columns: str = "measurement_id, seq, device_ns") -> list[tuple[Any, ...]]:
    query = text(f"SELECT {columns} FROM dispatches ORDER BY measurement_id, seq")
    return [tuple(r) for r in connection.execute(query)]


def _schema(connection: Connection) -> dict[str, Any]:
    inspector = inspect(connection)
    return {
        "columns": [c["name"] for c in inspector.get_columns(TABLE)],
        "pk": inspector.get_pk_constraint(TABLE)["constrained_columns"],
        "indexes": sorted(i["name"] or "" for i in inspector.get_indexes(TABLE)),
        "fks": [
            (f["referred_table"], f["options"].get("ondelete")) for f in inspector.get_foreign_keys(TABLE)
        ],
    }


def test_0011_keys_existing_rows_and_downgrades(database_url: str) -> None:
    upgrade(database_url, "0010")
    with session_factory(database_url).begin() as session:
        a, b, _ = seed_dispatches(session, 3, 0, label="mig")  # measurements only: 0010 still has the id
    engine = create_engine(database_url)
    try:
        with engine.begin() as connection:
            for index, seq, device in ROWS:
                connection.execute(INSERT, {"m": (a, b)[index], "s": seq, "d": device})
        upgrade(database_url, "0011")
        with engine.begin() as connection:
            assert _schema(connection) == {
                "columns": ["measurement_id", "seq", "device_ns", "wall_ns", "buffer_index", "event_ns"],
                "pk": ["measurement_id", "seq"],
                "indexes": [],  # the measurement_id index was the key's prefix: gone
                "fks": [("measurements", "CASCADE")],
            }
            assert _rows(connection) == [
                (a, 0, 100), (a, 2, 102), (a, 4, 104),  # untouched
                (b, 0, 200), (b, 1, 211), (b, 2, 212), (b, 3, 203),  # renumbered in (seq, id) order
            ]  # fmt: skip
            if connection.dialect.name == "sqlite":  # the key's B-tree is the table
                ddl = connection.scalar(text("SELECT sql FROM sqlite_master WHERE name = 'dispatches'"))
                assert ddl.rstrip().endswith("WITHOUT ROWID"), ddl
            with pytest.raises(IntegrityError), connection.begin_nested():
                connection.execute(INSERT, {"m": a, "s": 2, "d": 1})
        downgrade(database_url, "0010")
        with engine.begin() as connection:
            schema = _schema(connection)
            assert schema["columns"][0] == "id" and schema["pk"] == ["id"]
            assert schema["indexes"] == ["ix_dispatches_measurement_id"]
            assert schema["fks"] == [("measurements", "CASCADE")]
            ids = [r[0] for r in _rows(connection, "id")]
            assert ids == sorted(ids) and len(set(ids)) == len(ROWS)  # new ids, in read order
            assert [r[1:] for r in _rows(connection, "id, measurement_id, seq, device_ns")] == [
                (a, 0, 100), (a, 2, 102), (a, 4, 104), (b, 0, 200), (b, 1, 211), (b, 2, 212), (b, 3, 203),
            ]  # fmt: skip
            # the id is generated again, as 0010's writers expect
            connection.execute(INSERT, {"m": a, "s": 9, "d": 9})
            assert connection.scalar(text("SELECT max(id) FROM dispatches")) > max(ids)
        upgrade(database_url)
        with engine.connect() as connection:
            assert len(_rows(connection)) == len(ROWS) + 1
    finally:
        engine.dispose()
