"""/v1/workers: register and list workers; heartbeat, lease, report results and release (workers)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path

from service.coordinator import leases as L
from service.coordinator import trust
from service.coordinator.deps import Admin, State, WorkerRole
from service.coordinator.errors import Conflict
from service.coordinator.responses import COMMON, ErrorOut, responses
from service.coordinator.routes.query import known_query
from service.coordinator.schemas import (
    MAX_ID,
    HeartbeatOut,
    LeasedCandidate,
    LeaseOut,
    LeaseRequest,
    ReleaseIn,
    ReleaseOut,
    ResultsIn,
    ResultsOut,
    WorkerList,
    WorkerOut,
    WorkerRegister,
    WorkerRegistered,
)
from service.db.session import as_utc, as_utc_or_none

router = APIRouter(
    prefix="/v1/workers",
    tags=["workers"],
    responses=responses(*COMMON),
    dependencies=[Depends(known_query)],
)

WorkerId = Annotated[int, Path(ge=1, le=MAX_ID, description="the worker's id (from registration)")]


def worker_out(view: L.WorkerView) -> WorkerOut:
    w = view.worker
    return WorkerOut(
        id=w.id,
        name=w.name,
        owner=w.owner,
        target=view.target,
        registered_at=as_utc(w.registered_at),
        last_heartbeat=as_utc(w.last_heartbeat),
        alive=view.alive,
        leases=view.leases,
        strikes=w.strikes or 0,
        quarantined_at=as_utc_or_none(w.quarantined_at),
        quarantine_reason=w.quarantine_reason,
    )


@router.post("", status_code=201, response_model=WorkerRegistered, summary="Register a worker")
def register(body: WorkerRegister, caller: WorkerRole, state: State) -> WorkerRegistered:
    """A worker names its CPU (the target it measures for); it gets an id and its timings."""
    s = state.settings
    with state.sessions.write() as session:
        worker, target = L.register_worker(session, caller, body.name, body.target)
    view = L.WorkerView(worker, target, True, 0)
    return WorkerRegistered(
        **worker_out(view).model_dump(),
        lease_seconds=s.lease_seconds,
        heartbeat_seconds=s.heartbeat_seconds,
    )


@router.get("", response_model=WorkerList, summary="List workers")
def list_workers(caller: Admin, state: State) -> WorkerList:
    with state.sessions.read() as session:
        views = L.list_workers(session, alive_seconds=state.settings.alive_seconds)
    return WorkerList(workers=[worker_out(v) for v in views])


@router.post(
    "/{worker_id}/heartbeat",
    response_model=HeartbeatOut,
    summary="Stay alive",
    responses=responses(404),
)
def heartbeat(worker_id: WorkerId, caller: WorkerRole, state: State) -> HeartbeatOut:
    """Extends every lease the worker still holds by LOOMTUNE_LEASE_SECONDS from now."""
    s = state.settings
    with state.sessions.write() as session:
        worker = L.touch_worker(session, worker_id, caller)
        held, until = L.heartbeat(session, worker, s.lease_seconds)
    return HeartbeatOut(
        worker_id=worker_id,
        leases_extended=len(held),
        held=held,
        lease_expires_at=until,
        lease_seconds=s.lease_seconds,
        heartbeat_seconds=s.heartbeat_seconds,
    )


@router.post(
    "/{worker_id}/lease",
    response_model=LeaseOut,
    summary="Lease a batch of candidates",
    responses=responses(404),
)
def lease(
    worker_id: WorkerId, caller: WorkerRole, state: State, body: LeaseRequest | None = None
) -> LeaseOut:
    """Up to `max_candidates` candidates of the worker's target (none: an empty list)."""
    s = state.settings
    request = body or LeaseRequest()
    with state.sessions.write() as session:
        worker = L.touch_worker(session, worker_id, caller)
        leased = L.lease(session, worker, request.max_candidates, s.lease_seconds)
    state.metrics.leased.inc(len(leased))
    return LeaseOut(
        candidates=[LeasedCandidate(**vars(c)) for c in leased],
        lease_seconds=s.lease_seconds,
        heartbeat_seconds=s.heartbeat_seconds,
    )


@router.post(
    "/{worker_id}/results",
    response_model=ResultsOut,
    summary="Report results",
    responses={
        **responses(404),
        409: {
            "model": ErrorOut,
            "description": "a result for a lease the worker no longer holds; nothing was stored",
        },
    },
)
def results(worker_id: WorkerId, body: ResultsIn, caller: WorkerRole, state: State) -> ResultsOut:
    """Idempotent: a result posted again with the same record_id is stored once."""
    items = [
        L.Result(
            candidate_id=r.candidate_id,
            record_id=str(r.record_id),
            status=r.status,
            run_times_ms=tuple(r.run_times_ms),
            message=r.message,
            loomtune_version=r.loomtune_version,
            llvm_version=r.llvm_version,
        )
        for r in body.results
    ]
    try:
        with state.sessions.write() as session:
            worker = L.touch_worker(session, worker_id, caller)
            accepted = L.submit_results(session, worker, items)
    except Conflict:
        state.metrics.rejected_results.inc()
        raise
    except L.Implausible as e:
        state.metrics.rejected_results.inc()
        with state.sessions.write() as session:
            trust.strike(session, e.worker_id, e.msg)
        raise
    by_id = {r.candidate_id: r.status for r in items}
    state.metrics.accepted([by_id[c] for c in accepted.accepted])
    return ResultsOut(accepted=accepted.accepted, duplicates=accepted.duplicates)


@router.post(
    "/{worker_id}/release",
    response_model=ReleaseOut,
    summary="Hand leases back",
    responses=responses(404),
)
def release(
    worker_id: WorkerId, caller: WorkerRole, state: State, body: ReleaseIn | None = None
) -> ReleaseOut:
    """The named leases (default: all the worker holds) go back to pending at once."""
    ids = body.candidate_ids if body is not None else None
    with state.sessions.write() as session:
        worker = L.touch_worker(session, worker_id, caller)
        released = L.release(session, worker, ids)
    return ReleaseOut(released=released)
