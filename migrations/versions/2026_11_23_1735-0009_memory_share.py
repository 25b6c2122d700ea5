"""usage_facts.memory_share_us: ∫ gpu_allocation_memory_share dt (DRA, HAMi, vGPU holdings)

Revision ID: 0009
Revises: 0005
Create Date: 2026-11-23 17:35:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0009'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('usage_facts') as batch:
        batch.add_column(sa.Column('memory_share_us', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('usage_facts') as batch:
        batch.drop_column('memory_share_us')
