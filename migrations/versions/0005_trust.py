"""Results are evidence: a record's worker identity, standing and trusted time; further
observations of a trace; confirmation candidates; quarantined workers; the admin token
from the environment (rotated when the variable changes).

Records already stored by remote workers (their candidate is set) start unconfirmed;
every other record is local (trusted as measured).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STANDING = "standing IN ('local', 'unconfirmed', 'confirmed', 'refuted', 'quarantined', 'invalid')"


def upgrade() -> None:
    with op.batch_alter_table("records") as batch:
        batch.add_column(sa.Column("worker_id", sa.Integer(), nullable=True))
        batch.add_column(
            sa.Column("standing", sa.String(length=16), server_default="local", nullable=False)
        )
        batch.add_column(sa.Column("trusted_ms", sa.Double(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_records_worker_id_workers"),
            "workers",
            ["worker_id"],
            ["id"],
            ondelete="SET NULL",
        )
        batch.create_check_constraint(op.f("ck_records_standing"), _STANDING)
    op.execute(
        "UPDATE records SET standing = CASE WHEN candidate_id IS NULL THEN 'local' ELSE 'unconfirmed' END"
    )
    op.execute("UPDATE records SET trusted_ms = median_ms WHERE standing = 'local'")
    op.create_index(
        "ix_records_trusted", "records", ["workload_key", "target_id", "trusted_ms"], unique=False
    )
    op.create_index(op.f("ix_records_worker_id"), "records", ["worker_id"], unique=False)
    with op.batch_alter_table("candidates") as batch:
        batch.add_column(
            sa.Column(
                "confirms", sa.String(length=36), server_default=sa.text("''"), nullable=False
            )
        )
        batch.add_column(sa.Column("exclude_worker", sa.Integer(), nullable=True))
        batch.drop_constraint(op.f("uq_candidates_job_id_trace_hash"), type_="unique")
        batch.create_unique_constraint(
            op.f("uq_candidates_job_id_trace_hash_confirms"), ["job_id", "trace_hash", "confirms"]
        )
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("strikes", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(sa.Column("quarantined_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("quarantine_reason", sa.Text(), nullable=True))
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(
            sa.Column("from_env", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    # The first admin token is the one LOOMTUNE_ADMIN_TOKEN stored.
    op.execute(
        "UPDATE api_tokens SET from_env = TRUE WHERE id = (SELECT min(id) FROM api_tokens "
        "WHERE role = 'admin' AND owner = 'admin')"
    )
    op.create_table(
        "observations",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("record_id", sa.String(length=36), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("worker_id", sa.Integer(), nullable=True),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("median_ms", sa.Double(), nullable=True),
        sa.Column("run_times", sa.JSON(), nullable=False),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["record_id"],
            ["records.record_id"],
            name=op.f("fk_observations_record_id_records"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["worker_id"],
            ["workers.id"],
            name=op.f("fk_observations_worker_id_workers"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_observations_job_id_jobs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_observations")),
    )
    op.create_index(op.f("ix_observations_record_id"), "observations", ["record_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_observations_record_id"), table_name="observations")
    op.drop_table("observations")
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("from_env")
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("quarantine_reason")
        batch.drop_column("quarantined_at")
        batch.drop_column("strikes")
    op.execute("DELETE FROM candidates WHERE confirms <> ''")
    with op.batch_alter_table("candidates") as batch:
        batch.drop_constraint(op.f("uq_candidates_job_id_trace_hash_confirms"), type_="unique")
        batch.create_unique_constraint(
            op.f("uq_candidates_job_id_trace_hash"), ["job_id", "trace_hash"]
        )
        batch.drop_column("exclude_worker")
        batch.drop_column("confirms")
    op.drop_index(op.f("ix_records_worker_id"), table_name="records")
    op.drop_index("ix_records_trusted", table_name="records")
    with op.batch_alter_table("records") as batch:
        batch.drop_constraint(op.f("ck_records_standing"), type_="check")
        batch.drop_constraint(op.f("fk_records_worker_id_workers"), type_="foreignkey")
        batch.drop_column("trusted_ms")
        batch.drop_column("standing")
        batch.drop_column("worker_id")
