"""chargeback.container, controller_kind, controller: the holding's container and its pod's
controller as they were at that hour (OpenCost's container / controller / controllerKind)

Rows ingested before this revision keep "" (unknown). A line is now per container: the
unique key has ``container``.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0011'
down_revision: str | None = '0010'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = ['hour', 'cluster', 'team', 'project', 'stage', 'namespace', 'pod', 'node', 'gpu_model', 'mig_profile']


def upgrade() -> None:
    with op.batch_alter_table('chargeback', schema=None) as batch_op:
        batch_op.add_column(sa.Column('container', sa.String(length=253), server_default='', nullable=False))
        batch_op.add_column(sa.Column('controller_kind', sa.String(length=253), server_default='', nullable=False))
        batch_op.add_column(sa.Column('controller', sa.String(length=253), server_default='', nullable=False))
        batch_op.drop_constraint(batch_op.f('uq_chargeback_hour'), type_='unique')
        batch_op.create_unique_constraint(batch_op.f('uq_chargeback_hour'), [*KEY, 'container', 'billing_month'])


def downgrade() -> None:
    with op.batch_alter_table('chargeback', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('uq_chargeback_hour'), type_='unique')
        batch_op.create_unique_constraint(batch_op.f('uq_chargeback_hour'), [*KEY, 'billing_month'])
        batch_op.drop_column('controller')
        batch_op.drop_column('controller_kind')
        batch_op.drop_column('container')
