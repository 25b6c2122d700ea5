"""lost GPU time: gpu_hours.lost_us; unavailable cost and GPU-hours on chargeback, cost_hours

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 16:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ZERO = sa.text("0")


def upgrade() -> None:
    with op.batch_alter_table("gpu_hours") as batch_op:
        batch_op.add_column(
            sa.Column("lost_us", sa.BigInteger(), nullable=False, server_default=ZERO)
        )
    for table in ("chargeback", "cost_hours"):
        with op.batch_alter_table(table) as batch_op:
            batch_op.add_column(
                sa.Column("unavailable", sa.BigInteger(), nullable=False, server_default=ZERO)
            )
            batch_op.add_column(
                sa.Column(
                    "unavailable_gpu_hours", sa.BigInteger(), nullable=False, server_default=ZERO
                )
            )


def downgrade() -> None:
    for table in ("cost_hours", "chargeback"):
        with op.batch_alter_table(table) as batch_op:
            batch_op.drop_column("unavailable_gpu_hours")
            batch_op.drop_column("unavailable")
    with op.batch_alter_table("gpu_hours") as batch_op:
        batch_op.drop_column("lost_us")
