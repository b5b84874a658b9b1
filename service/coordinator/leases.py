"""Workers and their leases: register, heartbeat, lease a batch, report results, release.

A lease is a candidate's `lease_holder` and `lease_expires_at`. It lasts
`lease_seconds` past the worker's last heartbeat (or lease call); then it has
expired, the worker no longer holds it, and the next lease call of any worker
of that target re-dispatches it (`service.db.store.lease_candidates` takes
pending and expired candidates alike). A result counts only while its lease is
held (else 409, and nothing of that post is stored); a result posted twice
with the same record id is stored once and answered the same way.

Row locks are always taken in one order, worker -> jobs -> candidates (by id),
here and in `service.coordinator.jobs` (cancel, finish), so concurrent posts, heartbeats,
leases and cancels wait for each other but never deadlock on PostgreSQL.

Every request of a worker is a few SQLAlchemy Core statements (the hot path
of the coordinator: `touch_worker` first, then one statement per table), not
ORM loads and flushes.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session

from service.coordinator import trust
from service.coordinator.errors import Conflict, Forbidden, Invalid, NotFound
from service.coordinator.targets import check_target_size, target_id
from service.coordinator.tokens import Caller
from service.db import models as m
from service.db.session import as_utc
from service.db.store import dialect_insert, lease_candidates, record_to_row
from tuner.database import utc_now


def register_worker(
    session: Session, caller: Caller, name: str, target: str
) -> tuple[m.Worker, str]:
    """A new worker of the caller's owner serving `target` (explicit: a worker resolves `host` itself)."""
    from codegen.host import parse_target
    from ir.target import TargetError

    loc = ("body", "target")
    if target.split()[:1] == ["host"]:
        raise Invalid(loc, "a worker registers its own CPU (llvm -mcpu=... -mattr=...), not 'host'")
    try:
        parsed = parse_target(target)
    except TargetError as e:
        raise Invalid(loc, str(e)) from None
    canonical = check_target_size(parsed, loc)
    now = utc_now()
    worker = m.Worker(
        target_id=target_id(session, canonical),
        name=name,
        owner=caller.owner,
        registered_at=now,
        last_heartbeat=now,
    )
    session.add(worker)
    session.flush()
    return worker, canonical


@dataclass(frozen=True)
class WorkerRow:
    """A worker as a request sees it, after `touch_worker`."""

    id: int
    name: str
    owner: str
    target_id: int
    target: str
    quarantine_reason: str | None = None


_WORKERS = m.Worker.__table__
_CANDIDATES = m.Candidate.__table__
_JOBS = m.Job.__table__
_TARGETS = m.Target.__table__
_RECORDS = m.Record.__table__
_OBSERVATIONS = m.Observation.__table__

# The hot path's statements, built once with bound parameters (building one costs
# about as much CPU as running it).
_TOUCH = (
    update(_WORKERS)
    .where(_WORKERS.c.id == bindparam("wid"))
    .values(last_heartbeat=bindparam("now"))
    .returning(
        _WORKERS.c.id,
        _WORKERS.c.name,
        _WORKERS.c.owner,
        _WORKERS.c.target_id,
        select(_TARGETS.c.canonical).where(_TARGETS.c.id == _WORKERS.c.target_id).scalar_subquery(),
        _WORKERS.c.quarantined_at,
        _WORKERS.c.quarantine_reason,
    )
)
_EXTEND = (
    update(_CANDIDATES)
    .where(
        _CANDIDATES.c.lease_holder == bindparam("wid"),
        _CANDIDATES.c.status == "leased",
        _CANDIDATES.c.lease_expires_at >= bindparam("now"),
    )
    .values(lease_expires_at=bindparam("until"))
    .returning(_CANDIDATES.c.id)
)
_JOBS_OF_LEASES = select(_JOBS.c.id, _JOBS.c.workload_key, _JOBS.c.workload_spec).where(
    _JOBS.c.id.in_(bindparam("ids", expanding=True))
)
_LOCK_JOBS = (
    select(_JOBS.c.id, _JOBS.c.workload_key, _JOBS.c.target_id, _JOBS.c.workload_spec)
    .where(
        _JOBS.c.id.in_(
            select(_CANDIDATES.c.job_id)
            .where(_CANDIDATES.c.id.in_(bindparam("ids", expanding=True)))
            .scalar_subquery()
        )
    )
    .order_by(_JOBS.c.id)
    .with_for_update()
)
_LOCK_CANDIDATES = (
    select(
        _CANDIDATES.c.id,
        _CANDIDATES.c.job_id,
        _CANDIDATES.c.status,
        _CANDIDATES.c.lease_holder,
        _CANDIDATES.c.lease_expires_at,
        _CANDIDATES.c.record_id,
        _CANDIDATES.c.trace,
        _CANDIDATES.c.trace_hash,
        _CANDIDATES.c.confirms,
    )
    .where(_CANDIDATES.c.id.in_(bindparam("ids", expanding=True)))
    .order_by(_CANDIDATES.c.id)
    .with_for_update()
)
_TAKEN_RECORD_IDS = select(_RECORDS.c.record_id).where(
    _RECORDS.c.record_id.in_(bindparam("ids", expanding=True))
)
_FINISH_CANDIDATE = (
    update(_CANDIDATES)
    .where(_CANDIDATES.c.id == bindparam("cid"))
    .values(status="done", record_id=bindparam("rid"), lease_expires_at=None)
)
_COUNT_TRIALS = (
    update(_JOBS)
    .where(_JOBS.c.id == bindparam("jid"))
    .values(trials_done=_JOBS.c.trials_done + bindparam("count"), updated_at=bindparam("now"))
)
_INSERT_RECORDS: dict[str, Any] = {}


def _insert_records(session: Session) -> Any:
    """INSERT ... ON CONFLICT DO NOTHING into records, per dialect, built once."""
    dialect = session.get_bind().dialect.name
    if dialect not in _INSERT_RECORDS:
        _INSERT_RECORDS[dialect] = dialect_insert(session, _RECORDS).on_conflict_do_nothing()
    return _INSERT_RECORDS[dialect]


def touch_worker(
    session: Session, worker_id: int, caller: Caller, now: datetime | None = None
) -> WorkerRow:
    """The worker the caller drives, its sign of life recorded: 404 when there is none, 403
    when another owner registered it (the raise rolls the touch back).

    One UPDATE: it takes the worker's row lock first (the module's lock order)
    and returns the worker with its target.
    """
    row = session.execute(_TOUCH, {"wid": worker_id, "now": now or utc_now()}).one_or_none()
    if row is None:
        raise NotFound(f"worker {worker_id} not found")
    if not caller.is_admin and row[2] != caller.owner:
        raise Forbidden(f"worker {worker_id} was registered by another owner")
    if row[5] is not None:
        raise Quarantined(worker_id, f"worker {worker_id} is quarantined: {row[6]}")
    return WorkerRow(*row[:5])


class Quarantined(Forbidden):
    """A quarantined worker's request (403): it gets no leases and may post nothing."""

    def __init__(self, worker_id: int, detail: str) -> None:
        super().__init__(detail)
        self.worker_id = worker_id


class Implausible(Invalid):
    """A result faster than the target's physical peak allows (422, and a strike)."""

    def __init__(self, loc: Sequence[str | int], msg: str, worker_id: int) -> None:
        super().__init__(loc, msg)
        self.worker_id = worker_id


def _extend(session: Session, worker_id: int, now: datetime, until: datetime) -> list[int]:
    """The worker's unexpired leases now last until `until`; their candidate ids, in order."""
    extended = session.scalars(_EXTEND, {"wid": worker_id, "now": now, "until": until}).all()
    return sorted(extended)


def heartbeat(
    session: Session, worker: WorkerRow, lease_seconds: float
) -> tuple[list[int], datetime]:
    """Stay alive: the worker's leases that have not expired last `lease_seconds` from now.

    Returns the ids of those candidates: a worker that does not know one of them
    (the answer to its lease call was lost with the connection) hands it back
    instead of holding it, unmeasured, for ever.
    """
    now = utc_now()
    until = now + timedelta(seconds=lease_seconds)
    return _extend(session, worker.id, now, until), until


@dataclass(frozen=True)
class Lease:
    """One leased candidate, with all a worker needs to measure it."""

    candidate_id: int
    job_id: int
    workload_key: str
    workload: dict[str, Any]
    target: str
    trace: dict[str, Any]
    trace_hash: str
    attempt: int
    lease_expires_at: datetime


def lease(session: Session, worker: WorkerRow, n: int, lease_seconds: float) -> list[Lease]:
    """Lease up to `n` pending (or expired) candidates of running jobs of the worker's target.

    Oldest candidate first, across the target's running jobs; a lease call is
    also a heartbeat. Four statements whatever `n` is.
    """
    now = utc_now()
    until = now + timedelta(seconds=lease_seconds)
    _extend(session, worker.id, now, until)
    leased = lease_candidates(session, worker.target_id, worker.id, n, lease_seconds, now=now)
    if not leased:
        return []
    jobs = {
        row.id: row
        for row in session.execute(_JOBS_OF_LEASES, {"ids": sorted({c.job_id for c in leased})})
    }
    return [
        Lease(
            candidate_id=c.id,
            job_id=c.job_id,
            workload_key=jobs[c.job_id].workload_key,
            workload=dict(jobs[c.job_id].workload_spec or {}),
            target=worker.target,
            trace=dict(c.trace),
            trace_hash=c.trace_hash,
            attempt=c.attempts,
            lease_expires_at=as_utc(c.lease_expires_at) if c.lease_expires_at else now,
        )
        for c in leased
    ]


@dataclass(frozen=True)
class Result:
    """A worker's result for one leased candidate (validated by the API's schema)."""

    candidate_id: int
    record_id: str
    status: str
    run_times_ms: tuple[float, ...]
    message: str = ""
    loomtune_version: str = ""
    llvm_version: str = ""


@dataclass(frozen=True)
class Accepted:
    accepted: list[int]
    """Candidates this post finished."""
    duplicates: list[int]
    """Candidates whose result (same record id) had already been accepted."""


def submit_results(session: Session, worker: WorkerRow, results: Sequence[Result]) -> Accepted:
    """Store the results of candidates the worker holds: records, candidates done, trials counted.

    All or nothing: when any result is for a lease the worker no longer holds
    (expired, released, re-dispatched, withdrawn by a cancel) the post raises
    `Conflict` naming those candidates and stores nothing. A result whose
    candidate is already done with the same record id is a repeat: accepted
    again, stored once. The caller has touched the worker (its row lock).
    """
    now = utc_now()
    by_candidate = {r.candidate_id: r for r in results}
    if len(by_candidate) != len(results):
        raise Invalid(("body", "results"), "a candidate appears twice in one post")
    if len({r.record_id for r in results}) != len(results):
        raise Invalid(("body", "results"), "a record_id appears twice in one post")
    ids = sorted(by_candidate)
    # Lock the jobs, then the candidates, each in id order (see the module's docstring).
    jobs = {row.id: row for row in session.execute(_LOCK_JOBS, {"ids": ids})}
    candidates = {row.id: row for row in session.execute(_LOCK_CANDIDATES, {"ids": ids})}
    stale: list[int] = []
    duplicates: list[int] = []
    fresh: list[tuple[Any, Result]] = []
    for cid in ids:
        r, row = by_candidate[cid], candidates.get(cid)
        if row is not None and row.status == "done" and row.record_id == r.record_id:
            duplicates.append(cid)
        elif (
            row is None
            or row.status != "leased"
            or row.lease_holder != worker.id
            or row.lease_expires_at is None
            or as_utc(row.lease_expires_at) < now
        ):
            stale.append(cid)
        else:
            fresh.append((row, r))
    if stale:
        shown = ", ".join(str(x) for x in stale[:20]) + (" ..." if len(stale) > 20 else "")
        raise Conflict(
            f"worker {worker.id} no longer holds the lease on candidate(s) {shown}; nothing of this post was stored"
        )
    if not fresh:
        return Accepted([], duplicates)
    _check_plausible(worker, jobs, fresh, {r.candidate_id: i for i, r in enumerate(results)})
    taken = set(session.scalars(_TAKEN_RECORD_IDS, {"ids": [r.record_id for _, r in fresh]}))
    if taken:
        raise Conflict(f"record_id {sorted(taken)[0]} is already another measurement's")
    tuning = [(row, r) for row, r in fresh if not row.confirms]
    measured = _measured_before(session, jobs, tuning)
    # One statement per table, not one per result: a post is a handful of round trips.
    per_job: dict[int, int] = {}
    rows, observations = [], []
    for row, r in fresh:
        job = jobs[row.job_id]
        median = float(statistics.median(r.run_times_ms)) if r.status == "ok" else None
        earlier = row.confirms or measured.get((job.workload_key, job.target_id, row.trace_hash))
        if earlier:
            # A confirmation, or a trace measured before (by another job): another observation.
            observations.append(
                {
                    "record_id": earlier,
                    "kind": "confirm" if row.confirms else "remeasure",
                    "worker_id": worker.id,
                    "job_id": job.id,
                    "status": r.status,
                    "median_ms": median,
                    "run_times": list(r.run_times_ms),
                    "measured_at": now,
                }
            )
        else:
            rows.append(
                record_to_row(
                    record_id=r.record_id,
                    workload_key=job.workload_key,
                    target_id=job.target_id,
                    job_id=job.id,
                    candidate_id=row.id,
                    trace=row.trace,
                    trace_hash=row.trace_hash,
                    run_times_ms=r.run_times_ms,
                    median_ms=median,
                    status=r.status,
                    message=r.message,
                    worker=worker.name[:256],
                    loomtune_version=r.loomtune_version,
                    llvm_version=r.llvm_version,
                    measured_at=now,
                    worker_id=worker.id,
                )
            )
        if not row.confirms:
            per_job[row.job_id] = per_job.get(row.job_id, 0) + 1
    # executemany form: compiled once and cached (a VALUES list of varying length is not)
    if rows:
        session.execute(_insert_records(session), rows)
    if observations:
        session.execute(_OBSERVATIONS.insert(), observations)
    session.execute(_FINISH_CANDIDATE, [{"cid": row.id, "rid": r.record_id} for row, r in fresh])
    for job_id, count in per_job.items():
        session.execute(_COUNT_TRIALS, {"jid": job_id, "count": count, "now": now})
    for row, r in fresh:
        # A confirmation, or another worker's measurement of a trace already stored: a verdict.
        job = jobs[row.job_id]
        earlier = row.confirms or measured.get((job.workload_key, job.target_id, row.trace_hash))
        if earlier:
            trust.confirm(session, earlier, worker.id, r.status, r.run_times_ms)
    return Accepted([row.id for row, _ in fresh], duplicates)


def _check_plausible(
    worker: WorkerRow,
    jobs: dict[int, Any],
    fresh: Sequence[tuple[Any, Result]],
    pos: dict[int, int],
) -> None:
    """Refuse (422, a strike) an ok result faster than the target's physical peak allows."""
    from ir.errors import LoomtuneError

    for row, r in fresh:
        if r.status != "ok":
            continue
        job = jobs[row.job_id]
        try:
            floor = trust.floor_ms(job.workload_key, dict(job.workload_spec or {}), worker.target)
        except LoomtuneError:  # a spec this version cannot rebuild: no bound
            continue
        median = float(statistics.median(r.run_times_ms))
        if median < floor:
            raise Implausible(
                ("body", "results", pos[row.id], "run_times_ms"),
                f"a median of {median:.3g} ms is faster than {worker.target} can run this "
                f"workload at its physical peak ({floor:.3g} ms); counted against worker {worker.id}",
                worker.id,
            )


def _measured_before(
    session: Session, jobs: dict[int, Any], tuning: Sequence[tuple[Any, Result]]
) -> dict[tuple[str, int, str], str]:
    """(workload, target, trace) -> the record id already stored, for the traces of `tuning`."""
    groups: dict[tuple[str, int], set[str]] = {}
    for row, _ in tuning:
        job = jobs[row.job_id]
        groups.setdefault((job.workload_key, job.target_id), set()).add(row.trace_hash)
    found: dict[tuple[str, int, str], str] = {}
    for (key, tid), hashes in groups.items():
        for record_id, trace_hash in session.execute(
            select(_RECORDS.c.record_id, _RECORDS.c.trace_hash).where(
                _RECORDS.c.workload_key == key,
                _RECORDS.c.target_id == tid,
                _RECORDS.c.trace_hash.in_(hashes),
            )
        ):
            found[(key, tid, trace_hash)] = record_id
    return found


def release(
    session: Session, worker: WorkerRow, candidate_ids: Iterable[int] | None = None
) -> list[int]:
    """Hand leases back (all of the worker's, or those named) for others to lease at once."""
    c = _CANDIDATES
    query = (
        update(c)
        .where(c.c.lease_holder == worker.id, c.c.status == "leased")
        .values(status="pending", lease_holder=None, lease_expires_at=None)
        .returning(c.c.id)
    )
    if candidate_ids is not None:
        query = query.where(c.c.id.in_(list(candidate_ids)))
    return sorted(session.scalars(query).all())


@dataclass(frozen=True)
class WorkerView:
    worker: m.Worker
    target: str
    alive: bool
    leases: int


def list_workers(session: Session, *, alive_seconds: float) -> list[WorkerView]:
    """Every registered worker, with its target, whether it is alive and the leases it holds."""
    now = utc_now()
    held = dict(
        session.execute(
            select(m.Candidate.lease_holder, func.count())
            .where(m.Candidate.status == "leased", m.Candidate.lease_expires_at >= now)
            .group_by(m.Candidate.lease_holder)
        ).all()
    )
    rows = session.execute(
        select(m.Worker, m.Target.canonical)
        .join(m.Target, m.Target.id == m.Worker.target_id)
        .order_by(m.Worker.id)
    ).all()
    since = now - timedelta(seconds=alive_seconds)
    return [
        WorkerView(w, t, as_utc(w.last_heartbeat) >= since, int(held.get(w.id, 0))) for w, t in rows
    ]
