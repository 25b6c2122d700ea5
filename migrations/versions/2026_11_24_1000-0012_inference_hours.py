"""inference_hours: tokens served per hour, model and pod, and their cost (cost per 1M tokens)

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TEXT = (
    ("cluster", 253),
    ("namespace", 253),
    ("pod", 253),
    ("model", 253),
    ("engine", 16),
    ("role", 64),
    ("team", 253),
    ("project", 253),
    ("stage", 253),
    ("currency", 3),
)
COUNTS = ("input_tokens", "output_tokens", "requests")
MONEY = (
    "weight_ppm",
    "allocated",
    "used",
    "waste",
    "idle",
    "gpu_hours",
    "input_cost",
    "output_cost",
    "input_used",
    "output_used",
)


def upgrade() -> None:
    op.create_table(
        "inference_hours",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        *(sa.Column(name, sa.String(length=n), nullable=False) for name, n in TEXT),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in COUNTS),
        sa.Column("prefill_us", sa.BigInteger(), nullable=True),
        sa.Column("decode_us", sa.BigInteger(), nullable=True),
        sa.Column("rule", sa.String(length=8), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in MONEY),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_inference_hours")),
        sa.UniqueConstraint(
            "hour",
            "cluster",
            "namespace",
            "pod",
            "model",
            "engine",
            name=op.f("uq_inference_hours_hour"),
        ),
    )
    op.create_index("ix_inference_hours_team_hour", "inference_hours", ["team", "hour"])
    op.create_index("ix_inference_hours_hour", "inference_hours", ["hour"])


def downgrade() -> None:
    op.drop_index("ix_inference_hours_hour", table_name="inference_hours")
    op.drop_index("ix_inference_hours_team_hour", table_name="inference_hours")
    op.drop_table("inference_hours")
