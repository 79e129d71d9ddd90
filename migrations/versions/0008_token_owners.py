"""token owners: sweeps record the token that submitted them; tokens record their creator and revocation

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("created_by", sa.String(length=120), nullable=False, server_default=""))
        batch.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("sweeps") as batch:
        batch.add_column(sa.Column("owner_token_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_sweeps_owner_token", "api_tokens", ["owner_token_id"], ["id"])
        batch.create_index("ix_sweeps_owner_token_id", ["owner_token_id"])


def downgrade() -> None:
    with op.batch_alter_table("sweeps") as batch:
        batch.drop_index("ix_sweeps_owner_token_id")
        batch.drop_constraint("fk_sweeps_owner_token", type_="foreignkey")
        batch.drop_column("owner_token_id")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("revoked_at")
        batch.drop_column("created_by")
