"""/v1/workloads: what the tuning database knows (every client sees all of it)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from sqlalchemy import select

from service.coordinator.deps import Client, State
from service.coordinator.errors import NotFound
from service.coordinator.records import list_workloads, records_of_workload, standings
from service.coordinator.responses import COMMON, responses
from service.coordinator.routes.query import known_query
from service.coordinator.schemas import (
    MAX_ID,
    RecordList,
    RecordOut,
    RecordStatus,
    WorkloadList,
    WorkloadOut,
)
from service.coordinator.targets import resolve_target
from service.db import models as m
from service.db.session import as_utc

router = APIRouter(
    prefix="/v1/workloads",
    tags=["workloads"],
    responses=responses(*COMMON),
    dependencies=[Depends(known_query)],
)


@router.get("", response_model=WorkloadList, summary="Workloads in the database")
def workloads(
    caller: Client,
    state: State,
    op: Annotated[str | None, Query(max_length=128, pattern=r"^[^\x00-\x1f\x7f]*$")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> WorkloadList:
    with state.sessions.read() as session:
        rows = list_workloads(session, op=op, limit=limit, offset=offset)
    return WorkloadList(
        workloads=[
            WorkloadOut(
                key=w.key,
                op=w.op,
                params=dict(w.params),
                records=n,
                created_at=as_utc(w.created_at),
            )
            for w, n in rows
        ]
    )


@router.get(
    "/{key}/records",
    response_model=RecordList,
    summary="A workload's records",
    responses=responses(404),
)
def workload_records(
    key: Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="the workload's key")],
    caller: Client,
    state: State,
    target: Annotated[
        str | None, Query(min_length=1, max_length=2048, pattern=r"^[^\x00-\x1f\x7f]*$")
    ] = None,
    status: RecordStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> RecordList:
    """Fastest correct records first, then failures."""
    with state.sessions.read() as session:
        if session.scalar(select(m.Workload.key).where(m.Workload.key == key)) is None:
            raise NotFound(f"workload {key} is not in the database")
        canonical = (
            None
            if target is None
            else resolve_target(
                session, target, alive_seconds=state.settings.alive_seconds, loc=("query", "target")
            )
        )
        records = records_of_workload(
            session, key, target=canonical, status=status, limit=limit, offset=offset
        )
        known = standings(session, [r.record_id for r in records])
    return RecordList(
        workload_key=key,
        records=[
            RecordOut(
                record_id=r.record_id,
                workload_key=r.workload_key,
                target=r.target,
                job_id=r.job_id,
                trace=dict(r.trace),
                trace_hash=r.trace_hash,
                run_times_ms=list(r.run_times_ms),
                median_ms=r.median_ms,
                status=r.status,  # type: ignore[arg-type]
                message=r.message,
                worker=r.worker,
                worker_id=known[r.record_id].worker_id,
                standing=known[r.record_id].standing,  # type: ignore[arg-type]
                trusted_ms=known[r.record_id].trusted_ms,
                loomtune_version=r.loomtune_version,
                llvm_version=r.llvm_version,
                measured_at=r.measured_at,
            )
            for r in records
        ],
    )
