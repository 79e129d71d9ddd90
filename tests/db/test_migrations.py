"""`alembic upgrade head` yields exactly the models' schema on SQLite and Postgres; downgrade works."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from service.db.migrate import downgrade, upgrade
from service.db.models import Base


def test_upgrade_matches_models_and_downgrade_empties(database_url: str) -> None:
    upgrade(database_url)
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
            tables = set(inspect(connection).get_table_names())
        expected = {
            "devices",
            "sweeps",
            "tasks",
            "variants",
            "artifacts",
            "measurements",
            "dispatches",
            "winners",
            "tables",
            "api_tokens",
        }
        assert expected <= tables
        downgrade(database_url, "base")
        with engine.connect() as connection:
            assert set(inspect(connection).get_table_names()) <= {"alembic_version"}
    finally:
        engine.dispose()
