"""Model jobs and a job's note: a job may tune a whole model (`jobs.model`: its name, key and
distinct tasks), each task a child job (`jobs.parent_id`) whose candidates workers lease as
any job's; a model job names no single workload (`jobs.workload_key` may be NULL). A
succeeded job's remark (the design space ran out) moves from `error` to `note`.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("workload_key", existing_type=sa.String(length=64), nullable=True)
        batch.add_column(sa.Column("parent_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("model", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("note", sa.Text(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_jobs_parent_id_jobs"), "jobs", ["parent_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index(op.f("ix_jobs_parent_id"), ["parent_id"], unique=False)
    op.execute("UPDATE jobs SET note = error, error = NULL WHERE status = 'succeeded'")


def downgrade() -> None:
    op.execute("UPDATE jobs SET error = note WHERE status = 'succeeded' AND note IS NOT NULL")
    op.execute("DELETE FROM jobs WHERE parent_id IS NOT NULL OR workload_key IS NULL")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index(op.f("ix_jobs_parent_id"))
        batch.drop_constraint(op.f("fk_jobs_parent_id_jobs"), type_="foreignkey")
        batch.drop_column("note")
        batch.drop_column("model")
        batch.drop_column("parent_id")
        batch.alter_column("workload_key", existing_type=sa.String(length=64), nullable=False)
