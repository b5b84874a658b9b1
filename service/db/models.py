"""SQLAlchemy 2.x models of the tuning database (DESIGN.md "Tuning database").

The migrations in `migrations/versions/` create exactly these tables; a test
compares the two (`alembic.autogenerate.compare_metadata`), so change both
together. Constraint names follow one naming convention so that migrations
can name (and later drop) every constraint on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy import false as sa_false
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

UTCDateTime = DateTime(timezone=True)
"""Every time is stored in UTC (SQLite reads it back naive; the store re-attaches UTC)."""


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Workload(Base):
    """What to compute: keyed by the structural hash of the naive program."""

    __tablename__ = "workloads"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    op: Mapped[str] = mapped_column(String(128), index=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Target(Base):
    """A machine to tune for, by its canonical target string."""

    __tablename__ = "targets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    canonical: Mapped[str] = mapped_column(String(2048), unique=True)
    cpu: Mapped[str] = mapped_column(String(128))
    features: Mapped[list[str]] = mapped_column(JSON)
    threads: Mapped[int] = mapped_column(Integer)


class Job(Base):
    """A coordinator's tuning job: a budget of trials for one workload on one target.

    `workload_spec` is the workload as submitted (`Task.spec()`), what workers and
    the job runner rebuild the task from. `runner` and `runner_expires_at` are the
    lease on the job itself: the one coordinator process driving it, until then.

    A model job has no workload (`workload_key` NULL) but `model` (name, key, distinct
    tasks); each task is a child job (`parent_id`) that its runner drives under the
    parent's budget. `note` is a succeeded job's remark, `error` a failure's reason.
    """

    __tablename__ = "jobs"
    __table_args__ = (Index(None, "owner", "status"), Index(None, "target_id", "status"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner: Mapped[str] = mapped_column(String(128))
    workload_key: Mapped[str | None] = mapped_column(ForeignKey("workloads.key"))
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id"))
    budget: Mapped[int] = mapped_column(Integer)
    strategy: Mapped[str] = mapped_column(String(32))
    seed: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    trials_done: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    workload_spec: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    runner: Mapped[str | None] = mapped_column(String(128))
    runner_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), index=True
    )
    model: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    note: Mapped[str | None] = mapped_column(Text)


class Candidate(Base):
    """A trace a job wants measured; leased to one worker at a time."""

    __tablename__ = "candidates"
    __table_args__ = (
        Index(None, "job_id", "status"),
        # Leasing walks the open candidates in id order, never the done ones.
        Index(
            "ix_candidates_open",
            "id",
            postgresql_where=text("status IN ('pending', 'leased')"),
            sqlite_where=text("status IN ('pending', 'leased')"),
        ),
        # A job measures a trace once, and confirms a record once.
        UniqueConstraint("job_id", "trace_hash", "confirms"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    trace: Mapped[dict[str, Any]] = mapped_column(JSON)
    trace_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    lease_holder: Mapped[int | None] = mapped_column(ForeignKey("workers.id", ondelete="SET NULL"))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    record_id: Mapped[str | None] = mapped_column(String(36))
    """The record id of the result that finished it: a repeated post of it is a no-op."""
    confirms: Mapped[str] = mapped_column(String(36), default="", server_default=text("''"))
    """A confirmation: the id of the record this re-times ('' for a tuning candidate)."""
    exclude_worker: Mapped[int | None] = mapped_column(Integer)
    """A worker that may not lease it: the one whose record it confirms."""


class Record(Base):
    """One measurement (`tuner.database.TuningRecord`)."""

    __tablename__ = "records"
    __table_args__ = (
        # best / top-k per (workload, target): an index range scan in median order.
        Index("ix_records_best", "workload_key", "target_id", "status", "median_ms"),
        # training data of a target, oldest first.
        Index("ix_records_training", "target_id", "measured_at"),
        # a job's records: its history and its best.
        Index(None, "job_id"),
        # the best confirmed record per (workload, target).
        Index("ix_records_trusted", "workload_key", "target_id", "trusted_ms"),
        Index(None, "worker_id"),
        # A trace counts as measured once per (workload, target), across jobs, runs and imports.
        UniqueConstraint("workload_key", "target_id", "trace_hash"),
        CheckConstraint(
            "status IN ('ok', 'compile_error', 'runtime_error', 'timeout', 'wrong_result', 'crashed')",
            name="status",
        ),
        CheckConstraint(
            "(status = 'ok' AND median_ms IS NOT NULL) OR (status <> 'ok' AND median_ms IS NULL)",
            name="median_iff_ok",
        ),
        CheckConstraint(
            "standing IN ('local', 'unconfirmed', 'confirmed', 'refuted', 'quarantined', 'invalid')",
            name="standing",
        ),
    )

    record_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    workload_key: Mapped[str] = mapped_column(ForeignKey("workloads.key"))
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    candidate_id: Mapped[int | None] = mapped_column(
        ForeignKey("candidates.id", ondelete="SET NULL")
    )
    trace: Mapped[dict[str, Any]] = mapped_column(JSON)
    trace_hash: Mapped[str] = mapped_column(String(64))
    run_times: Mapped[list[float]] = mapped_column(JSON)
    median_ms: Mapped[float | None] = mapped_column(Double)
    status: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text)
    worker: Mapped[str] = mapped_column(String(256))
    """A display label: the worker's name (a remote worker's identity is `worker_id`)."""
    loomtune_version: Mapped[str] = mapped_column(String(64))
    llvm_version: Mapped[str] = mapped_column(String(64))
    measured_at: Mapped[datetime] = mapped_column(UTCDateTime)
    worker_id: Mapped[int | None] = mapped_column(ForeignKey("workers.id", ondelete="SET NULL"))
    """The registered worker that posted it (issued by the coordinator); None: measured locally."""
    standing: Mapped[str] = mapped_column(String(16), default="local", server_default="local")
    """How far it is believed (docs/architecture.md "Trust"): local (this machine's own
    measurement), unconfirmed (one worker's word), confirmed, refuted, quarantined, invalid."""
    trusted_ms: Mapped[float | None] = mapped_column(Double)
    """The time `best` ranks by: the median for a local record, the slower of the two
    workers' medians for a confirmed one, None otherwise."""


class Observation(Base):
    """A further measurement of a stored record's trace: a confirmation, or a re-measurement
    that the uniqueness of (workload, target, trace) would otherwise drop."""

    __tablename__ = "observations"
    __table_args__ = (Index(None, "record_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    record_id: Mapped[str] = mapped_column(ForeignKey("records.record_id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    """'confirm' (asked for by the coordinator) or 'remeasure' (another job proposed it again)."""
    worker_id: Mapped[int | None] = mapped_column(ForeignKey("workers.id", ondelete="SET NULL"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(16))
    median_ms: Mapped[float | None] = mapped_column(Double)
    run_times: Mapped[list[float]] = mapped_column(JSON)
    measured_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Final(Base):
    """The record a tuning run's finalists chose for a workload on a target
    (`tuner.database.FinalChoice`): `best` prefers it to the lowest tuning median."""

    __tablename__ = "finals"
    __table_args__ = (CheckConstraint("retimed_ms > 0", name="retimed_positive"),)

    workload_key: Mapped[str] = mapped_column(ForeignKey("workloads.key"), primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id"), primary_key=True)
    record_id: Mapped[str] = mapped_column(ForeignKey("records.record_id", ondelete="CASCADE"))
    retimed_ms: Mapped[float] = mapped_column(Double)
    decided_at: Mapped[datetime] = mapped_column(UTCDateTime)


class CostModel(Base):
    """The latest trained cost model of a target (opaque bytes)."""

    __tablename__ = "cost_models"

    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id"), primary_key=True)
    model: Mapped[bytes] = mapped_column(LargeBinary)
    samples: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Worker(Base):
    """A registered measurement worker; alive while it heartbeats."""

    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    target_id: Mapped[int] = mapped_column(ForeignKey("targets.id"))
    name: Mapped[str] = mapped_column(String(256))
    owner: Mapped[str | None] = mapped_column(String(128))
    """The owner of the worker token that registered it: only that owner drives it."""
    registered_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_heartbeat: Mapped[datetime] = mapped_column(UTCDateTime)
    strikes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Results refused as physically implausible; at `QUARANTINE_STRIKES` it is quarantined."""
    quarantined_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    """Set when its results failed confirmation: no more leases, its unconfirmed records unserved."""
    quarantine_reason: Mapped[str | None] = mapped_column(Text)


class ApiToken(Base):
    """A bearer token; only a hash of the secret is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hashed_secret: Mapped[str] = mapped_column(String(128), unique=True)
    role: Mapped[str] = mapped_column(String(16))
    owner: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    from_env: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())
    """The LOOMTUNE_ADMIN_TOKEN token: a changed variable revokes it at the next start."""
