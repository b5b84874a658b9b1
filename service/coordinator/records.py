"""Reading the tuning database for the API: records of a workload or a job, the best, workloads.

Records come back as `tuner.database.TuningRecord`, the same object the tuner
and `loomtune db export` use, so the API speaks of measurements one way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db import models as m
from service.db.store import best_record_of, fetch_records, final_of, select_records
from tuner.database import TuningRecord


def target_id_of(session: Session, canonical: str) -> int | None:
    return session.scalar(select(m.Target.id).where(m.Target.canonical == canonical))


def records_of_workload(
    session: Session,
    workload_key: str,
    *,
    target: str | None = None,
    status: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[TuningRecord]:
    """A workload's records, fastest ok records first, then failures, oldest first among equals."""
    query = select_records().where(m.Record.workload_key == workload_key)
    if target is not None:
        query = query.where(m.Target.canonical == target)
    if status is not None:
        query = query.where(m.Record.status == status)
    query = query.order_by(
        m.Record.median_ms.is_(None), m.Record.median_ms, m.Record.measured_at, m.Record.record_id
    )
    return fetch_records(session, query.limit(limit).offset(offset))


def records_of_job(session: Session, job_id: int) -> list[TuningRecord]:
    """A job's records in the order they were measured: its tuning curve."""
    query = (
        select_records()
        .where(m.Record.job_id == job_id)
        .order_by(m.Record.measured_at, m.Record.record_id)
    )
    return fetch_records(session, query)


def record_by_id(session: Session, record_id: str) -> TuningRecord | None:
    found = fetch_records(session, select_records().where(m.Record.record_id == record_id))
    return found[0] if found else None


def record_of_trace(
    session: Session, workload_key: str, target_id: int, trace_hash: str
) -> TuningRecord | None:
    found = fetch_records(
        session,
        select_records().where(
            m.Record.workload_key == workload_key,
            m.Record.target_id == target_id,
            m.Record.trace_hash == trace_hash,
        ),
    )
    return found[0] if found else None


def best_record(
    session: Session, workload_key: str, target: str
) -> tuple[TuningRecord, float | None, bool] | None:
    """(record, re-timed median, confirmed): the finalists' choice or the lowest trusted time
    (as `Database.best`); when no record is trusted, the fastest unconfirmed one, flagged
    (confirmed False); None when there is no ok record that may be served."""
    target_id = target_id_of(session, target)
    if target_id is None:
        return None
    record = best_record_of(session, workload_key, target_id)
    confirmed = record is not None
    if record is None:
        found = fetch_records(
            session,
            select_records()
            .where(
                m.Record.workload_key == workload_key,
                m.Record.target_id == target_id,
                m.Record.status == "ok",
                m.Record.standing == "unconfirmed",
            )
            .order_by(m.Record.median_ms, m.Record.measured_at, m.Record.record_id)
            .limit(1),
        )
        if not found:
            return None
        record = found[0]
    final = final_of(session, workload_key, target_id, target)
    retimed = (
        final.retimed_ms if final is not None and final.record_id == record.record_id else None
    )
    return record, retimed, confirmed


@dataclass(frozen=True)
class Standing:
    """What the trust design knows of a record (docs/architecture.md "Trust")."""

    worker_id: int | None
    standing: str
    trusted_ms: float | None


def standings(session: Session, record_ids: list[str]) -> dict[str, Standing]:
    if not record_ids:
        return {}
    rows = session.execute(
        select(
            m.Record.record_id, m.Record.worker_id, m.Record.standing, m.Record.trusted_ms
        ).where(m.Record.record_id.in_(set(record_ids)))
    )
    return {rid: Standing(wid, standing, trusted) for rid, wid, standing, trusted in rows}


def _lowest_per_job(
    session: Session, job_ids: list[int], column: Any, *where: Any
) -> dict[int, tuple[float, str]]:
    lowest = (
        select(m.Record.job_id, func.min(column).label("best"))
        .where(m.Record.job_id.in_(job_ids), *where)
        .group_by(m.Record.job_id)
        .subquery()
    )
    rows = session.execute(
        select(m.Record.job_id, column, m.Record.record_id)
        .join(lowest, (lowest.c.job_id == m.Record.job_id) & (lowest.c.best == column))
        .where(*where)
        .order_by(m.Record.job_id, m.Record.measured_at, m.Record.record_id)
    ).all()
    out: dict[int, tuple[float, str]] = {}
    for job_id, value, record_id in rows:
        out.setdefault(job_id, (value, record_id))
    return out


def best_of_jobs(session: Session, job_ids: list[int]) -> dict[int, tuple[float, str]]:
    """job id -> (best time in ms, its record id): the lowest trusted time among the job's
    records, else (no record of it trusted yet) the lowest unconfirmed median."""
    if not job_ids:
        return {}
    trusted = _lowest_per_job(
        session, job_ids, m.Record.trusted_ms, m.Record.trusted_ms.is_not(None)
    )
    missing = [j for j in job_ids if j not in trusted]
    if missing:
        trusted.update(
            _lowest_per_job(
                session,
                missing,
                m.Record.median_ms,
                m.Record.status == "ok",
                m.Record.standing == "unconfirmed",
            )
        )
    return trusted


def list_workloads(
    session: Session, *, op: str | None = None, limit: int = 100, offset: int = 0
) -> list[tuple[m.Workload, int]]:
    """Workloads the database knows (newest first) with how many records each has."""
    counts = (
        select(m.Record.workload_key, func.count().label("n"))
        .group_by(m.Record.workload_key)
        .subquery()
    )
    query = (
        select(m.Workload, func.coalesce(counts.c.n, 0))
        .outerjoin(counts, counts.c.workload_key == m.Workload.key)
        .order_by(m.Workload.created_at.desc(), m.Workload.key)
    )
    if op is not None:
        query = query.where(m.Workload.op == op)
    return [(wl, int(n)) for wl, n in session.execute(query.limit(limit).offset(offset)).all()]


def workload_spec(session: Session, workload: m.Workload) -> dict[str, Any]:
    """The workload as `Task.spec()` spells it, for a trace file `loomtune apply` reads.

    A job's submitted spec when there is one; else the library operator when its
    parameters rebuild this very workload key; else the stored definition.
    """
    spec = session.scalar(
        select(m.Job.workload_spec)
        .where(m.Job.workload_key == workload.key, m.Job.workload_spec.is_not(None))
        .limit(1)
    )
    if isinstance(spec, dict):
        return spec
    from ir.errors import LoomtuneError
    from ir.library import OPS
    from ir.task import library_task

    if workload.op in OPS:
        try:
            if library_task(workload.op, workload.params).key == workload.key:
                return {"op": workload.op, "params": dict(workload.params)}
        except LoomtuneError:
            pass
    return {"definition": workload.definition, "params": dict(workload.params)}
