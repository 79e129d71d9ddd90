"""Bulk dispatch-row writes: COPY on Postgres, one executemany on SQLite, inside the caller's transaction.

Dispatch rows are the bulk of the database (every timed launch is a row), so they bypass the ORM.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

DISPATCH_COLUMNS = ("measurement_id", "seq", "device_ns", "wall_ns", "buffer_index", "event_ns")
DispatchRow = tuple[int, int, int, int | None, int, int | None]  # event_ns: CUDA events (cuda backend)

_COPY_SQL = f"COPY dispatches ({', '.join(DISPATCH_COLUMNS)}) FROM STDIN"
_COPY_BINARY_SQL = _COPY_SQL + " (FORMAT BINARY)"
# the columns' Postgres types, so psycopg's C dumpers write binary COPY without per-value type lookups
_COPY_TYPES = ("int4", "int4", "int8", "int8", "int4", "int8")
_INSERT_SQL = (
    f"INSERT INTO dispatches ({', '.join(DISPATCH_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in DISPATCH_COLUMNS)})"
)
_PG_INSERT_SQL = _INSERT_SQL.replace("?", "%s")


def insert_dispatch_rows(session: Session, rows: Sequence[DispatchRow], method: str = "auto") -> int:
    """Insert rows in the session's current transaction.

    method: 'auto' (COPY on Postgres, executemany elsewhere) | 'copy' | 'copy-checked' | 'copy-text'
    | 'executemany'. COPY is binary with the column types declared; 'copy-text' is the text format,
    kept so bench/ingest.py can compare the two in one run.
    The per-row foreign-key check on measurement_id costs COPY about two thirds of its speed; every
    row references a measurement flushed in this same transaction, so 'copy' skips that trigger when
    the role may (superuser: session_replication_role), and 'copy-checked' never does.
    """
    if not rows:
        return 0
    connection = session.connection()
    dialect = connection.dialect.name
    if method == "auto":
        method = "copy" if dialect == "postgresql" else "executemany"
    raw = connection.connection.driver_connection
    if method in ("copy", "copy-checked", "copy-text"):
        if dialect != "postgresql":
            raise ValueError("COPY needs Postgres")
        with raw.cursor() as cursor:  # type: ignore[union-attr]
            skip = method != "copy-checked" and _may_skip_fk_triggers(cursor)
            if skip:  # as pg_restore --disable-triggers does; only for this statement
                cursor.execute("SET LOCAL session_replication_role = replica")
            binary = method != "copy-text"
            with cursor.copy(_COPY_BINARY_SQL if binary else _COPY_SQL) as copy:
                if binary:
                    copy.set_types(list(_COPY_TYPES))
                for row in rows:
                    copy.write_row(row)
            if skip:
                cursor.execute("SET LOCAL session_replication_role = origin")
        return len(rows)
    if method != "executemany":
        raise ValueError(f"unknown bulk method {method!r}")
    cursor = raw.cursor()  # type: ignore[union-attr]
    try:
        cursor.executemany(_PG_INSERT_SQL if dialect == "postgresql" else _INSERT_SQL, rows)
    finally:
        cursor.close()
    return len(rows)


def _may_skip_fk_triggers(cursor: Any) -> bool:
    cursor.execute("SELECT current_setting('is_superuser')")
    row = cursor.fetchone()
    return bool(row and row[0] == "on")
