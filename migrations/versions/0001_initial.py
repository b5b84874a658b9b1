"""The initial schema: every table and index of `service/db/models.py`.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hashed_secret", sa.String(length=128), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("hashed_secret", name=op.f("uq_api_tokens_hashed_secret")),
    )
    op.create_table(
        "targets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("canonical", sa.String(length=2048), nullable=False),
        sa.Column("cpu", sa.String(length=128), nullable=False),
        sa.Column("features", sa.JSON(), nullable=False),
        sa.Column("threads", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_targets")),
        sa.UniqueConstraint("canonical", name=op.f("uq_targets_canonical")),
    )
    op.create_table(
        "workloads",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("op", sa.String(length=128), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("definition", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_workloads")),
    )
    op.create_index(op.f("ix_workloads_op"), "workloads", ["op"], unique=False)
    op.create_table(
        "cost_models",
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("model", sa.LargeBinary(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["target_id"], ["targets.id"], name=op.f("fk_cost_models_target_id_targets")
        ),
        sa.PrimaryKeyConstraint("target_id", name=op.f("pk_cost_models")),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=False),
        sa.Column("workload_key", sa.String(length=64), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("budget", sa.Integer(), nullable=False),
        sa.Column("strategy", sa.String(length=32), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("trials_done", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["target_id"], ["targets.id"], name=op.f("fk_jobs_target_id_targets")
        ),
        sa.ForeignKeyConstraint(
            ["workload_key"], ["workloads.key"], name=op.f("fk_jobs_workload_key_workloads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index(op.f("ix_jobs_owner_status"), "jobs", ["owner", "status"], unique=False)
    op.create_table(
        "workers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_heartbeat", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["target_id"], ["targets.id"], name=op.f("fk_workers_target_id_targets")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
    )
    op.create_table(
        "candidates",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("trace", sa.JSON(), nullable=False),
        sa.Column("trace_hash", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("lease_holder", sa.Integer(), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_candidates_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["lease_holder"],
            ["workers.id"],
            name=op.f("fk_candidates_lease_holder_workers"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_candidates")),
        sa.UniqueConstraint("job_id", "trace_hash", name=op.f("uq_candidates_job_id_trace_hash")),
    )
    op.create_index(
        op.f("ix_candidates_job_id_status"), "candidates", ["job_id", "status"], unique=False
    )
    op.create_table(
        "records",
        sa.Column("record_id", sa.String(length=36), nullable=False),
        sa.Column("workload_key", sa.String(length=64), nullable=False),
        sa.Column("target_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("candidate_id", sa.Integer(), nullable=True),
        sa.Column("trace", sa.JSON(), nullable=False),
        sa.Column("trace_hash", sa.String(length=64), nullable=False),
        sa.Column("run_times", sa.JSON(), nullable=False),
        sa.Column("median_ms", sa.Double(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("worker", sa.String(length=256), nullable=False),
        sa.Column("loomtune_version", sa.String(length=64), nullable=False),
        sa.Column("llvm_version", sa.String(length=64), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "(status = 'ok' AND median_ms IS NOT NULL) OR (status <> 'ok' AND median_ms IS NULL)",
            name=op.f("ck_records_median_iff_ok"),
        ),
        sa.CheckConstraint(
            "status IN ('ok', 'compile_error', 'runtime_error', 'timeout', 'wrong_result', 'crashed')",
            name=op.f("ck_records_status"),
        ),
        sa.ForeignKeyConstraint(
            ["candidate_id"],
            ["candidates.id"],
            name=op.f("fk_records_candidate_id_candidates"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_records_job_id_jobs"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["target_id"], ["targets.id"], name=op.f("fk_records_target_id_targets")
        ),
        sa.ForeignKeyConstraint(
            ["workload_key"], ["workloads.key"], name=op.f("fk_records_workload_key_workloads")
        ),
        sa.PrimaryKeyConstraint("record_id", name=op.f("pk_records")),
        sa.UniqueConstraint(
            "workload_key",
            "target_id",
            "trace_hash",
            name=op.f("uq_records_workload_key_target_id_trace_hash"),
        ),
    )
    op.create_index(
        "ix_records_best",
        "records",
        ["workload_key", "target_id", "status", "median_ms"],
        unique=False,
    )
    op.create_index("ix_records_training", "records", ["target_id", "measured_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_records_training", table_name="records")
    op.drop_index("ix_records_best", table_name="records")
    op.drop_table("records")
    op.drop_index(op.f("ix_candidates_job_id_status"), table_name="candidates")
    op.drop_table("candidates")
    op.drop_table("workers")
    op.drop_index(op.f("ix_jobs_owner_status"), table_name="jobs")
    op.drop_table("jobs")
    op.drop_table("cost_models")
    op.drop_index(op.f("ix_workloads_op"), table_name="workloads")
    op.drop_table("workloads")
    op.drop_table("targets")
    op.drop_table("api_tokens")
