"""local_queue_links: each Kueue LocalQueue's ClusterQueue over time; chargeback.queue, cluster_queue, cohort, flavor: a line's pod's Kueue queue at that hour;
chargeback.owner_from: which labels decided its owner (docs/queues.md, docs/focus.md)

Rows ingested before this revision keep "" (unknown). The unique key does not change: each is
a function of the pod and hour.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29 14:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

QUEUE = ("queue", "cluster_queue", "cohort", "flavor")


def upgrade() -> None:
    op.create_table(
        "local_queue_links",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cluster", sa.String(253), nullable=False),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("name", sa.String(253), nullable=False),
        sa.Column("cluster_queue", sa.String(253), nullable=False),
        sa.Column("valid_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_local_queue_links")),
        sa.UniqueConstraint(
            "cluster", "namespace", "name", "valid_from", name=op.f("uq_local_queue_links_cluster")
        ),
    )
    op.create_index(
        "ix_local_queue_links_open", "local_queue_links", ["cluster", "valid_to"], unique=False
    )
    with op.batch_alter_table("chargeback", schema=None) as batch_op:
        for name in QUEUE:
            batch_op.add_column(sa.Column(name, sa.String(253), server_default="", nullable=False))
        batch_op.add_column(
            sa.Column("owner_from", sa.String(1000), server_default="", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("chargeback", schema=None) as batch_op:
        batch_op.drop_column("owner_from")
        for name in reversed(QUEUE):
            batch_op.drop_column(name)
    op.drop_index("ix_local_queue_links_open", table_name="local_queue_links")
    op.drop_table("local_queue_links")
