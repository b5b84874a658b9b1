"""/v1/jobs: submit, list, show, follow (history) and cancel tuning jobs (clients; admins see all)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from service.coordinator import jobs as J
from service.coordinator import model_jobs
from service.coordinator.deps import Client, State
from service.coordinator.errors import Invalid
from service.coordinator.responses import COMMON, responses
from service.coordinator.routes.query import known_query
from service.coordinator.schemas import (
    MAX_ID,
    HistoryPointOut,
    JobCreate,
    JobHistory,
    JobList,
    JobOut,
    JobStatus,
    ModelOut,
    ModelTaskOut,
    WorkloadRef,
)
from service.coordinator.targets import resolve_target

router = APIRouter(
    prefix="/v1/jobs",
    tags=["jobs"],
    responses=responses(*COMMON),
    dependencies=[Depends(known_query)],
)

JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="the job's id")]


def _model_out(view: model_jobs.ModelView) -> ModelOut:
    return ModelOut(
        name=view.name,
        model_key=view.model_key,
        tasks=[
            ModelTaskOut(
                key=t.key,
                op=t.op,
                pattern=t.pattern,
                count=t.count,
                job_id=t.job_id,
                trials=t.trials_done,
                best_ms=t.best_ms,
                best_record_id=t.best_record_id,
                share=t.share,
            )
            for t in view.tasks
        ],
    )


def job_out(view: J.JobView) -> JobOut:
    job = view.job
    created, updated, finished = J.job_times(job)
    spec = job.workload_spec or {}
    workload = None
    if job.workload_key is not None:
        workload = WorkloadRef(
            key=job.workload_key, op=view.op, params=view.params, spec=spec or None
        )
    return JobOut(
        id=job.id,
        owner=job.owner,
        status=view.status,  # type: ignore[arg-type]
        workload=workload,
        model=_model_out(view.model) if view.model is not None else None,
        target=view.target,
        trials=job.budget,
        trials_done=view.trials_done,
        strategy=job.strategy,
        seed=job.seed,
        best_latency_ms=view.best_latency_ms,
        best_record_id=view.best_record_id,
        error=job.error,
        note=job.note,
        waiting_reason=view.waiting_reason,
        created_at=created,
        updated_at=updated,
        finished_at=finished,
    )


@router.post(
    "",
    status_code=201,
    response_model=JobOut,
    summary="Submit a tuning job",
    responses=responses(429),
)
def submit_job(body: JobCreate, caller: Client, state: State) -> JobOut:
    """Queue a job tuning a workload, or a model's distinct tasks under one budget, on a
    target; 422 names the field of any bad input. `host` before any worker registered is
    accepted: the job waits for the first worker (its `waiting_reason` says so)."""
    settings = state.settings
    if body.trials > settings.max_trials:
        raise Invalid(
            ("body", "trials"),
            f"a budget is at most {settings.max_trials} trials (LOOMTUNE_MAX_TRIALS), got {body.trials}",
        )
    strategy = J.resolve_strategy(body.strategy)
    task = J.resolve_task(body.workload.spec()) if body.workload is not None else None
    plan = model_jobs.plan_model(body.model) if task is None else None
    with state.sessions.write() as session:
        target = resolve_target(
            session, body.target, alive_seconds=settings.alive_seconds, defer_host=True
        )
        J.check_active_jobs(session, caller.owner, settings.max_active_jobs)
        kind = dict(
            owner=caller.owner, target=target, trials=body.trials, strategy=strategy, seed=body.seed
        )
        job = (
            J.create_job(session, task=task, **kind)  # type: ignore[arg-type]
            if task is not None
            else model_jobs.create_model_job(session, plan=plan, **kind)  # type: ignore[arg-type]
        )
        (view,) = J.job_views(session, [job], alive_seconds=settings.alive_seconds)
    return job_out(view)


@router.get("", response_model=JobList, summary="List jobs")
def list_jobs(
    caller: Client,
    state: State,
    status: JobStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> JobList:
    """The caller's jobs, newest first (an admin sees every owner's)."""
    with state.sessions.read() as session:
        jobs = J.list_jobs(session, caller, status=status, limit=limit, offset=offset)
        views = J.job_views(session, jobs, alive_seconds=state.settings.alive_seconds)
    return JobList(jobs=[job_out(v) for v in views])


@router.get("/{job_id}", response_model=JobOut, summary="Show a job", responses=responses(404))
def show_job(job_id: JobId, caller: Client, state: State) -> JobOut:
    with state.sessions.read() as session:
        job = J.get_job(session, job_id, caller)
        (view,) = J.job_views(session, [job], alive_seconds=state.settings.alive_seconds)
    return job_out(view)


@router.get(
    "/{job_id}/history",
    response_model=JobHistory,
    summary="A job's tuning curve",
    responses=responses(404),
)
def job_history(job_id: JobId, caller: Client, state: State) -> JobHistory:
    """One point per measurement of the job, in order, with the best so far (a model job's:
    its tasks' measurements, the best the sum over tasks of count × best)."""
    with state.sessions.read() as session:
        job = J.get_job(session, job_id, caller)
        if job.model is not None:
            points = model_jobs.model_history(session, job)
        else:
            points = J.job_history(session, job.id)
    return JobHistory(
        job_id=job.id,
        status=job.status,  # type: ignore[arg-type]
        trials=job.budget,
        trials_done=job.trials_done,
        points=[HistoryPointOut(**vars(p)) for p in points],
    )


@router.post(
    "/{job_id}/cancel",
    response_model=JobOut,
    summary="Cancel a job, keeping its records",
    responses=responses(404, 409),
)
def cancel_job(job_id: JobId, caller: Client, state: State) -> JobOut:
    with state.sessions.write() as session:
        job = J.cancel_job(session, job_id, caller)
        (view,) = J.job_views(session, [job], alive_seconds=state.settings.alive_seconds)
    return job_out(view)
