"""Results are evidence, not truth: plausibility, confirmation and quarantine of workers.

docs/architecture.md "Trust" is the design; this module is its mechanics:

- `floor_ms`: the least time a workload can take on a target (its work at the
  target's physical peak, generously); a faster result is refused (422) and a
  strike against its worker;
- `start_confirmation`: at the end of a job, its fastest unconfirmed record that
  would beat the trusted best is re-measured, with the trusted best, by another
  worker (confirmation candidates: `candidates.confirms`, never leased to the
  record's own worker);
- `judge`, `confirm`: a confirmation's verdict on the record it re-timed (the confirmer's
  fastest run against the claimed median: robust to a loaded machine);
- `quarantine`, `invalidate_worker`: a worker caught lying gets no more leases and
  its unconfirmed records are never served; an operator can void all of them.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from service.db import models as m
from tuner.database import utc_now

PEAK_HZ = 6e9
"""A generous clock: no CPU a worker runs on sustains more."""
FMA_UNITS = 2
FLOPS_PER_FMA = 2
TOLERANCE = 3.0
"""A confirmer's fastest run at most this factor slower than the claimed median confirms it.

Load only ever slows a run down, so the confirmer's fastest run is its least disturbed
one. Measured on this 2-core VM at load 6-8 (tests/e2e/test_trust.py, honest pairs):
the confirmer's fastest over the claim 0.87-1.07, once 2.64 (every repeat preempted),
while its median was up to 8.1x (the old median rule, 1.5x, refuted honest workers).
The tolerance cannot help a liar: a confirmed record's trusted time is the slower of
the claim and the confirmer's fastest run, so a lie within it ranks at the honest time."""
SLACK_MS = 0.001
"""Added to every bound: each sample of a few-microsecond kernel includes a call's fixed
cost (a Python loop around a ctypes call, about 0.5 us here), which load varies more
than the kernel."""
GROSS = 6.0
"""Beyond this (plus the slack) the claim is a lie caught: refuted, its worker quarantined
at once. Between the tolerance and this, doubt: the record is refuted (never served) and
its worker gets a strike (three quarantine), so one confirmation on a machine even busier
than measured costs an honest worker one record, not its standing. 1e-300 and 1000x lies
are orders of magnitude beyond; so is a careful liar just above the plausibility bound."""
QUARANTINE_STRIKES = 3
"""Strikes (implausible results, doubtful confirmations) that quarantine a worker."""
HIDING = ("crashed", "wrong_result")
"""Failures a worker could claim to hide a good candidate: deterministic for a correct kernel,
so another worker measuring the trace ok refutes them (timeouts can be load: not these).
A confirmer posting one of these for a record claimed ok refutes the claim the same way;
a confirmer's timeout or runtime error (load, memory) only refutes it with a strike."""
MAX_ROUNDS = 3
"""Confirmations a job's end tries (each refutation moves to the next contender)."""

_FLOORS: OrderedDict[tuple[str, str], float] = OrderedDict()


def work_of(task: Any) -> int:
    """Arithmetic operations a workload needs at least: the library's FLOPs, else one per
    element of every compute and step of its reduction."""
    if task.flops:
        return int(task.flops)
    from ir.expr import Reduce

    total = 0
    for tensor in task.workload.computes():
        n = math.prod(tensor.concrete_shape())
        body = tensor.op.body
        if isinstance(body, Reduce):
            n *= math.prod(int(a.extent.value) for a in body.axes)
        total += n
    return total


def floor_ms(workload_key: str, spec: dict[str, Any], target: str) -> float:
    """The least plausible time in ms of the workload on `target`: its work done at
    threads x vector lanes x 2 FMA units x 2 flops x 6 GHz (4x the lanes for 8-bit data)."""
    key = (workload_key, target)
    if key in _FLOORS:
        return _FLOORS[key]
    from codegen.host import parse_target
    from ir import dtype as dt
    from ir.task import task_from_spec

    task = task_from_spec(spec)
    parsed = parse_target(target)
    narrowest = min((dt.bits(t.dtype) for t in task.workload.inputs), default=32)
    lanes = max(1, parsed.vector_bits // max(8, min(32, narrowest)))
    peak = parsed.num_threads * lanes * FMA_UNITS * FLOPS_PER_FMA * PEAK_HZ
    floor = work_of(task) / peak * 1e3
    _FLOORS[key] = floor
    while len(_FLOORS) > 256:
        _FLOORS.popitem(last=False)
    return floor


def strike(session: Session, worker_id: int, reason: str) -> bool:
    """Count an implausible result, or a doubtful confirmation, against a worker; True when
    that quarantined it."""
    strikes = session.scalar(
        update(m.Worker)
        .where(m.Worker.id == worker_id)
        .values(strikes=m.Worker.strikes + 1)
        .returning(m.Worker.strikes)
    )
    if strikes is not None and strikes >= QUARANTINE_STRIKES:
        quarantine(session, worker_id, f"{strikes} strikes; the last: {reason}")
        return True
    return False


def quarantine(session: Session, worker_id: int, reason: str) -> None:
    """No more leases for the worker; its unconfirmed records are never served; its leases go back."""
    now = utc_now()
    session.execute(
        update(m.Worker)
        .where(m.Worker.id == worker_id, m.Worker.quarantined_at.is_(None))
        .values(quarantined_at=now, quarantine_reason=reason[:2000])
    )
    session.execute(
        update(m.Record)
        .where(m.Record.worker_id == worker_id, m.Record.standing == "unconfirmed")
        .values(standing="quarantined", trusted_ms=None)
    )
    session.execute(
        update(m.Candidate)
        .where(m.Candidate.lease_holder == worker_id, m.Candidate.status == "leased")
        .values(status="pending", lease_holder=None, lease_expires_at=None)
    )


def invalidate_worker(session: Session, worker_id: int) -> int:
    """Void every record of a worker (`loomtune db invalidate-worker`); how many. Quarantines it."""
    ids = list(session.scalars(select(m.Record.record_id).where(m.Record.worker_id == worker_id)))
    quarantine(session, worker_id, "invalidated by an operator")
    if ids:
        session.execute(
            update(m.Record)
            .where(m.Record.record_id.in_(ids))
            .values(standing="invalid", trusted_ms=None)
        )
        session.execute(delete(m.Final).where(m.Final.record_id.in_(ids)))
    return len(ids)


@dataclass(frozen=True)
class Verdict:
    record_id: str
    confirmed: bool
    reason: str


CONFIRMED, DOUBTED, CAUGHT = "confirmed", "doubted", "caught"
"""`judge`'s outcomes: the claim holds; refuted with a strike; refuted and quarantined."""


def judge(claim_ms: float, status: str, run_times_ms: Sequence[float]) -> tuple[str, float | None]:
    """One re-timing's outcome on a claimed ok median, and the trusted time when it holds.

    The confirmer's *fastest* run is the evidence (contention only adds time): at most
    `TOLERANCE` x the claim + `SLACK_MS` confirms it, trusted at the slower of the claim
    and that run, so the trusted time is never faster than the confirmer measured; up to
    `GROSS` x is doubt (refuted, a strike); beyond, or a deterministic failure of a kernel
    claimed ok, is a lie caught (refuted, quarantine).
    """
    if status != "ok" or not run_times_ms:
        return (CAUGHT if status in HIDING else DOUBTED), None
    fastest = min(run_times_ms)
    if fastest <= claim_ms * TOLERANCE + SLACK_MS:
        return CONFIRMED, max(claim_ms, fastest)
    if fastest <= claim_ms * GROSS + SLACK_MS:
        return DOUBTED, None
    return CAUGHT, None


def confirm(
    session: Session,
    record_id: str,
    confirmer: int,
    status: str,
    run_times_ms: Sequence[float],
) -> Verdict | None:
    """A confirmation's verdict on the record it re-timed (None: the record is gone or local).

    `judge` decides; a confirmed record's trusted time only ever grows (the slowest
    confirmation's), a refuted one is never served.
    """
    record = session.get(m.Record, record_id)
    if record is None or record.worker_id is None or record.worker_id == confirmer:
        return None  # local, or its own worker again (never leased so)
    said = f"{min(run_times_ms):.6g} ms at best" if status == "ok" and run_times_ms else status
    if record.status != "ok":
        if status == "ok" and record.status in HIDING:
            return _refute(session, record, f"worker {confirmer} measured it ok", CAUGHT)
        return None
    assert record.median_ms is not None
    outcome, trusted = judge(record.median_ms, status, run_times_ms)
    if outcome != CONFIRMED:
        return _refute(session, record, f"worker {confirmer} measured {said}", outcome)
    assert trusted is not None
    if record.standing in ("unconfirmed", "confirmed"):
        record.standing = "confirmed"
        record.trusted_ms = (
            trusted if record.trusted_ms is None else max(record.trusted_ms, trusted)
        )
    return Verdict(record_id, True, f"worker {confirmer} measured {said}")


def _refute(session: Session, record: m.Record, what: str, outcome: str) -> Verdict:
    """The record's claim failed: it is never served; its worker is quarantined when the
    lie is caught, else gets a strike."""
    claim = f"{record.median_ms:.6g} ms" if record.median_ms is not None else record.status
    reason = f"record {record.record_id}: worker {record.worker_id} posted {claim}, {what}"
    record.standing = "refuted"
    record.trusted_ms = None
    session.execute(delete(m.Final).where(m.Final.record_id == record.record_id))
    assert record.worker_id is not None
    if outcome == CAUGHT:
        quarantine(session, record.worker_id, f"failed confirmation: {reason}")
    else:
        strike(session, record.worker_id, f"doubtful confirmation: {reason}")
    return Verdict(record.record_id, False, reason)


def trusted_best(session: Session, workload_key: str, target_id: int) -> m.Record | None:
    return session.scalar(
        select(m.Record)
        .where(
            m.Record.workload_key == workload_key,
            m.Record.target_id == target_id,
            m.Record.trusted_ms.is_not(None),
        )
        .order_by(m.Record.trusted_ms, m.Record.measured_at, m.Record.record_id)
        .limit(1)
    )


def start_confirmation(session: Session, job_id: int, *, alive_seconds: float) -> list[int]:
    """Confirmation candidates for the job's fastest unconfirmed record, when it would beat the
    trusted best of its workload and target and another live worker can re-time it; their ids
    ([] when there is nothing to confirm, or nobody to confirm it)."""
    job = session.get(m.Job, job_id)
    if job is None:
        return []
    best = trusted_best(session, job.workload_key, job.target_id)
    query = (
        select(m.Record)
        .where(
            m.Record.job_id == job_id,
            m.Record.status == "ok",
            m.Record.standing == "unconfirmed",
        )
        .order_by(m.Record.median_ms, m.Record.measured_at)
        .limit(1)
    )
    if best is not None:
        query = query.where(m.Record.median_ms < best.trusted_ms)
    contender = session.scalar(query)
    if contender is None or contender.worker_id is None:
        return []
    if not _confirmers(session, job.target_id, contender.worker_id, alive_seconds):
        return []
    records = [contender] + ([best] if best is not None and best.worker_id is not None else [])
    ids = []
    for record in records:
        candidate = m.Candidate(
            job_id=job_id,
            trace=dict(record.trace),
            trace_hash=record.trace_hash,
            status="pending",
            attempts=0,
            confirms=record.record_id,
            exclude_worker=contender.worker_id,
        )
        existing = session.scalar(
            select(m.Candidate.id).where(
                m.Candidate.job_id == job_id, m.Candidate.confirms == record.record_id
            )
        )
        if existing is not None:
            continue
        session.add(candidate)
        session.flush()
        ids.append(candidate.id)
    return ids


def _confirmers(session: Session, target_id: int, excluded: int, alive_seconds: float) -> int:
    """Live workers in good standing of the target, other than `excluded`."""
    since = utc_now() - timedelta(seconds=alive_seconds)
    return int(
        session.scalar(
            select(func.count()).where(
                m.Worker.target_id == target_id,
                m.Worker.id != excluded,
                m.Worker.quarantined_at.is_(None),
                m.Worker.last_heartbeat >= since,
            )
        )
        or 0
    )


def orphaned_confirmations(
    session: Session, candidate_ids: list[int], *, alive_seconds: float
) -> list[int]:
    """Confirmation candidates still pending that no live worker in good standing may take
    (the only other worker was quarantined or died): nobody will measure them."""
    rows = session.execute(
        select(m.Candidate.id, m.Job.target_id, m.Candidate.exclude_worker)
        .join(m.Job, m.Job.id == m.Candidate.job_id)
        .where(m.Candidate.id.in_(candidate_ids), m.Candidate.status == "pending")
    ).all()
    return [
        cid
        for cid, target_id, excluded in rows
        if not _confirmers(session, target_id, excluded or 0, alive_seconds)
    ]
