"""captures: hand-made rocprof / rocprofv3 captures with their dispatch rows and per-kernel stats

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "captures",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(length=24), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("imported_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "capture_dispatches",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("capture_id", sa.Integer(), nullable=False),
        sa.Column("file_index", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kernel", sa.Text(), nullable=False),
        sa.Column("start_ns", sa.BigInteger(), nullable=False),
        sa.Column("end_ns", sa.BigInteger(), nullable=False),
        sa.Column("duration_ns", sa.BigInteger(), nullable=False),
        sa.Column("agent", sa.String(length=80), nullable=False),
        sa.Column("queue", sa.String(length=80), nullable=False),
        sa.Column("dispatch_id", sa.BigInteger(), nullable=True),
        sa.Column("resources", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["capture_id"], ["captures.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        op.f("ix_capture_dispatches_capture_id"), "capture_dispatches", ["capture_id"], unique=False
    )
    op.create_table(
        "capture_kernel_stats",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("capture_id", sa.Integer(), nullable=False),
        sa.Column("file_index", sa.Integer(), nullable=False),
        sa.Column("kernel", sa.Text(), nullable=False),
        sa.Column("calls", sa.BigInteger(), nullable=False),
        sa.Column("total_ns", sa.BigInteger(), nullable=False),
        sa.Column("average_ns", sa.Float(), nullable=False),
        sa.Column("percentage", sa.Float(), nullable=False),
        sa.Column("min_ns", sa.BigInteger(), nullable=True),
        sa.Column("max_ns", sa.BigInteger(), nullable=True),
        sa.Column("stddev_ns", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["capture_id"], ["captures.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        op.f("ix_capture_kernel_stats_capture_id"), "capture_kernel_stats", ["capture_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_capture_kernel_stats_capture_id"), table_name="capture_kernel_stats")
    op.drop_table("capture_kernel_stats")
    op.drop_index(op.f("ix_capture_dispatches_capture_id"), table_name="capture_dispatches")
    op.drop_table("capture_dispatches")
    op.drop_table("captures")
