"""Workers and their leases: register, heartbeat, lease a batch, report results, release.

A lease is a candidate's `lease_holder` and `lease_expires_at`. It lasts
`lease_seconds` past the worker's last heartbeat (or lease call); then it has
expired, the worker no longer holds it, and the next lease call of any worker
of that target re-dispatches it (`service.db.store.lease_candidates` takes
pending and expired candidates alike). A result counts only while its lease is
held (else 409, and nothing of that post is stored); a result posted twice
with the same record id is stored once and answered the same way.

Row locks are always taken in one order, worker -> jobs -> candidates (by id),
here and in `service.jobs` (cancel, finish), so concurrent posts, heartbeats,
leases and cancels wait for each other but never deadlock on PostgreSQL.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from service.db import models as m
from service.db.session import as_utc
from service.db.store import _insert, lease_candidates
from service.errors import Conflict, Forbidden, Invalid, NotFound
from service.jobs import MAX_CPU, MAX_TARGET, target_id
from service.tokens import Caller
from tuner.database import utc_now


def register_worker(session: Session, caller: Caller, name: str, target: str) -> tuple[m.Worker, str]:
    """A new worker of the caller's owner serving `target` (explicit: a worker resolves `host` itself)."""
    from codegen.target import Target, TargetError

    loc = ("body", "target")
    if target.split()[:1] == ["host"]:
        raise Invalid(loc, "a worker registers its own CPU (llvm -mcpu=... -mattr=...), not 'host'")
    try:
        parsed = Target.parse(target)
    except TargetError as e:
        raise Invalid(loc, str(e)) from None
    canonical = parsed.canonical()
    if len(canonical) > MAX_TARGET or len(parsed.cpu) > MAX_CPU:
        raise Invalid(loc, f"target too long (cpu at most {MAX_CPU}, target at most {MAX_TARGET} characters)")
    now = utc_now()
    worker = m.Worker(
        target_id=target_id(session, canonical), name=name, owner=caller.owner, registered_at=now, last_heartbeat=now
    )
    session.add(worker)
    session.flush()
    return worker, canonical


def get_worker(session: Session, worker_id: int, caller: Caller) -> m.Worker:
    """A worker the caller may drive: 404 when there is none, 403 when another owner registered it."""
    worker = session.get(m.Worker, worker_id)
    if worker is None:
        raise NotFound(f"worker {worker_id} not found")
    if not caller.is_admin and worker.owner != caller.owner:
        raise Forbidden(f"worker {worker_id} was registered by another owner")
    return worker


def _touch(session: Session, worker: m.Worker, now: datetime) -> None:
    """Record a sign of life; first, so the worker's row is the first lock a request takes."""
    worker.last_heartbeat = now
    session.flush()


def _keep_alive(session: Session, worker: m.Worker, lease_seconds: float, now: datetime) -> tuple[int, datetime]:
    """Record a sign of life and extend the worker's unexpired leases; (how many, until when)."""
    _touch(session, worker, now)
    until = now + timedelta(seconds=lease_seconds)
    extended = session.execute(
        update(m.Candidate)
        .where(
            m.Candidate.lease_holder == worker.id,
            m.Candidate.status == "leased",
            m.Candidate.lease_expires_at >= now,
        )
        .values(lease_expires_at=until)
        .returning(m.Candidate.id)
    ).all()
    return len(extended), until


def heartbeat(session: Session, worker: m.Worker, lease_seconds: float) -> tuple[list[int], datetime]:
    """Stay alive: the worker's leases that have not expired last `lease_seconds` from now.

    Returns the ids of those candidates: a worker that does not know one of them
    (the answer to its lease call was lost with the connection) hands it back
    instead of holding it, unmeasured, for ever.
    """
    now = utc_now()
    _, until = _keep_alive(session, worker, lease_seconds, now)
    held = list(
        session.scalars(
            select(m.Candidate.id)
            .where(m.Candidate.lease_holder == worker.id, m.Candidate.status == "leased", m.Candidate.lease_expires_at >= now)
            .order_by(m.Candidate.id)
        )
    )
    session.flush()
    return held, until


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


def lease(session: Session, worker: m.Worker, n: int, lease_seconds: float) -> list[Lease]:
    """Lease up to `n` pending (or expired) candidates of running jobs of the worker's target.

    Oldest job first, oldest candidate first; a lease call is also a heartbeat.
    """
    now = utc_now()
    _keep_alive(session, worker, lease_seconds, now)
    job_ids = list(
        session.scalars(
            select(m.Job.id)
            .join(m.Candidate, m.Candidate.job_id == m.Job.id)
            .where(
                m.Job.target_id == worker.target_id,
                m.Job.status == "running",
                (m.Candidate.status == "pending")
                | ((m.Candidate.status == "leased") & (m.Candidate.lease_expires_at < now)),
            )
            .group_by(m.Job.id)
            .order_by(m.Job.id)
        )
    )
    leased: list[m.Candidate] = []
    for job_id in job_ids:
        if len(leased) >= n:
            break
        leased += lease_candidates(session, job_id, worker.id, n - len(leased), lease_seconds)
    if not leased:
        return []
    jobs = {
        job.id: job
        for job in session.scalars(select(m.Job).where(m.Job.id.in_({c.job_id for c in leased})))
    }
    canonical = session.scalar(select(m.Target.canonical).where(m.Target.id == worker.target_id))
    assert canonical is not None
    return [
        Lease(
            candidate_id=c.id,
            job_id=c.job_id,
            workload_key=jobs[c.job_id].workload_key,
            workload=dict(jobs[c.job_id].workload_spec or {}),
            target=canonical,
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


def submit_results(session: Session, worker: m.Worker, results: Sequence[Result]) -> Accepted:
    """Store the results of candidates the worker holds: records, candidates done, trials counted.

    All or nothing: when any result is for a lease the worker no longer holds
    (expired, released, re-dispatched, withdrawn by a cancel) the post raises
    `Conflict` naming those candidates and stores nothing. A result whose
    candidate is already done with the same record id is a repeat: accepted
    again, stored once.
    """
    now = utc_now()
    by_candidate = {r.candidate_id: r for r in results}
    if len(by_candidate) != len(results):
        raise Invalid(("body", "results"), "a candidate appears twice in one post")
    if len({r.record_id for r in results}) != len(results):
        raise Invalid(("body", "results"), "a record_id appears twice in one post")
    _touch(session, worker, now)
    # Lock the jobs, then the candidates, each in id order (see the module's docstring).
    job_ids = sorted(set(session.scalars(select(m.Candidate.job_id).where(m.Candidate.id.in_(by_candidate)))))
    jobs = {j.id: j for j in session.scalars(select(m.Job).where(m.Job.id.in_(job_ids)).order_by(m.Job.id).with_for_update())}
    candidates = {
        c.id: c
        for c in session.scalars(
            select(m.Candidate).where(m.Candidate.id.in_(by_candidate)).order_by(m.Candidate.id).with_for_update()
        )
    }
    stale: list[int] = []
    duplicates: list[int] = []
    fresh: list[tuple[m.Candidate, Result]] = []
    for cid in sorted(by_candidate):
        r, c = by_candidate[cid], candidates.get(cid)
        if c is not None and c.status == "done" and c.record_id == r.record_id:
            duplicates.append(cid)
        elif (
            c is None
            or c.status != "leased"
            or c.lease_holder != worker.id
            or c.lease_expires_at is None
            or as_utc(c.lease_expires_at) < now
        ):
            stale.append(cid)
        else:
            fresh.append((c, r))
    if stale:
        shown = ", ".join(str(c) for c in stale[:20]) + (" ..." if len(stale) > 20 else "")
        raise Conflict(f"worker {worker.id} no longer holds the lease on candidate(s) {shown}; nothing of this post was stored")
    taken = set(session.scalars(select(m.Record.record_id).where(m.Record.record_id.in_([r.record_id for _, r in fresh]))))
    if taken:
        raise Conflict(f"record_id {sorted(taken)[0]} is already another measurement's")
    # One statement per table, not one per result: a post is a handful of round trips.
    per_job: dict[int, int] = {}
    rows = []
    for c, r in fresh:
        job = jobs[c.job_id]
        ok = r.status == "ok"
        rows.append({
            "record_id": r.record_id, "workload_key": job.workload_key, "target_id": job.target_id,
            "job_id": job.id, "candidate_id": c.id, "trace": c.trace, "trace_hash": c.trace_hash,
            "run_times": list(r.run_times_ms), "median_ms": float(statistics.median(r.run_times_ms)) if ok else None,
            "status": r.status, "message": r.message, "worker": worker.name[:256],
            "loomtune_version": r.loomtune_version, "llvm_version": r.llvm_version, "measured_at": now,
        })  # fmt: skip
        per_job[c.job_id] = per_job.get(c.job_id, 0) + 1
    if rows:
        # The trace already measured for this workload and target (by another job): keep the first.
        # executemany form: compiled once and cached (a VALUES list of varying length is not)
        session.execute(_insert(session, m.Record).on_conflict_do_nothing(), rows)
        table = m.Candidate.__table__
        session.execute(
            update(table)
            .where(table.c.id == bindparam("cid"))
            .values(status="done", record_id=bindparam("rid"), lease_expires_at=None),
            [{"cid": c.id, "rid": r.record_id} for c, r in fresh],
        )
        for c, r in fresh:  # keep the session's copies true without another flush
            set_committed_value(c, "status", "done")
            set_committed_value(c, "record_id", r.record_id)
            set_committed_value(c, "lease_expires_at", None)
    for job_id, count in per_job.items():
        session.execute(
            update(m.Job).where(m.Job.id == job_id).values(trials_done=m.Job.trials_done + count, updated_at=now)
        )
    session.flush()
    return Accepted([c.id for c, _ in fresh], duplicates)


def release(session: Session, worker: m.Worker, candidate_ids: Iterable[int] | None = None) -> list[int]:
    """Hand leases back (all of the worker's, or those named) for others to lease at once."""
    _touch(session, worker, utc_now())
    query = (
        update(m.Candidate)
        .where(m.Candidate.lease_holder == worker.id, m.Candidate.status == "leased")
        .values(status="pending", lease_holder=None, lease_expires_at=None)
        .returning(m.Candidate.id)
    )
    if candidate_ids is not None:
        query = query.where(m.Candidate.id.in_(list(candidate_ids)))
    released = sorted(session.scalars(query).all())
    session.flush()
    return released


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
        select(m.Worker, m.Target.canonical).join(m.Target, m.Target.id == m.Worker.target_id).order_by(m.Worker.id)
    ).all()
    since = now - timedelta(seconds=alive_seconds)
    return [WorkerView(w, t, as_utc(w.last_heartbeat) >= since, int(held.get(w.id, 0))) for w, t in rows]
