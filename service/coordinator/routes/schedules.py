"""/v1/schedules/best: the best-known schedule of a workload on a target, as an apply-able trace file."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from sqlalchemy import select

from service.coordinator import jobs as J
from service.coordinator.deps import Client, State
from service.coordinator.errors import Invalid, NotFound
from service.coordinator.records import best_record, standings, workload_spec
from service.coordinator.responses import COMMON, responses
from service.coordinator.schemas import BestOut, TraceFileOut
from service.coordinator.targets import resolve_target
from service.db import models as m

router = APIRouter(prefix="/v1/schedules", tags=["schedules"], responses=responses(*COMMON))

_OWN_QUERY = {"workload_key", "target", "op"}


@router.get(
    "/best", response_model=BestOut, summary="The best-known schedule", responses=responses(404)
)
def best_schedule(
    request: Request,
    caller: Client,
    state: State,
    workload_key: Annotated[
        str | None, Query(pattern=r"^[0-9a-f]{64}$", description="the workload's key")
    ] = None,
    op: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=128,
            pattern=r"^[^\x00-\x1f\x7f]*$",
            description="a library operator; its parameters as further query parameters (m=...&n=...)",
        ),
    ] = None,
    target: Annotated[
        str,
        Query(
            min_length=1,
            max_length=2048,
            pattern=r"^[^\x00-\x1f\x7f]*$",
            description="'host' (the workers' CPU) or a target string",
        ),
    ] = "host",
) -> BestOut:
    """The fastest correct record of a workload (`workload_key=`, or `op=` and its parameters) on a target:
    the one a tuning run's finalists chose when re-timed together, else the lowest trusted time
    (a local measurement, or one a second worker confirmed); only when none is trusted, the
    fastest unconfirmed record, with `confirmed: false` (docs/architecture.md "Trust")."""
    from tuner.trace.file import FILE_FORMAT

    params = {k: v for k, v in request.query_params.items() if k not in _OWN_QUERY}
    if (workload_key is None) == (op is None):
        raise Invalid(
            ("query", "workload_key"),
            "give exactly one of workload_key and op (with its parameters)",
        )
    if workload_key is not None and params:
        raise Invalid(
            ("query", next(iter(params))), "parameters go with op=, not with workload_key="
        )
    with state.sessions.read() as session:
        if op is not None:
            task = J.resolve_task({"op": op, "params": params}, loc=("query",))
            key = task.key
        else:
            assert workload_key is not None
            key = workload_key
        workload = session.scalar(select(m.Workload).where(m.Workload.key == key))
        if workload is None:
            raise NotFound(f"workload {key} is not in the database")
        canonical = resolve_target(
            session, target, alive_seconds=state.settings.alive_seconds, loc=("query", "target")
        )
        found = best_record(session, key, canonical)
        if found is None:
            raise NotFound(f"no correct record of workload {key} on {canonical}")
        record, retimed_ms, confirmed = found
        known = standings(session, [record.record_id])[record.record_id]
        spec = workload_spec(session, workload)
    assert record.median_ms is not None
    return BestOut(
        workload_key=key,
        op=record.op,
        params=dict(record.params),
        target=record.target,
        record_id=record.record_id,
        measured_at=record.measured_at,
        latency_ms=record.median_ms,
        retimed_ms=retimed_ms,
        run_times_ms=list(record.run_times_ms),
        worker=record.worker,
        worker_id=known.worker_id,
        standing=known.standing,  # type: ignore[arg-type]
        confirmed=confirmed,
        trusted_ms=known.trusted_ms,
        trace=dict(record.trace),
        trace_file=TraceFileOut(
            format=FILE_FORMAT, workload=spec, target=record.target, trace=dict(record.trace)
        ),
    )
