"""energy and carbon: measured energy per GPU-hour, energy and CO2e per chargeback line

Revision ID: 0008
Revises: 0009
Create Date: 2026-11-23 17:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GPU_COLUMNS = ("energy_mj", "gap_mj", "energy_us", "kwh_price", "carbon_ug_per_kwh", "co2e_mg")
LINE_COLUMNS = ("energy_mj", "idle_energy_mj", "co2e_mg", "idle_co2e_mg")


def upgrade() -> None:
    with op.batch_alter_table("gpu_hours", schema=None) as batch_op:
        for name in GPU_COLUMNS:
            batch_op.add_column(
                sa.Column(name, sa.BigInteger(), server_default="0", nullable=False)
            )
        batch_op.add_column(sa.Column("min_power_mw", sa.BigInteger(), nullable=True))
    for table in ("chargeback", "cost_hours"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for name in LINE_COLUMNS:
                batch_op.add_column(
                    sa.Column(name, sa.BigInteger(), server_default="0", nullable=False)
                )
    with op.batch_alter_table("budgets", schema=None) as batch_op:
        batch_op.add_column(sa.Column("energy_mj", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("budgets", schema=None) as batch_op:
        batch_op.drop_column("energy_mj")
    for table in ("cost_hours", "chargeback"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            for name in reversed(LINE_COLUMNS):
                batch_op.drop_column(name)
    with op.batch_alter_table("gpu_hours", schema=None) as batch_op:
        batch_op.drop_column("min_power_mw")
        for name in reversed(GPU_COLUMNS):
            batch_op.drop_column(name)
