"""observed shapes: points an engine met that its table missed, offered to the next sweep

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "observed_shapes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("arch", sa.String(length=32), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("m", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=120), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_sweep_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["last_sweep_id"], ["sweeps.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("arch", "phase", "format", "m", "n", "k", name="uq_observed_point"),
    )
    op.create_index("ix_observed_arch_phase", "observed_shapes", ["arch", "phase"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_observed_arch_phase", table_name="observed_shapes")
    op.drop_table("observed_shapes")
