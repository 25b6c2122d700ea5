"""the data version, the price a chargeback row was charged at, a MIG GPU's geometry

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 21:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    version = op.create_table(
        "data_version",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_data_version")),
    )
    op.bulk_insert(version, [{"id": 1, "version": 0}])
    with op.batch_alter_table("chargeback", schema=None) as batch_op:
        batch_op.add_column(sa.Column("unit_price", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("gpu_hours", schema=None) as batch_op:
        batch_op.add_column(sa.Column("mig_compute_slices", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("mig_memory_slices", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gpu_hours", schema=None) as batch_op:
        batch_op.drop_column("mig_memory_slices")
        batch_op.drop_column("mig_compute_slices")
    with op.batch_alter_table("chargeback", schema=None) as batch_op:
        batch_op.drop_column("unit_price")
    op.drop_table("data_version")
