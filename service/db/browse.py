"""Reading and pruning what the tuning database holds: `loomtune workloads` and `db prune`.

Kept apart from the tuner's `Database` protocol (store.py): these are the
user's views of the whole database, not what a search asks while it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select

from service.db import models as m
from service.db.session import Sessions
from service.db.store import SQLDatabase, best_record_of


@dataclass
class WorkloadSummary:
    """One workload the database knows, with its records and best time per target."""

    key: str
    op: str
    params: dict[str, Any]
    records: int
    best_ms: dict[str, float | None] = field(default_factory=dict)
    """Per canonical target: the best record's median (what `loomtune best` serves), or None."""


def workload_summaries(database: SQLDatabase) -> list[WorkloadSummary]:
    """Every workload with records, by operator then key."""
    counts = (
        select(m.Record.workload_key, m.Record.target_id, m.Target.canonical, func.count())
        .join(m.Target, m.Target.id == m.Record.target_id)
        .group_by(m.Record.workload_key, m.Record.target_id, m.Target.canonical)
    )
    with Sessions(database.engine).read() as session:
        workloads = {
            w.key: WorkloadSummary(w.key, w.op, dict(w.params), 0)
            for w in session.scalars(select(m.Workload))
        }
        for key, target_id, canonical, n in session.execute(counts):
            summary = workloads[key]
            summary.records += int(n)
            best = best_record_of(session, key, target_id)
            summary.best_ms[canonical] = best.median_ms if best is not None else None
    return sorted((w for w in workloads.values() if w.records), key=lambda w: (w.op, w.key))


@dataclass
class PrunePlan:
    """What `db prune` would delete, and the matching records it keeps (and why)."""

    delete: list[str]
    kept: dict[str, str]
    """record id -> why it is kept."""


def plan_prune(database: SQLDatabase, *, before: datetime | None, worker: str | None) -> PrunePlan:
    """The records measured before `before` and/or by `worker`, less those still in use:
    a workload's best on a target (the finalists' choice, else the lowest trusted time,
    which `best`, `export` and jobs serve) and each job's fastest correct record."""
    query = select(
        m.Record.record_id,
        m.Record.workload_key,
        m.Record.target_id,
        m.Record.job_id,
        m.Record.median_ms,
    )
    if before is not None:
        query = query.where(m.Record.measured_at < before)
    if worker is not None:
        query = query.where(m.Record.worker == worker)
    kept: dict[str, str] = {}
    with Sessions(database.engine).read() as session:
        rows = session.execute(query).all()
        pairs = {(r.workload_key, r.target_id) for r in rows}
        for key, target_id in pairs:
            best = best_record_of(session, key, target_id)
            if best is not None:
                kept[best.record_id] = "the workload's best on its target"
        jobs = {r.job_id for r in rows if r.job_id is not None}
        for job_id in jobs:
            fastest = session.scalar(
                select(m.Record.record_id)
                .where(m.Record.job_id == job_id, m.Record.status == "ok")
                .order_by(m.Record.median_ms, m.Record.measured_at, m.Record.record_id)
                .limit(1)
            )
            if fastest is not None:
                kept.setdefault(fastest, f"job {job_id}'s best")
    matched = [r.record_id for r in rows]
    return PrunePlan(
        [i for i in matched if i not in kept], {i: kept[i] for i in matched if i in kept}
    )


def delete_records(database: SQLDatabase, record_ids: list[str]) -> int:
    """Delete these records and their observations in one transaction; how many went."""
    if not record_ids:
        return 0
    deleted = 0
    with Sessions(database.engine).write() as session:
        for start in range(0, len(record_ids), 500):  # stay under SQL parameter limits
            chunk = record_ids[start : start + 500]
            session.execute(delete(m.Observation).where(m.Observation.record_id.in_(chunk)))
            result = session.execute(delete(m.Record).where(m.Record.record_id.in_(chunk)))
            deleted += result.rowcount or 0
    return deleted
