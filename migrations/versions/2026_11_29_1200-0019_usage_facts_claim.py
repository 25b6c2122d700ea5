"""usage_facts: claim, the DRA ResourceClaim a holding is through (``<namespace>/<name>``)

Our exporter labels a holding through a DRA claim with ``claim_namespace`` and ``claim``
(exporter/render/families.py); the row keeps them, so a report can tell a claim's share from a
time-slice replica's (docs/focus.md, FOCUS 1.3 ``AllocatedMethodId``). "": not through a claim,
or an hour stored before the claim was kept.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("usage_facts") as batch_op:
        batch_op.add_column(sa.Column("claim", sa.String(507), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("usage_facts") as batch_op:
        batch_op.drop_column("claim")
