"""The coordinator's columns: a job's workload spec and job lease, a candidate's
result id, a worker's owner; indexes for leasing by target and a job's records.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("workload_spec", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("runner", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("runner_expires_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(op.f("ix_jobs_target_id_status"), "jobs", ["target_id", "status"], unique=False)
    with op.batch_alter_table("candidates") as batch:
        batch.add_column(sa.Column("record_id", sa.String(length=36), nullable=True))
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("owner", sa.String(length=128), nullable=True))
    op.create_index(op.f("ix_records_job_id"), "records", ["job_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_records_job_id"), table_name="records")
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("owner")
    with op.batch_alter_table("candidates") as batch:
        batch.drop_column("record_id")
    op.drop_index(op.f("ix_jobs_target_id_status"), table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("runner_expires_at")
        batch.drop_column("runner")
        batch.drop_column("workload_spec")
