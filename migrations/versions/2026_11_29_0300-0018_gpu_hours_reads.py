"""gpu_hours: reads, the rule each GPU's hour was read by (``integrals`` or ``gauges``)

Each GPU's hour is read from our exporter's integrals where they cover it, else from the
gauges (docs/cost-model.md, "Two rules, one per source"); the row says which, so an answer can
tell which rule priced a GPU-hour. NULL: an hour stored before the rule was kept.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29 03:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gpu_hours") as batch_op:
        batch_op.add_column(sa.Column("reads", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gpu_hours") as batch_op:
        batch_op.drop_column("reads")
