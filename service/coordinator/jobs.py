"""Tuning jobs in the database: what the REST API does to them, and the seam the job runner uses.

A job is queued when submitted; a job runner (a coordinator process) claims it
with a lease on the job itself, writes the candidates the search proposes,
waits for workers' results and finishes it:

    queued -> running -> succeeded | failed | cancelled     (cancelled also from queued)

Every function takes the caller's `Session`, inside `Sessions.write()` when it
changes anything, so the caller decides what commits together. Row locks go
in one order everywhere, worker -> jobs -> candidates (see `service.coordinator.leases`):
lock a job before touching its candidates.

The job runner's seam (it wraps `tuner.search.loop.tune_loop` with a `Runner` over these):

- `claim_job(session, runner, lease_seconds)`: the oldest queued job, or a running
  one whose runner's lease expired (a coordinator died: resume it), now leased
  to `runner`;
- `renew_job(session, job_id, runner, lease_seconds)`: keep driving it; None when the
  job was cancelled or another runner holds it (stop);
- `job_task(job)`, `job_target(session, job)`: the task and canonical target to tune;
- `add_candidates(session, job_id, traces)`: write candidates for workers to lease;
- `candidate_results(session, candidate_ids)`: the records of those that got a result;
- `job_records(session, job_id)`: everything the job measured (to rebuild the search after a restart);
- `job_progress(session, job_id)`: trials done (counted as results arrive), best, outstanding;
- `finish_job(session, job_id, runner, status, error=None)`: succeeded / failed / cancelled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select, true, update
from sqlalchemy.orm import Session

from service.coordinator.errors import Conflict, Forbidden, Invalid, NotFound, TooMany
from service.coordinator.records import best_of_jobs, record_by_id, record_of_trace, records_of_job
from service.coordinator.targets import bind_host_jobs, host_waiting_reason, target_id
from service.coordinator.tokens import Caller
from service.db import models as m
from service.db.session import as_utc, as_utc_or_none
from service.db.store import dialect_insert
from tuner.database import TuningRecord, utc_now

JOB_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
FINISHED = ("succeeded", "failed", "cancelled")
CANDIDATE_STATUSES = ("pending", "leased", "done", "cancelled")

MAX_OP_NAME = 128

# -- validating a submission --------------------------------------------------------------


def resolve_task(spec: Mapping[str, Any], loc: tuple[str, ...] = ("body", "workload")) -> Any:
    """The `ir.task.Task` of a workload spec; every refusal is a 422 naming the field."""
    from ir.errors import DefinitionError, LoomtuneError
    from ir.task import task_from_spec

    def where() -> tuple[str, ...]:
        if "definition" in spec and spec.get("definition") is not None:
            return (*loc, "definition")
        return (*loc, "op")

    try:
        task = task_from_spec(spec)
    except DefinitionError as e:
        raise Invalid((*loc, "definition"), str(e)) from None
    except LoomtuneError as e:
        text = str(e)
        field = (
            where() if "unknown operator" in text or "a workload is" in text else (*loc, "params")
        )
        raise Invalid(field, text) from None
    except RecursionError:
        raise Invalid(where(), "the workload is nested too deeply") from None
    if len(task.op) > MAX_OP_NAME:
        raise Invalid(where(), f"the workload's name is longer than {MAX_OP_NAME} characters")
    if task.is_custom:
        from ir.bounds import out_of_bounds_reads

        bad = out_of_bounds_reads(task.workload)
        if bad:
            raise Invalid((*loc, "definition", "computes", bad[0].compute), str(bad[0]))
    return task


def known_strategies() -> tuple[list[str], str]:
    """The strategies the tuner registers, and the default (evolutionary once it exists)."""
    from tuner.search.strategy import STRATEGIES, default_strategy

    default = default_strategy()  # imports the strategy modules, which register themselves
    return sorted(STRATEGIES), default


def resolve_strategy(name: str | None, loc: tuple[str, ...] = ("body", "strategy")) -> str:
    known, default = known_strategies()
    if name is None:
        return default
    if name not in known:
        raise Invalid(loc, f"unknown strategy {name!r}; known: {', '.join(known)}")
    return name


def commit_workload(session: Session, task: Any) -> None:
    session.execute(
        dialect_insert(session, m.Workload)
        .values(
            key=task.key,
            op=task.op,
            params=dict(task.params),
            definition=task.to_definition(),
            created_at=utc_now(),
        )
        .on_conflict_do_nothing()
    )


# -- the API's side -----------------------------------------------------------------------


def check_active_jobs(session: Session, owner: str, limit: int) -> None:
    """429 when `owner` already has `limit` queued or running jobs (LOOMTUNE_MAX_ACTIVE_JOBS)."""
    active = session.scalar(
        select(func.count()).where(
            m.Job.owner == owner,
            m.Job.status.in_(("queued", "running")),
            m.Job.parent_id.is_(None),
        )
    )
    if int(active or 0) >= limit:
        raise TooMany(
            f"owner {owner} already has {active} queued or running jobs, the most allowed "
            f"(LOOMTUNE_MAX_ACTIVE_JOBS={limit}); wait for one to finish or cancel one"
        )


def create_job(
    session: Session,
    *,
    owner: str,
    task: Any,
    target: str,
    trials: int,
    strategy: str,
    seed: int | None,
) -> m.Job:
    """A queued job (the task and target already validated: `resolve_task`, `resolve_target`)."""
    commit_workload(session, task)
    now = utc_now()
    job = m.Job(
        owner=owner,
        workload_key=task.key,
        target_id=target_id(session, target),
        budget=trials,
        strategy=strategy,
        seed=seed,
        status="queued",
        trials_done=0,
        created_at=now,
        updated_at=now,
        workload_spec=task.spec(),
    )
    session.add(job)
    session.flush()
    return job


def get_job(session: Session, job_id: int, caller: Caller, *, lock: bool = False) -> m.Job:
    """A job the caller may see: 404 when there is none, 403 when it is another owner's."""
    query = select(m.Job).where(m.Job.id == job_id)
    job = session.scalar(query.with_for_update() if lock else query)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    if not caller.is_admin and job.owner != caller.owner:
        raise Forbidden(f"job {job_id} belongs to another owner")
    return job


def list_jobs(
    session: Session,
    caller: Caller,
    *,
    status: str | None = None,
    limit: int = 100,
    offset: int = 0,
) -> list[m.Job]:
    """The caller's jobs (an admin's: everyone's), newest first; a model job's tasks are
    shown with it, not listed apart."""
    query = select(m.Job).where(m.Job.parent_id.is_(None)).order_by(m.Job.id.desc())
    if not caller.is_admin:
        query = query.where(m.Job.owner == caller.owner)
    if status is not None:
        query = query.where(m.Job.status == status)
    return list(session.scalars(query.limit(limit).offset(offset)))


def cancel_job(session: Session, job_id: int, caller: Caller) -> m.Job:
    """Stop a job, keeping its records: its candidates not yet measured are withdrawn.

    A result for a withdrawn candidate is then refused (409) like any lease no
    longer held. Cancelling a cancelled job changes nothing; a job that already
    succeeded or failed cannot be cancelled (409).
    """
    job = get_job(session, job_id, caller, lock=True)
    if job.parent_id is not None:
        raise Conflict(f"job {job_id} is a task of model job {job.parent_id}; cancel that one")
    if job.status == "cancelled":
        return job
    if job.status in FINISHED:
        raise Conflict(f"job {job_id} already {job.status}")
    _end(session, job, "cancelled", job.error)
    return job


@dataclass(frozen=True)
class JobView:
    """A job as the API shows it: `status` is `waiting` while a queued or running job has no
    live worker of its target (the stored status stays queued or running)."""

    job: m.Job
    op: str
    params: dict[str, int]
    target: str
    best_latency_ms: float | None
    best_record_id: str | None
    waiting_reason: str | None
    status: str
    trials_done: int
    model: Any = None
    """A model job's `service.coordinator.model_jobs.ModelView` (None for a workload job)."""


def job_views(session: Session, jobs: Sequence[m.Job], *, alive_seconds: float) -> list[JobView]:
    """Jobs with their target, best so far and, while they wait, why."""
    if not jobs:
        return []
    targets = dict(
        session.execute(
            select(m.Target.id, m.Target.canonical).where(
                m.Target.id.in_({j.target_id for j in jobs})
            )
        ).all()
    )
    workloads = {
        key: (op, params)
        for key, op, params in session.execute(
            select(m.Workload.key, m.Workload.op, m.Workload.params).where(
                m.Workload.key.in_({j.workload_key for j in jobs if j.workload_key})
            )
        ).all()
    }
    best = best_of_jobs(session, [j.id for j in jobs])
    from service.coordinator.model_jobs import model_views  # it builds on this module

    models = model_views(session, [j for j in jobs if j.model is not None])
    alive_since = utc_now() - timedelta(seconds=alive_seconds)
    served = set(
        session.scalars(
            select(m.Worker.target_id).where(m.Worker.last_heartbeat >= alive_since).distinct()
        )
    )
    views = []
    for job in jobs:
        reason, status = None, job.status
        if job.status in ("queued", "running") and job.target_id not in served:
            status = "waiting"
            reason = host_waiting_reason(targets[job.target_id]) or (
                f"no live worker serves the target {targets[job.target_id]}"
            )
        elif job.status == "queued":
            reason = "queued: waiting for a coordinator's job runner to start it"
        median, record_id = best.get(job.id, (None, None))
        model = models.get(job.id)
        if model is not None:
            op, params, trials_done = "model", {}, model.trials_done
            median, record_id = model.latency_ms, None
        else:
            (op, params), trials_done = workloads[job.workload_key], job.trials_done
        views.append(
            JobView(
                job,
                op,
                dict(params),
                targets[job.target_id],
                median,
                record_id,
                reason,
                status,
                trials_done,
                model,
            )
        )
    return views


@dataclass(frozen=True)
class HistoryPoint:
    trial: int
    record_id: str
    status: str
    latency_ms: float | None
    best_ms: float | None
    measured_at: datetime


def job_history(session: Session, job_id: int) -> list[HistoryPoint]:
    """One point per record of the job, in measurement order, with the best so far."""
    points = []
    best: float | None = None
    for i, r in enumerate(records_of_job(session, job_id), start=1):
        if r.median_ms is not None and (best is None or r.median_ms < best):
            best = r.median_ms
        points.append(HistoryPoint(i, r.record_id, r.status, r.median_ms, best, r.measured_at))
    return points


# -- the job runner's seam ----------------------------------------------------------------


def claim_job(
    session: Session, runner: str, lease_seconds: float, *, alive_seconds: float | None = None
) -> m.Job | None:
    """Lease the oldest job no live runner drives to `runner` (a name unique per process).

    That is a queued job, or a running one whose runner's lease expired: its
    coordinator died, and this one resumes it (rebuilding the search from
    `job_records`). On PostgreSQL `SKIP LOCKED` lets coordinators claim at once,
    each job once. Renew the lease (`renew_job`) well within `lease_seconds`.

    With `alive_seconds`, only a job whose target a live worker in good
    standing serves: a job nobody can measure waits, queued, holding nothing.
    """
    now = utc_now()
    served: Any = true()
    if alive_seconds is not None:
        bind_host_jobs(session, alive_seconds=alive_seconds)
        served = (
            select(m.Worker.id)
            .where(
                m.Worker.target_id == m.Job.target_id,
                m.Worker.last_heartbeat >= now - timedelta(seconds=alive_seconds),
                m.Worker.quarantined_at.is_(None),
            )
            .exists()
        )
    query = (
        select(m.Job)
        .where(
            or_(
                m.Job.status == "queued",
                and_(
                    m.Job.status == "running",
                    or_(m.Job.runner_expires_at.is_(None), m.Job.runner_expires_at < now),
                ),
            ),
            m.Job.parent_id.is_(None),  # a model's tasks are driven with it
            served,
        )
        .order_by(m.Job.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    )
    job = session.scalar(query)
    if job is None:
        return None
    job.status = "running"
    job.runner = runner
    job.runner_expires_at = now + timedelta(seconds=lease_seconds)
    job.updated_at = now
    _set_children(session, job.id, status="running", runner=runner)
    session.flush()
    return job


def renew_job(session: Session, job_id: int, runner: str, lease_seconds: float) -> m.Job | None:
    """Extend `runner`'s lease on a running job; None when it must stop driving it.

    None means the job was cancelled or finished, or its lease expired and
    another runner claimed it.
    """
    job = session.scalar(select(m.Job).where(m.Job.id == job_id).with_for_update())
    if job is None or job.status != "running" or job.runner != runner:
        return None
    now = utc_now()
    job.runner_expires_at = now + timedelta(seconds=lease_seconds)
    job.updated_at = now
    session.flush()
    return job


def park_job(session: Session, job_id: int, runner: str) -> bool:
    """Hand a running job back to the queue (no live worker serves its target any more): it
    holds no runner until one does, and is then resumed from the database like a restart."""
    job = session.scalar(select(m.Job).where(m.Job.id == job_id).with_for_update())
    if job is None or job.status != "running" or job.runner != runner:
        return False
    job.status = "queued"
    job.runner = None
    job.runner_expires_at = None
    job.updated_at = utc_now()
    _set_children(session, job.id, status="queued", runner=None)
    session.flush()
    return True


def target_served(session: Session, target_id: int, *, alive_seconds: float) -> bool:
    """Whether a live worker in good standing serves the target."""
    since = utc_now() - timedelta(seconds=alive_seconds)
    found = session.scalar(
        select(m.Worker.id)
        .where(
            m.Worker.target_id == target_id,
            m.Worker.last_heartbeat >= since,
            m.Worker.quarantined_at.is_(None),
        )
        .limit(1)
    )
    return found is not None


def job_task(job: m.Job) -> Any:
    """The `ir.task.Task` a job tunes, rebuilt from the spec it was submitted with."""
    from ir.task import task_from_spec

    assert job.workload_spec is not None, f"job {job.id} has no workload spec"
    return task_from_spec(job.workload_spec)


def job_target(session: Session, job: m.Job) -> str:
    """The canonical target a job tunes for."""
    canonical = session.scalar(select(m.Target.canonical).where(m.Target.id == job.target_id))
    assert canonical is not None
    return canonical


def add_candidates(
    session: Session, job_id: int, traces: Sequence[tuple[Mapping[str, Any], str]]
) -> list[int]:
    """Write candidates `(trace JSON, trace hash)` for workers to lease; their ids, in order.

    A trace the job already has keeps its candidate (and its id comes back):
    a restarted runner that proposes it again does not measure it twice.
    """
    if not traces:
        return []
    for trace, trace_hash in traces:
        session.execute(
            dialect_insert(session, m.Candidate)
            .values(
                job_id=job_id,
                trace=dict(trace),
                trace_hash=trace_hash,
                status="pending",
                attempts=0,
            )
            .on_conflict_do_nothing()
        )
    hashes = [h for _, h in traces]
    ids = dict(
        session.execute(
            select(m.Candidate.trace_hash, m.Candidate.id).where(
                m.Candidate.job_id == job_id,
                m.Candidate.trace_hash.in_(set(hashes)),
                m.Candidate.confirms == "",
            )
        ).all()
    )
    return [ids[h] for h in hashes]


def candidate_results(session: Session, candidate_ids: Sequence[int]) -> dict[int, TuningRecord]:
    """candidate id -> its record, for the candidates that got a result (status done).

    When the trace had already been measured for the workload and target (by
    another job), the record stored is that earlier one.
    """
    if not candidate_ids:
        return {}
    rows = session.execute(
        select(m.Candidate, m.Job.workload_key, m.Job.target_id)
        .join(m.Job, m.Job.id == m.Candidate.job_id)
        .where(m.Candidate.id.in_(set(candidate_ids)), m.Candidate.status == "done")
    ).all()
    out: dict[int, TuningRecord] = {}
    for cand, workload_key, tid in rows:
        record = record_by_id(session, cand.record_id) if cand.record_id else None
        if record is None:
            record = record_of_trace(session, workload_key, tid, cand.trace_hash)
        if record is not None:
            out[cand.id] = record
    return out


def outstanding_hashes(session: Session, job_id: int) -> frozenset[str]:
    """Trace hashes of a job's candidates still waiting for a result (pending or leased)."""
    return frozenset(
        session.scalars(
            select(m.Candidate.trace_hash).where(
                m.Candidate.job_id == job_id, m.Candidate.status.in_(("pending", "leased"))
            )
        )
    )


def tuning_candidates(session: Session, job_id: int) -> int:
    """Tuning candidates a job has written and not withdrawn: measured or still waiting.

    One statement, so a result posted meanwhile cannot be counted twice or not at all.
    """
    live = m.Candidate.status.in_(("pending", "leased", "done"))
    query = select(func.count()).where(m.Candidate.job_id == job_id, m.Candidate.confirms == "")
    return int(session.scalar(query.where(live)) or 0)


def job_records(session: Session, job_id: int) -> list[TuningRecord]:
    """Everything a job measured, oldest first."""
    return records_of_job(session, job_id)


@dataclass(frozen=True)
class JobProgress:
    status: str
    budget: int
    trials_done: int
    outstanding: int
    """Candidates written but not yet measured (pending or leased)."""
    best_latency_ms: float | None


def job_progress(session: Session, job_id: int) -> JobProgress:
    """A job's progress; a model job's counts its tasks' candidates and trials."""
    job = session.get(m.Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    ids = [job_id, *session.scalars(select(m.Job.id).where(m.Job.parent_id == job_id))]
    outstanding = session.scalar(
        select(func.count()).where(
            m.Candidate.job_id.in_(ids), m.Candidate.status.in_(("pending", "leased"))
        )
    )
    done = session.scalar(select(func.sum(m.Job.trials_done)).where(m.Job.id.in_(ids)))
    best = best_of_jobs(session, [job_id]).get(job_id)
    return JobProgress(
        job.status, job.budget, int(done or 0), int(outstanding or 0), best[0] if best else None
    )


def finish_job(
    session: Session,
    job_id: int,
    runner: str,
    status: str,
    error: str | None = None,
    *,
    note: str | None = None,
) -> bool:
    """End a job `runner` drives: succeeded (with a `note` worth saying), failed (with
    `error`) or cancelled.

    Candidates not yet measured are withdrawn. False (and nothing changes) when
    the runner no longer holds the job (cancelled meanwhile, or claimed by another).
    """
    if status not in FINISHED:
        raise ValueError(f"a job finishes as one of {', '.join(FINISHED)}, not {status!r}")
    job = session.scalar(select(m.Job).where(m.Job.id == job_id).with_for_update())
    if job is None or job.status != "running" or job.runner != runner:
        return False
    _end(session, job, status, error, note)
    return True


def withdraw_candidates(session: Session, candidate_ids: Sequence[int]) -> None:
    """Candidates nobody will measure (a confirmation no other worker is left to make)."""
    session.execute(
        update(m.Candidate)
        .where(
            m.Candidate.id.in_(list(candidate_ids)), m.Candidate.status.in_(("pending", "leased"))
        )
        .values(status="cancelled", lease_expires_at=None)
    )


def _end(
    session: Session, job: m.Job, status: str, error: str | None, note: str | None = None
) -> None:
    """A job ends (a model job with its tasks): no runner holds it, and its candidates not
    yet measured are withdrawn."""
    now = utc_now()
    ids = [job.id, *session.scalars(select(m.Job.id).where(m.Job.parent_id == job.id))]
    session.execute(
        update(m.Job)
        .where(m.Job.id.in_(ids), m.Job.status.notin_(FINISHED))
        .values(
            status=status,
            finished_at=now,
            updated_at=now,
            runner=None,
            runner_expires_at=None,
        )
    )
    job.error = error
    job.note = note
    session.execute(
        update(m.Candidate)
        .where(m.Candidate.job_id.in_(ids), m.Candidate.status.in_(("pending", "leased")))
        .values(status="cancelled", lease_expires_at=None)
    )
    session.flush()
    session.refresh(job)


def _set_children(session: Session, parent_id: int, *, status: str, runner: str | None) -> None:
    """A model job's tasks follow it: running (their candidates leasable) or queued."""
    session.execute(
        update(m.Job)
        .where(m.Job.parent_id == parent_id, m.Job.status.notin_(FINISHED))
        .values(status=status, runner=runner, updated_at=utc_now())
    )


def job_times(job: m.Job) -> tuple[datetime, datetime, datetime | None]:
    return as_utc(job.created_at), as_utc(job.updated_at), as_utc_or_none(job.finished_at)
