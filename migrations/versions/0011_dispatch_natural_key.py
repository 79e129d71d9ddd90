"""dispatches keyed by (measurement_id, seq): the surrogate id and the measurement_id index go

Every reader asks for one measurement's rows in seq order, and every writer numbers a measurement's
dispatches uniquely (seq is the task-wide launch order), so (measurement_id, seq) is the row's
identity. The bigint id cost a sequence call per row and a second B-tree beside the measurement_id
one; with the natural key one B-tree serves both (bench/results/ingest-2026-11-30-c.json). On SQLite
the table becomes WITHOUT ROWID, so that B-tree holds the rows themselves.

Rows already stored that share (measurement_id, seq) (no writer of this code makes them, but an
older database might hold some) are renumbered 0, 1, ... in the order the readers showed them
(seq, then id), only within the measurements affected; the primary key could not be built otherwise.
Downgrade gives every row a new id (in (measurement_id, seq) order) and restores the index.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

PK_NAME = "pk_dispatches"  # not "dispatches_pkey": that name stays free for the downgrade's table
INDEX_NAME = "ix_dispatches_measurement_id"

# UPDATE ... FROM: Postgres, and SQLite since 3.33
RENUMBER_DUPLICATES = """
UPDATE dispatches SET seq = renumbered.position
FROM (
    SELECT id, row_number() OVER (PARTITION BY measurement_id ORDER BY seq, id) - 1 AS position
    FROM dispatches
    WHERE measurement_id IN (
        SELECT measurement_id FROM dispatches GROUP BY measurement_id, seq HAVING count(*) > 1
    )
) AS renumbered
WHERE dispatches.id = renumbered.id AND dispatches.seq <> renumbered.position
"""


def upgrade() -> None:
    op.execute(RENUMBER_DUPLICATES)
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index(INDEX_NAME, table_name="dispatches")
        # one ALTER, one pass: the id's sequence goes with its column (OWNED BY)
        op.execute(
            "ALTER TABLE dispatches DROP CONSTRAINT dispatches_pkey, DROP COLUMN id, "
            f"ADD CONSTRAINT {PK_NAME} PRIMARY KEY (measurement_id, seq)"
        )
        return
    # SQLite: WITHOUT ROWID, so the key's B-tree is the table (no rowid B-tree beside an autoindex)
    with op.batch_alter_table(
        "dispatches", recreate="always", table_kwargs={"sqlite_with_rowid": False}
    ) as batch:
        batch.drop_index(INDEX_NAME)
        batch.drop_column("id")
        batch.create_primary_key(PK_NAME, ["measurement_id", "seq"])


def downgrade() -> None:
    # rebuilt as 0010 had it (id first: on SQLite the rowid); the old table keeps its constraint names
    # until it is dropped, hence PK_NAME differs from the "dispatches_pkey" made here
    op.execute("ALTER TABLE dispatches RENAME TO dispatches_0011")
    _create_0010_table()
    op.execute(
        "INSERT INTO dispatches (measurement_id, seq, device_ns, wall_ns, buffer_index, event_ns) "
        "SELECT measurement_id, seq, device_ns, wall_ns, buffer_index, event_ns FROM dispatches_0011 "
        "ORDER BY measurement_id, seq"
    )
    op.drop_table("dispatches_0011")
    op.create_index(INDEX_NAME, "dispatches", ["measurement_id"], unique=False)


def _create_0010_table() -> None:
    """dispatches as 0001 + 0004 left it (bigserial id on Postgres, INTEGER rowid alias on SQLite)."""
    op.create_table(
        "dispatches",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("measurement_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("device_ns", sa.BigInteger(), nullable=False),
        sa.Column("wall_ns", sa.BigInteger(), nullable=True),
        sa.Column("buffer_index", sa.Integer(), nullable=False),
        sa.Column("event_ns", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(["measurement_id"], ["measurements.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
