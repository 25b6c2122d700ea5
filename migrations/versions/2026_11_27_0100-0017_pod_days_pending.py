"""cost_pod_days_pending: the days whose per-pod rollup a multi-hour ingest writes once, at its end

An hour's chargeback added to ``cost_pod_days`` costs an upsert per pod (5,000 an hour at 1,000
GPUs: ~0.09 CPU-s of the server's ~0.3 an hour); a backfill writes each day's pod rows
once from the chargeback instead, and marks the day pending meanwhile (the per-pod reads take a
pending day from the chargeback). Empty: every day's rows are kept as before.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27 01:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "cost_pod_days_pending",
        sa.Column("day", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cluster", sa.String(length=253), nullable=False),
        sa.Column("day_end", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("day", "cluster", name=op.f("pk_cost_pod_days_pending")),
    )


def downgrade() -> None:
    # a pending day's pod rows are short until they are written: before this revision nothing
    # would write them, so a downgrade waits for them (any ingest run ends by writing them)
    pending = op.get_bind().execute(sa.text("SELECT count(*) FROM cost_pod_days_pending"))
    if pending.scalar():
        raise RuntimeError(
            "cost_pod_days_pending: days whose per-pod rows are not written yet; run "
            "`gpu-costsvc ingest` (it writes them when it ends), then downgrade"
        )
    op.drop_table("cost_pod_days_pending")
