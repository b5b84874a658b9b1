"""Reading the tuning database for the API: records of a workload or a job, the best, workloads.

Records come back as `tuner.database.TuningRecord`, the same object the tuner
and `loomtune db export` use, so the API speaks of measurements one way.
"""

from __future__ import annotations

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
) -> tuple[TuningRecord, float | None] | None:
    """The finalists' choice with its re-timed median, else the ok record with the lowest
    median and None (as `Database.best`); None when there is no ok record."""
    target_id = target_id_of(session, target)
    if target_id is None:
        return None
    record = best_record_of(session, workload_key, target_id)
    if record is None:
        return None
    final = final_of(session, workload_key, target_id, target)
    return record, (
        final.retimed_ms if final is not None and final.record_id == record.record_id else None
    )


def best_of_jobs(session: Session, job_ids: list[int]) -> dict[int, tuple[float, str]]:
    """job id -> (best median in ms, its record id), for the jobs that have an ok record."""
    if not job_ids:
        return {}
    best = (
        select(m.Record.job_id, func.min(m.Record.median_ms).label("best"))
        .where(m.Record.job_id.in_(job_ids), m.Record.status == "ok")
        .group_by(m.Record.job_id)
        .subquery()
    )
    rows = session.execute(
        select(m.Record.job_id, m.Record.median_ms, m.Record.record_id)
        .join(best, (best.c.job_id == m.Record.job_id) & (best.c.best == m.Record.median_ms))
        .where(m.Record.status == "ok")
        .order_by(m.Record.job_id, m.Record.measured_at, m.Record.record_id)
    ).all()
    out: dict[int, tuple[float, str]] = {}
    for job_id, median, record_id in rows:
        out.setdefault(job_id, (median, record_id))
    return out


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
