"""The finalists' choice per (workload, target): the record a tuning run found fastest
when its best few were re-timed together; `best` prefers it to the lowest tuning median.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "finals",
        sa.Column("workload_key", sa.String(length=64), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("record_id", sa.String(length=36), nullable=False),
        sa.Column("retimed_ms", sa.Double(), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("retimed_ms > 0", name=op.f("ck_finals_retimed_positive")),
        sa.ForeignKeyConstraint(
            ["workload_key"], ["workloads.key"], name=op.f("fk_finals_workload_key_workloads")
        ),
        sa.ForeignKeyConstraint(
            ["target_id"], ["targets.id"], name=op.f("fk_finals_target_id_targets")
        ),
        sa.ForeignKeyConstraint(
            ["record_id"],
            ["records.record_id"],
            name=op.f("fk_finals_record_id_records"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("workload_key", "target_id", name=op.f("pk_finals")),
    )


def downgrade() -> None:
    op.drop_table("finals")
