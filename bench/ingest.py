"""Dispatch-row ingest speed: Postgres COPY vs executemany, and SQLite executemany, in one run.

Each method writes ROWS dispatch rows (spread over measurements like a real task) through
workers.bulk.insert_dispatch_rows inside one transaction, into a freshly migrated database.
Prints JSON: rows/s per method, with machine, date and command.
Usage: .venv/bin/python bench/ingest.py [--rows N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, delete, func, select, text
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.db.migrate import upgrade
from service.db.models import Dispatch, Measurement, Sweep, Task, Variant
from service.db.session import session_factory
from workers.bulk import DispatchRow, insert_dispatch_rows

ADMIN_URL = os.environ.get("TUNEBASE_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
PER_MEASUREMENT = 2000


def seed_measurements(session: Session, count: int) -> list[int]:
    sweep = Sweep(arch="host", phase="decode", spec={}, labels={})
    session.add(sweep)
    session.flush()
    task = Task(sweep_id=sweep.id, arch="host", phase="decode", format="Q8_0", shape="B", n=1, k=32, m=1,
                variants=[])  # fmt: skip
    session.add(task)
    variant = Variant(family="decode", name=f"bench-{uuid.uuid4().hex[:12]}", params={}, declared_order=0)
    session.add(variant)
    session.flush()
    rows = [
        Measurement(
            sweep_id=sweep.id,
            variant_id=variant.id,
            arch="host",
            phase="decode",
            format="Q8_0",
            codebook=19,
            shape="B",
            n=1,
            k=32,
            m=1,
        )
        for _ in range(count)
    ]
    session.add_all(rows)
    session.flush()
    return [m.id for m in rows]


def make_rows(measurement_ids: list[int], total: int) -> list[DispatchRow]:
    rng = random.Random(0)
    rows: list[DispatchRow] = []
    for index in range(total):
        mid = measurement_ids[index // PER_MEASUREMENT]
        device = 20_000 + rng.randrange(5_000)
        rows.append((mid, index % PER_MEASUREMENT, device, device + 3_000, index % 8, None))
    return rows


def clear_dispatches(session: Session) -> None:
    """Empty the table between repeats. TRUNCATE on Postgres: a DELETE leaves a million dead rows for
    autovacuum to chew on during the next timed COPY (on 2 shared cores that skewed earlier figures)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("TRUNCATE dispatches"))
    else:
        session.execute(delete(Dispatch))


def time_method(url: str, method: str, total: int, repeats: int) -> dict[str, object]:
    factory = session_factory(url)
    seconds: list[float] = []
    for _ in range(repeats):
        with factory.begin() as session:
            clear_dispatches(session)
            ids = seed_measurements(session, -(-total // PER_MEASUREMENT))
        rows = make_rows(ids, total)
        start = time.perf_counter()
        with factory.begin() as session:  # one transaction, committed: the figure includes the commit
            insert_dispatch_rows(session, rows, method)
        seconds.append(time.perf_counter() - start)
        with factory() as session:
            assert session.scalar(select(func.count()).select_from(Dispatch)) == total
    best = min(seconds)
    return {
        "method": method,
        "rows": total,
        "best_seconds": round(best, 4),
        "all_seconds": [round(t, 4) for t in seconds],
        "rows_per_s": round(total / best),
    }


CEILING_TABLES = {
    # what the server alone costs per COPY: same rows, already encoded, so the client does ~nothing
    "dispatches (as deployed: its indexes are listed under dispatches_indexes)": None,
    "same columns, no index": "CREATE TABLE {t} (LIKE dispatches INCLUDING DEFAULTS)",
    "same columns, measurement_id index only": (
        "CREATE TABLE {t} (LIKE dispatches INCLUDING DEFAULTS); CREATE INDEX ON {t} (measurement_id)"
    ),
    "same columns, bigint id primary key + measurement_id index (the schema before migration 0011)": (
        "CREATE TABLE {t} (id bigserial PRIMARY KEY, LIKE dispatches INCLUDING DEFAULTS); "
        "CREATE INDEX ON {t} (measurement_id)"
    ),
    "as deployed but UNLOGGED (no WAL)": "CREATE UNLOGGED TABLE {t} (LIKE dispatches INCLUDING ALL)",
}


def server_ceiling(url: str, total: int, repeats: int) -> list[dict[str, object]]:
    """COPY of a pre-encoded text buffer into dispatches and into scratch variants of it.

    If the real methods match the first line, the client is not the limit; the others show what the
    server spends on the heap, each index and the WAL (foreign-key triggers off, as 'copy' does).
    """
    factory = session_factory(url)
    with factory.begin() as session:
        clear_dispatches(session)
        ids = seed_measurements(session, -(-total // PER_MEASUREMENT))
    buffer = "".join(f"{m}\t{s}\t{d}\t{w}\t{b}\t\\N\n" for m, s, d, w, b, _ in make_rows(ids, total)).encode()
    columns = "measurement_id, seq, device_ns, wall_ns, buffer_index, event_ns"
    results: list[dict[str, object]] = []
    for index, (label, ddl) in enumerate(CEILING_TABLES.items()):
        table = "dispatches" if ddl is None else f"ingest_ceiling_{index}"
        best = float("inf")
        with factory.begin() as session:
            if ddl is not None:
                for statement in ddl.format(t=table).split("; "):
                    session.execute(text(statement))
        for _ in range(repeats):
            with factory.begin() as session:
                session.execute(text(f"TRUNCATE {table}"))
            start = time.perf_counter()
            with factory.begin() as session:
                raw = session.connection().connection.driver_connection
                with raw.cursor() as cursor:  # type: ignore[union-attr]
                    cursor.execute("SET LOCAL session_replication_role = replica")
                    with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                        for offset in range(0, len(buffer), 1 << 20):
                            copy.write(buffer[offset : offset + (1 << 20)])
            best = min(best, time.perf_counter() - start)
        with factory.begin() as session:
            assert session.scalar(text(f"SELECT count(*) FROM {table}")) == total
            session.execute(text(f"TRUNCATE {table}"))
            if ddl is not None:
                session.execute(text(f"DROP TABLE {table}"))
        results.append({"table": label, "rows": total, "best_seconds": round(best, 4),
                        "rows_per_s": round(total / best)})  # fmt: skip
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-ceiling", action="store_true", help="skip the server-side breakdown")
    args = parser.parse_args()
    results: list[dict[str, object]] = []
    ceiling: list[dict[str, object]] = []
    load_at_start = os.getloadavg()

    name = f"tunebase_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
        server_version = connection.scalar(text("SHOW server_version"))
    pg_url = ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    indexes: list[str] = []
    try:
        upgrade(pg_url)
        with session_factory(pg_url)() as session:  # the schema measured, as the server states it
            indexes = list(
                session.scalars(text("SELECT indexdef FROM pg_indexes WHERE tablename = 'dispatches'"))
            )
        for method in ("copy", "copy-text", "copy-checked", "executemany"):
            timing = time_method(pg_url, method, args.rows, args.repeats)
            results.append({"database": f"postgres {server_version}", **timing})
        if not args.no_ceiling:
            ceiling = server_ceiling(pg_url, args.rows, args.repeats)
    finally:
        session_factory(pg_url).kw["bind"].dispose()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    with tempfile.TemporaryDirectory() as tmp:
        sqlite_url = f"sqlite:///{tmp}/bench.sqlite3"
        upgrade(sqlite_url)
        import sqlite3

        results.append({"database": f"sqlite {sqlite3.sqlite_version} (WAL)",
                        **time_method(sqlite_url, "executemany", args.rows, args.repeats)})  # fmt: skip

    print(
        json.dumps(
            {
                "bench": "ingest",
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": {
                    "hostname": platform.node(),
                    "cpu": _cpu_model(),
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    # the machine is shared: read every figure with what else ran beside it
                    "load_average_at_start": load_at_start,
                    "load_average_at_end": os.getloadavg(),
                },
                "command": " ".join([".venv/bin/python", "bench/ingest.py", *sys.argv[1:]]),
                "target_rows_per_s_postgres": 800_000,
                "dispatches_indexes": indexes,
                "results": results,
                "postgres_server_ceiling": ceiling,
            },
            indent=2,
        )
    )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
