"""cost_days, cost_pod_days, cost_months: the daily (per owner, per pod) and monthly rollups

Revision ID: 0010
Revises: 0007
Create Date: 2026-11-23 19:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

AMOUNTS = (
    "allocated",
    "used",
    "waste",
    "idle",
    "gpu_hours",
    "unavailable",
    "unavailable_gpu_hours",
    "energy_mj",
    "idle_energy_mj",
    "co2e_mg",
    "idle_co2e_mg",
)
OWNER = "cluster, team, project, stage, currency"
POD = "cluster, team, project, stage, namespace, pod, currency"


def upgrade() -> None:
    op.create_table(
        "cost_days",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("day", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cluster", sa.String(length=253), nullable=False),
        sa.Column("team", sa.String(length=253), nullable=False),
        sa.Column("project", sa.String(length=253), nullable=False),
        sa.Column("stage", sa.String(length=253), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("lines", sa.BigInteger(), nullable=False),
        *(sa.Column(a, sa.BigInteger(), nullable=False) for a in AMOUNTS),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cost_days")),
        sa.UniqueConstraint(
            "day", "cluster", "team", "project", "stage", "currency", name=op.f("uq_cost_days_day")
        ),
        # room on each page for HOT updates: the writer adds to a day's rows every hour
        postgresql_with={"fillfactor": 50},
    )
    op.create_index("ix_cost_days_team_day", "cost_days", ["team", "day"], unique=False)
    op.create_table(
        "cost_pod_days",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("day", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cluster", sa.String(length=253), nullable=False),
        sa.Column("team", sa.String(length=253), nullable=False),
        sa.Column("project", sa.String(length=253), nullable=False),
        sa.Column("stage", sa.String(length=253), nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("pod", sa.String(length=253), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("lines", sa.BigInteger(), nullable=False),
        *(sa.Column(a, sa.BigInteger(), nullable=False) for a in AMOUNTS),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cost_pod_days")),
        sa.UniqueConstraint(
            "day",
            "cluster",
            "team",
            "project",
            "stage",
            "namespace",
            "pod",
            "currency",
            name=op.f("uq_cost_pod_days_day"),
        ),
        postgresql_with={"fillfactor": 50},
    )
    op.create_index("ix_cost_pod_days_team_day", "cost_pod_days", ["team", "day"], unique=False)
    op.create_table(
        "cost_months",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("month", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cluster", sa.String(length=253), nullable=False),
        sa.Column("team", sa.String(length=253), nullable=False),
        sa.Column("project", sa.String(length=253), nullable=False),
        sa.Column("stage", sa.String(length=253), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("lines", sa.BigInteger(), nullable=False),
        *(sa.Column(a, sa.BigInteger(), nullable=False) for a in AMOUNTS),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cost_months")),
        sa.UniqueConstraint(
            "month",
            "cluster",
            "team",
            "project",
            "stage",
            "currency",
            name=op.f("uq_cost_months_month"),
        ),
        postgresql_with={"fillfactor": 50},
    )
    op.create_index("ix_cost_months_team_month", "cost_months", ["team", "month"], unique=False)
    # the hours written before this revision, from their chargeback rows. The day is the hour's UTC day, stored as the
    # models store a time: timestamptz on PostgreSQL; SQLAlchemy's 'YYYY-MM-DD HH:MM:SS.ffffff'
    # text on SQLite (its DateTime storage format).
    if op.get_bind().dialect.name == "postgresql":
        day = "date_trunc('day', hour, 'UTC')"
        month = "date_trunc('month', hour, 'UTC')"
    else:
        day = "substr(hour, 1, 10) || ' 00:00:00.000000'"
        month = "substr(hour, 1, 7) || '-01 00:00:00.000000'"
    sums = ", ".join(f"sum({a})" for a in AMOUNTS)
    for table, key, at in (
        ("cost_days", OWNER, day),
        ("cost_pod_days", POD, day),
        ("cost_months", OWNER, month),
    ):
        first = "month" if table == "cost_months" else "day"
        op.execute(
            f"INSERT INTO {table} ({first}, {key}, lines, {', '.join(AMOUNTS)}) "  # noqa: S608
            f"SELECT {at}, {key}, count(*), {sums} FROM chargeback GROUP BY {at}, {key}"
        )


def downgrade() -> None:
    op.drop_index("ix_cost_months_team_month", table_name="cost_months")
    op.drop_table("cost_months")
    op.drop_index("ix_cost_pod_days_team_day", table_name="cost_pod_days")
    op.drop_table("cost_pod_days")
    op.drop_index("ix_cost_days_team_day", table_name="cost_days")
    op.drop_table("cost_days")
