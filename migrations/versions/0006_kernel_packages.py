"""kernel packages: uploaded packages, per-variant ISA pre-screens, and the package on every result

Rows written before packages existed were measured with the built-in families; they get the built-in
package names (tb-decode / tb-prefill) so their winners stay separate from any uploaded package.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_BUILTIN = {"decode": "tb-decode", "prefill": "tb-prefill"}
_TABLES = ("sweeps", "tasks", "measurements", "winners")


def upgrade() -> None:
    op.create_table(
        "kernel_packages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("manifest", sa.JSON(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("variants", sa.Integer(), nullable=False),
        sa.Column("invalid", sa.JSON(), nullable=False),
        sa.Column("uploaded_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", "version", name="uq_kernel_package_version"),
    )
    op.create_index(op.f("ix_kernel_packages_name"), "kernel_packages", ["name"], unique=False)
    op.create_table(
        "kernel_analyses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kernel", sa.String(length=64), nullable=False),
        sa.Column("kernel_version", sa.String(length=64), nullable=False),
        sa.Column("arch", sa.String(length=32), nullable=False),
        sa.Column("format", sa.String(length=16), nullable=False),
        sa.Column("variant", sa.String(length=80), nullable=False),
        sa.Column("symbol", sa.String(length=200), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("resources", sa.JSON(), nullable=False),
        sa.Column("toolchain", sa.String(length=300), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "kernel", "kernel_version", "arch", "format", "variant", name="uq_kernel_analysis"
        ),
    )
    op.create_index(op.f("ix_kernel_analyses_kernel"), "kernel_analyses", ["kernel"], unique=False)

    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("kernel", sa.String(length=64), nullable=False, server_default=""))
            batch.add_column(
                sa.Column("kernel_version", sa.String(length=64), nullable=False, server_default="")
            )
        for phase, name in _BUILTIN.items():
            op.execute(
                sa.text(f"UPDATE {table} SET kernel = :name WHERE phase = :phase").bindparams(
                    name=name, phase=phase
                )
            )
        with op.batch_alter_table(table) as batch:
            batch.alter_column("kernel", server_default=None)
            batch.alter_column("kernel_version", server_default=None)
    op.create_index(op.f("ix_sweeps_kernel"), "sweeps", ["kernel"], unique=False)
    for phase, name in _BUILTIN.items():
        for table in ("variants", "artifacts"):
            op.execute(
                sa.text(f"UPDATE {table} SET family = :name WHERE family = :phase").bindparams(
                    name=name, phase=phase
                )
            )
    with op.batch_alter_table("winners") as batch:
        batch.drop_constraint("uq_winner_point", type_="unique")
        batch.create_unique_constraint(
            "uq_winner_point", ["arch", "phase", "kernel", "format", "m", "n", "k"]
        )
    op.drop_index("ix_measurements_point", table_name="measurements")
    op.create_index(
        "ix_measurements_point",
        "measurements",
        ["arch", "phase", "format", "m", "n", "k", "kernel"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_measurements_point", table_name="measurements")
    op.create_index(
        "ix_measurements_point", "measurements", ["arch", "phase", "format", "m", "n", "k"], unique=False
    )
    with op.batch_alter_table("winners") as batch:
        batch.drop_constraint("uq_winner_point", type_="unique")
        batch.create_unique_constraint("uq_winner_point", ["arch", "phase", "format", "m", "n", "k"])
    for phase, name in _BUILTIN.items():
        for table in ("variants", "artifacts"):
            op.execute(
                sa.text(f"UPDATE {table} SET family = :phase WHERE family = :name").bindparams(
                    name=name, phase=phase
                )
            )
    op.drop_index(op.f("ix_sweeps_kernel"), table_name="sweeps")
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("kernel_version")
            batch.drop_column("kernel")
    op.drop_index(op.f("ix_kernel_analyses_kernel"), table_name="kernel_analyses")
    op.drop_table("kernel_analyses")
    op.drop_index(op.f("ix_kernel_packages_name"), table_name="kernel_packages")
    op.drop_table("kernel_packages")
