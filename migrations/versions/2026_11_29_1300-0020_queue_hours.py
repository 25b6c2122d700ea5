"""queue_hours: Kueue ClusterQueues' quota against use per flavor and hour, and the
borrowing policy's money (docs/queues.md)

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "queue_hours",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cluster", sa.String(253), nullable=False),
        sa.Column("cohort", sa.String(253), nullable=False),
        sa.Column("cluster_queue", sa.String(253), nullable=False),
        sa.Column("flavor", sa.String(253), nullable=False),
        sa.Column("resource", sa.String(253), nullable=False),
        sa.Column("team", sa.String(253), nullable=False),
        sa.Column("nominal_s", sa.BigInteger(), nullable=False),
        sa.Column("used_s", sa.BigInteger(), nullable=False),
        sa.Column("within_s", sa.BigInteger(), nullable=False),
        sa.Column("borrowed_s", sa.BigInteger(), nullable=False),
        sa.Column("lent_s", sa.BigInteger(), nullable=False),
        sa.Column("idle_s", sa.BigInteger(), nullable=False),
        sa.Column("policy", sa.String(16), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("charge", sa.BigInteger(), nullable=False),
        sa.Column("credit", sa.BigInteger(), nullable=False),
        sa.Column("price", sa.BigInteger(), nullable=True),
        sa.Column("premium_ppm", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_queue_hours")),
        sa.UniqueConstraint(
            "hour",
            "cluster",
            "cohort",
            "cluster_queue",
            "flavor",
            "resource",
            name=op.f("uq_queue_hours_hour"),
        ),
    )
    op.create_index("ix_queue_hours_team_hour", "queue_hours", ["team", "hour"])
    op.create_index("ix_queue_hours_hour", "queue_hours", ["hour"])


def downgrade() -> None:
    op.drop_index("ix_queue_hours_hour", table_name="queue_hours")
    op.drop_index("ix_queue_hours_team_hour", table_name="queue_hours")
    op.drop_table("queue_hours")
