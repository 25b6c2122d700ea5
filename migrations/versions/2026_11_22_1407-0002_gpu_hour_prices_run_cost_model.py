"""prices and cost per GPU-hour, cost model of each run

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 14:07:32.730104
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # hours ingested before this revision get price 0: the next ingest sees that their price
    # differs from the cost model's and reprices them from their stored facts
    with op.batch_alter_table('gpu_hours', schema=None) as batch_op:
        batch_op.add_column(sa.Column('price', sa.BigInteger(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('cost', sa.BigInteger(), nullable=False, server_default='0'))
    with op.batch_alter_table('gpu_hours', schema=None) as batch_op:
        batch_op.alter_column('price', server_default=None)
        batch_op.alter_column('cost', server_default=None)

    with op.batch_alter_table('ingest_runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('kind', sa.String(length=16), server_default='ingest', nullable=False))
        batch_op.add_column(sa.Column('cost_model_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key(batch_op.f('fk_ingest_runs_cost_model_id_cost_model_versions'), 'cost_model_versions', ['cost_model_id'], ['id'])



def downgrade() -> None:
    with op.batch_alter_table('ingest_runs', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_ingest_runs_cost_model_id_cost_model_versions'), type_='foreignkey')
        batch_op.drop_column('cost_model_id')
        batch_op.drop_column('kind')

    with op.batch_alter_table('gpu_hours', schema=None) as batch_op:
        batch_op.drop_column('cost')
        batch_op.drop_column('price')

