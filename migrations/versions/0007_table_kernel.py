"""tables record the kernel package they were generated for (winners of different packages never mix)

Existing table versions were generated from the built-in families: they get the built-in package names.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_BUILTIN = {"decode": "tb-decode", "prefill": "tb-prefill"}


def upgrade() -> None:
    with op.batch_alter_table("tables") as batch:
        batch.add_column(sa.Column("kernel", sa.String(length=64), nullable=False, server_default=""))
        batch.add_column(sa.Column("kernel_version", sa.String(length=64), nullable=False, server_default=""))
    for phase, name in _BUILTIN.items():
        op.execute(
            sa.text("UPDATE tables SET kernel = :name WHERE phase = :phase").bindparams(
                name=name, phase=phase
            )
        )
    with op.batch_alter_table("tables") as batch:
        batch.alter_column("kernel", server_default=None)
        batch.alter_column("kernel_version", server_default=None)
    op.drop_index("ix_tables_target", table_name="tables")
    op.create_index("ix_tables_target", "tables", ["arch", "phase", "kernel", "dialect"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_tables_target", table_name="tables")
    op.create_index("ix_tables_target", "tables", ["arch", "phase", "dialect"], unique=False)
    with op.batch_alter_table("tables") as batch:
        batch.drop_column("kernel_version")
        batch.drop_column("kernel")
