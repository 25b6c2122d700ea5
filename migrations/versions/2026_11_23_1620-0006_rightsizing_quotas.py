"""rightsizing and quotas: pod owners, controller owners, resource quotas, recommendations,
quota usage

Revision ID: 0006
Revises: 0008
Create Date: 2026-11-23 16:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0006'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        'pod_owners',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('cluster', sa.String(length=253), nullable=False),
        sa.Column('uid', sa.String(length=64), nullable=False),
        sa.Column('namespace', sa.String(length=253), nullable=False),
        sa.Column('name', sa.String(length=253), nullable=False),
        sa.Column('owner_kind', sa.String(length=253), nullable=False),
        sa.Column('owner_name', sa.String(length=253), nullable=False),
        sa.Column('valid_from', _TZ, nullable=False),
        sa.Column('valid_to', _TZ, nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_pod_owners')),
        sa.UniqueConstraint('cluster', 'uid', 'valid_from', name=op.f('uq_pod_owners_cluster')),
    )
    with op.batch_alter_table('pod_owners', schema=None) as batch_op:
        batch_op.create_index('ix_pod_owners_lookup', ['cluster', 'namespace', 'name'], unique=False)
    op.create_table(
        'controller_owners',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('cluster', sa.String(length=253), nullable=False),
        sa.Column('namespace', sa.String(length=253), nullable=False),
        sa.Column('kind', sa.String(length=64), nullable=False),
        sa.Column('name', sa.String(length=253), nullable=False),
        sa.Column('owner_kind', sa.String(length=253), nullable=False),
        sa.Column('owner_name', sa.String(length=253), nullable=False),
        sa.Column('seen_at', _TZ, nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_controller_owners')),
        sa.UniqueConstraint(
            'cluster', 'namespace', 'kind', 'name', name=op.f('uq_controller_owners_cluster')
        ),
    )
    op.create_table(
        'resource_quotas',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('cluster', sa.String(length=253), nullable=False),
        sa.Column('namespace', sa.String(length=253), nullable=False),
        sa.Column('name', sa.String(length=253), nullable=False),
        sa.Column('resource', sa.String(length=253), nullable=False),
        sa.Column('hard', sa.String(length=64), nullable=False),
        sa.Column('used', sa.String(length=64), nullable=True),
        sa.Column('seen_at', _TZ, nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_resource_quotas')),
        sa.UniqueConstraint(
            'cluster', 'namespace', 'name', 'resource', name=op.f('uq_resource_quotas_cluster')
        ),
    )
    op.create_table(
        'recommendations',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('cluster', sa.String(length=253), nullable=False),
        sa.Column('computed_at', _TZ, nullable=False),
        sa.Column('window_start', _TZ, nullable=False),
        sa.Column('window_end', _TZ, nullable=False),
        sa.Column('team', sa.String(length=253), nullable=False),
        sa.Column('namespace', sa.String(length=253), nullable=False),
        sa.Column('workload_kind', sa.String(length=64), nullable=False),
        sa.Column('workload', sa.String(length=253), nullable=False),
        sa.Column('gpu_model', sa.String(length=128), nullable=False),
        sa.Column('pods', sa.Integer(), nullable=False),
        sa.Column('action', sa.String(length=16), nullable=False),
        sa.Column('target', sa.String(length=128), nullable=False),
        sa.Column('reason', sa.String(length=500), nullable=False),
        sa.Column('device_hours', sa.BigInteger(), nullable=False),
        sa.Column('gpu_hours', sa.BigInteger(), nullable=False),
        sa.Column('memory_p95_bytes', sa.BigInteger(), nullable=True),
        sa.Column('memory_peak_bytes', sa.BigInteger(), nullable=True),
        sa.Column('activity_p95_ppm', sa.BigInteger(), nullable=True),
        sa.Column('activity_source', sa.String(length=32), nullable=False),
        sa.Column('idle_ppm', sa.BigInteger(), nullable=True),
        sa.Column('current_share_ppm', sa.BigInteger(), nullable=False),
        sa.Column('target_share_ppm', sa.BigInteger(), nullable=False),
        sa.Column('currency', sa.String(length=3), nullable=False),
        sa.Column('current_monthly', sa.BigInteger(), nullable=False),
        sa.Column('recommended_monthly', sa.BigInteger(), nullable=False),
        sa.Column('saving_monthly', sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_recommendations')),
    )
    with op.batch_alter_table('recommendations', schema=None) as batch_op:
        batch_op.create_index('ix_recommendations_team', ['team'], unique=False)
    op.create_table(
        'quota_usage',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('cluster', sa.String(length=253), nullable=False),
        sa.Column('computed_at', _TZ, nullable=False),
        sa.Column('window_start', _TZ, nullable=False),
        sa.Column('window_end', _TZ, nullable=False),
        sa.Column('team', sa.String(length=253), nullable=False),
        sa.Column('namespace', sa.String(length=253), nullable=False),
        sa.Column('resource', sa.String(length=253), nullable=False),
        sa.Column('source', sa.String(length=32), nullable=False),
        sa.Column('hard_milli', sa.BigInteger(), nullable=True),
        sa.Column('used_milli', sa.BigInteger(), nullable=True),
        sa.Column('held_milli', sa.BigInteger(), nullable=False),
        sa.Column('active_milli', sa.BigInteger(), nullable=False),
        sa.Column('currency', sa.String(length=3), nullable=False),
        sa.Column('unit_price', sa.BigInteger(), nullable=True),
        sa.Column('unused_monthly', sa.BigInteger(), nullable=True),
        sa.Column('idle_monthly', sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_quota_usage')),
    )
    with op.batch_alter_table('quota_usage', schema=None) as batch_op:
        batch_op.create_index('ix_quota_usage_team', ['team'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('quota_usage', schema=None) as batch_op:
        batch_op.drop_index('ix_quota_usage_team')
    op.drop_table('quota_usage')
    with op.batch_alter_table('recommendations', schema=None) as batch_op:
        batch_op.drop_index('ix_recommendations_team')
    op.drop_table('recommendations')
    op.drop_table('resource_quotas')
    op.drop_table('controller_owners')
    with op.batch_alter_table('pod_owners', schema=None) as batch_op:
        batch_op.drop_index('ix_pod_owners_lookup')
    op.drop_table('pod_owners')
