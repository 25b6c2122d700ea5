"""cost model versions kept in the database: when each was put in force, and by whom

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 16:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('cost_model_versions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('activated_at', sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column('activated_by', sa.String(length=253), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('cost_model_versions', schema=None) as batch_op:
        batch_op.drop_column('activated_by')
        batch_op.drop_column('activated_at')
