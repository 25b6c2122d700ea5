"""queue_hours.billing_month and correction: a back-dated borrowing policy over a closed month
is billed as correction rows in the next open month (docs/queues.md, "A closed month")

Rows ingested before this revision are billed in their own hour's month, as originals. The
unique key gains billing_month (a correction of an hour sits next to its original).

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = ("hour", "cluster", "cohort", "cluster_queue", "flavor", "resource")


def upgrade() -> None:
    with op.batch_alter_table("queue_hours", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("billing_month", sa.String(7), server_default="", nullable=False)
        )
        batch_op.add_column(
            sa.Column("correction", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "UPDATE queue_hours SET billing_month = to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM')"
        )
    else:
        op.execute("UPDATE queue_hours SET billing_month = strftime('%Y-%m', hour)")
    with op.batch_alter_table("queue_hours", schema=None) as batch_op:
        batch_op.alter_column("billing_month", server_default=None)
        batch_op.drop_constraint(batch_op.f("uq_queue_hours_hour"), type_="unique")
        batch_op.create_unique_constraint(
            batch_op.f("uq_queue_hours_hour"), [*KEY, "billing_month"]
        )


def downgrade() -> None:
    # the corrections go: each hour keeps its original rows, as billed in its own month
    op.execute(sa.text("DELETE FROM queue_hours WHERE correction"))
    with op.batch_alter_table("queue_hours", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_queue_hours_hour"), type_="unique")
        batch_op.create_unique_constraint(batch_op.f("uq_queue_hours_hour"), list(KEY))
        batch_op.drop_column("correction")
        batch_op.drop_column("billing_month")
