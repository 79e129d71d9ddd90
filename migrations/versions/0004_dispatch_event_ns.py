"""dispatches.event_ns: CUDA-event time per dispatch, stored beside CUPTI's device_ns and host wall_ns

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("dispatches", sa.Column("event_ns", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dispatches") as batch:
        batch.drop_column("event_ns")
