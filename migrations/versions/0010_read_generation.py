"""read generation: a counter that triggers move with every change to what cached reads show

The API keeps rendered winners and dashboard responses while this value stays put (service/api/read_cache.py).
Postgres: a deferred constraint trigger per watched table bumps the single row once per transaction, at
commit, so the row lock is held only while the transaction commits (writers never wait on each other for
long, and since it is the last lock a transaction takes, it cannot close a deadlock cycle). SQLite has one
writer at a time, so plain row triggers do.

Revision ID: 0010
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

WATCHED = ("winners", "sweeps", "tasks", "measurements", "tables")  # = ReadGeneration.WATCHED
FUNCTION = "tunebase_bump_read_generation"

PG_FUNCTION = f"""
CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- once per transaction: the flag is transaction-local (set_config(..., true))
    IF current_setting('tunebase.read_generation_bumped', true) IS DISTINCT FROM 'on' THEN
        PERFORM set_config('tunebase.read_generation_bumped', 'on', true);
        UPDATE read_generation SET value = value + 1 WHERE id = 1;
    END IF;
    RETURN NULL;
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "read_generation",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("value", sa.BigInteger(), nullable=False),
    )
    op.execute("INSERT INTO read_generation (id, value) VALUES (1, 0)")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_FUNCTION)
        for table in WATCHED:
            op.execute(
                f"CREATE CONSTRAINT TRIGGER read_generation_{table} AFTER INSERT OR UPDATE OR DELETE "
                f"ON {table} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()"
            )
        return
    for table in WATCHED:
        for event in ("INSERT", "UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER read_generation_{table}_{event.lower()} AFTER {event} ON {table} "
                "BEGIN UPDATE read_generation SET value = value + 1 WHERE id = 1; END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in WATCHED:
            op.execute(f"DROP TRIGGER IF EXISTS read_generation_{table} ON {table}")
        op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
    else:
        for table in WATCHED:
            for event in ("insert", "update", "delete"):
                op.execute(f"DROP TRIGGER IF EXISTS read_generation_{table}_{event}")
    op.drop_table("read_generation")
