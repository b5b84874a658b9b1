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
from service.coordinator.tokens import Caller
from service.db import models as m
from service.db.session import as_utc, as_utc_or_none
from service.db.store import dialect_insert
from tuner.database import TuningRecord, utc_now

JOB_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")
FINISHED = ("succeeded", "failed", "cancelled")
CANDIDATE_STATUSES = ("pending", "leased", "done", "cancelled")

MAX_OP_NAME = 128
MAX_TARGET = 2048
MAX_CPU = 128
MAX_THREADS = 1024
"""The most threads a target may name: more than any worker this runs on has cores (and
`targets.threads` is a 32-bit integer)."""


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


def check_target_size(parsed: Any, loc: tuple[str | int, ...]) -> str:
    """The canonical spelling of a parsed target, refused (422) when too long or too wide."""
    if not 1 <= parsed.num_threads <= MAX_THREADS:
        raise Invalid(
            loc, f"-num-threads must be between 1 and {MAX_THREADS}, got {parsed.num_threads}"
        )
    canonical = parsed.canonical()
    if len(canonical) > MAX_TARGET or len(parsed.cpu) > MAX_CPU:
        raise Invalid(
            loc, f"target too long (cpu at most {MAX_CPU}, target at most {MAX_TARGET} characters)"
        )
    return canonical


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


def served_targets(session: Session, *, alive_seconds: float) -> list[str]:
    """Canonical targets of live workers (else of every registered worker), sorted."""
    alive_since = utc_now() - timedelta(seconds=alive_seconds)
    base = select(m.Target.canonical).join(m.Worker, m.Worker.target_id == m.Target.id).distinct()
    alive = sorted(session.scalars(base.where(m.Worker.last_heartbeat >= alive_since)))
    return alive or sorted(session.scalars(base))


def resolve_target(
    session: Session, text: str, *, alive_seconds: float, loc: tuple[str, ...] = ("body", "target")
) -> str:
    """The canonical target of a submission; `host` means the CPU of this coordinator's workers.

    `host` is refused when no worker is registered, or when workers of several
    CPUs are (ambiguous); an explicit target no worker serves is accepted (the
    job waits, and says so).
    """
    from codegen.host import parse_target
    from ir.target import TargetError
    from service.coordinator.targets import resolve_short  # short forms: see that module

    if not isinstance(text, str) or len(text) > MAX_TARGET:
        raise Invalid(loc, f"a target is a string of at most {MAX_TARGET} characters")
    served = served_targets(session, alive_seconds=alive_seconds)
    try:
        parsed = resolve_short(session, text, served, loc) or parse_target(text)
    except TargetError as e:
        raise Invalid(loc, str(e)) from None
    if text.split()[0] == "host":
        machines = {parse_target(t).with_threads(1) for t in served}
        if not machines:
            raise Invalid(
                loc,
                "'host' means the CPU of this coordinator's workers and none is registered; name the target (llvm -mcpu=...)",
            )
        if len(machines) > 1:
            names = ", ".join(sorted(t.canonical() for t in machines))
            raise Invalid(
                loc, f"'host' is ambiguous: workers serve {len(machines)} CPUs ({names}); name one"
            )
        parsed = machines.pop().with_threads(parsed.num_threads)
    return check_target_size(parsed, loc)


def target_id(session: Session, canonical: str) -> int:
    """The id of a canonical target, created when new (concurrent creators agree)."""
    from codegen.host import parse_target

    found = session.scalar(select(m.Target.id).where(m.Target.canonical == canonical))
    if found is None:
        parsed = parse_target(canonical)
        session.execute(
            dialect_insert(session, m.Target)
            .values(
                canonical=canonical,
                cpu=parsed.cpu,
                features=list(parsed.features),
                threads=parsed.num_threads,
            )
            .on_conflict_do_nothing()
        )
        found = session.scalar(select(m.Target.id).where(m.Target.canonical == canonical))
    assert found is not None
    return found


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
        select(func.count()).where(m.Job.owner == owner, m.Job.status.in_(("queued", "running")))
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
    """The caller's jobs (an admin's: everyone's), newest first."""
    query = select(m.Job).order_by(m.Job.id.desc())
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
    if job.status == "cancelled":
        return job
    if job.status in FINISHED:
        raise Conflict(f"job {job_id} already {job.status}")
    _end(session, job, "cancelled", job.error)
    return job


@dataclass(frozen=True)
class JobView:
    """A job as the API shows it."""

    job: m.Job
    op: str
    params: dict[str, int]
    target: str
    best_latency_ms: float | None
    best_record_id: str | None
    waiting_reason: str | None


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
                m.Workload.key.in_({j.workload_key for j in jobs})
            )
        ).all()
    }
    best = best_of_jobs(session, [j.id for j in jobs])
    alive_since = utc_now() - timedelta(seconds=alive_seconds)
    served = set(
        session.scalars(
            select(m.Worker.target_id).where(m.Worker.last_heartbeat >= alive_since).distinct()
        )
    )
    views = []
    for job in jobs:
        reason = None
        if job.status in ("queued", "running") and job.target_id not in served:
            reason = f"no live worker serves the target {targets[job.target_id]}"
        elif job.status == "queued":
            reason = "queued: waiting for a coordinator's job runner to start it"
        median, record_id = best.get(job.id, (None, None))
        op, params = workloads[job.workload_key]
        views.append(
            JobView(job, op, dict(params), targets[job.target_id], median, record_id, reason)
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
    job = session.get(m.Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} not found")
    outstanding = session.scalar(
        select(func.count()).where(
            m.Candidate.job_id == job_id, m.Candidate.status.in_(("pending", "leased"))
        )
    )
    best = best_of_jobs(session, [job_id]).get(job_id)
    return JobProgress(
        job.status, job.budget, job.trials_done, int(outstanding or 0), best[0] if best else None
    )


def finish_job(
    session: Session, job_id: int, runner: str, status: str, error: str | None = None
) -> bool:
    """End a job `runner` drives: succeeded, failed (with `error`) or cancelled.

    Candidates not yet measured are withdrawn. False (and nothing changes) when
    the runner no longer holds the job (cancelled meanwhile, or claimed by another).
    """
    if status not in FINISHED:
        raise ValueError(f"a job finishes as one of {', '.join(FINISHED)}, not {status!r}")
    job = session.scalar(select(m.Job).where(m.Job.id == job_id).with_for_update())
    if job is None or job.status != "running" or job.runner != runner:
        return False
    _end(session, job, status, error)
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


def _end(session: Session, job: m.Job, status: str, error: str | None) -> None:
    """A job ends: no runner holds it, and its candidates not yet measured are withdrawn."""
    now = utc_now()
    job.status = status
    job.error = error
    job.finished_at = now
    job.updated_at = now
    job.runner = None
    job.runner_expires_at = None
    session.execute(
        update(m.Candidate)
        .where(m.Candidate.job_id == job.id, m.Candidate.status.in_(("pending", "leased")))
        .values(status="cancelled", lease_expires_at=None)
    )
    session.flush()


def job_times(job: m.Job) -> tuple[datetime, datetime, datetime | None]:
    return as_utc(job.created_at), as_utc(job.updated_at), as_utc_or_none(job.finished_at)
