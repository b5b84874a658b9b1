"""`SQLDatabase`: the tuner's `Database` protocol on SQLAlchemy (SQLite or PostgreSQL).

Every query names a target (records of two targets never mix); `best` and
`top_k` read status-ok records only, through the index
(workload_key, target_id, status, median_ms). A record whose id, or whose
trace for its (workload, target), is already stored is skipped by the
database itself (`ON CONFLICT DO NOTHING`), so concurrent writers and
repeated imports never duplicate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, Select, and_, bindparam, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from service.db import models as m
from service.db.session import as_utc
from tuner.database import DatabaseError, FinalChoice, TuningRecord, thread_siblings, utc_now


def dialect_insert(session: Session, table: Any) -> Any:
    """INSERT of the session's dialect (SQLite or PostgreSQL), for `ON CONFLICT` clauses."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise DatabaseError(f"unsupported database backend {dialect!r} (SQLite or PostgreSQL)")


def _parse_target(canonical: str) -> tuple[str, list[str], int]:
    """cpu, features, threads of a canonical target string; anything else is refused."""
    from codegen.host import parse_target

    try:
        target = parse_target(canonical)
    except Exception as e:  # a TargetError, re-raised with what the database needs
        raise DatabaseError(f"record target {canonical!r}: {e}") from None
    if target.canonical() != canonical:
        raise DatabaseError(
            f"record target {canonical!r} is not canonical ({target.canonical()!r})"
        )
    return target.cpu, list(target.features), target.num_threads


def record_from_row(rec: m.Record, wl: m.Workload, canonical: str) -> TuningRecord:
    """A records row (with its workload and canonical target) as the tuner's record.

    The pair of `record_to_row`: every reader and writer of the records table goes
    through these two.
    """
    return TuningRecord(
        record_id=rec.record_id,
        workload_key=rec.workload_key,
        op=wl.op,
        params=wl.params,
        definition=wl.definition,
        target=canonical,
        trace=rec.trace,
        trace_hash=rec.trace_hash,
        run_times_ms=tuple(rec.run_times),
        median_ms=rec.median_ms,
        status=rec.status,
        message=rec.message,
        worker=rec.worker,
        loomtune_version=rec.loomtune_version,
        llvm_version=rec.llvm_version,
        measured_at=as_utc(rec.measured_at),
        job_id=rec.job_id,
    )


def record_to_row(
    *,
    record_id: str,
    workload_key: str,
    target_id: int | None,
    job_id: int | None,
    candidate_id: int | None,
    trace: Mapping[str, Any],
    trace_hash: str,
    run_times_ms: Sequence[float],
    median_ms: float | None,
    status: str,
    message: str,
    worker: str,
    loomtune_version: str,
    llvm_version: str,
    measured_at: datetime,
    worker_id: int | None = None,
) -> dict[str, Any]:
    """The values of one records row (the pair of `record_from_row`).

    A record with a `worker_id` is a remote worker's word (unconfirmed, not trusted);
    one without is this machine's own measurement or an operator's import (trusted).
    """
    remote = worker_id is not None
    return {
        "worker_id": worker_id,
        "standing": "unconfirmed" if remote else "local",
        "trusted_ms": None if remote else median_ms,
        "record_id": record_id,
        "workload_key": workload_key,
        "target_id": target_id,
        "job_id": job_id,
        "candidate_id": candidate_id,
        "trace": dict(trace),
        "trace_hash": trace_hash,
        "run_times": list(run_times_ms),
        "median_ms": median_ms,
        "status": status,
        "message": message,
        "worker": worker,
        "loomtune_version": loomtune_version,
        "llvm_version": llvm_version,
        "measured_at": measured_at,
    }


def fetch_records(session: Session, query: Select[Any]) -> list[TuningRecord]:
    """The records a `select_records()` query finds, as the tuner's records."""
    return [record_from_row(rec, wl, canonical) for rec, wl, canonical in session.execute(query)]


def select_records() -> Select[Any]:
    """Records with their workload and canonical target: what `record_from_row` reads."""
    return (
        select(m.Record, m.Workload, m.Target.canonical)
        .join(m.Workload, m.Workload.key == m.Record.workload_key)
        .join(m.Target, m.Target.id == m.Record.target_id)
    )


_BY_MEDIAN = (m.Record.median_ms, m.Record.measured_at, m.Record.record_id)
"""How ok records rank: lowest median first, ties to the earliest."""
_BY_TRUSTED = (m.Record.trusted_ms, m.Record.measured_at, m.Record.record_id)
"""How `best` ranks: the trusted time (docs/architecture.md "Trust")."""

UNSERVED = ("refuted", "quarantined", "invalid")
"""Standings of records never served, nor used to guide a search."""
SERVED = m.Record.standing.not_in(UNSERVED)


def best_record_of(session: Session, workload_key: str, target_id: int) -> TuningRecord | None:
    """The finalists' choice, else the record with the lowest trusted time (a local record's
    median, a confirmed record's confirmed time): one worker's word is never the best here."""
    chosen = (
        select(m.Final.record_id)
        .join(m.Record, m.Record.record_id == m.Final.record_id)
        .where(
            m.Final.workload_key == workload_key,
            m.Final.target_id == target_id,
            m.Record.trusted_ms.is_not(None),
        )
    )
    lowest = (
        select(m.Record.record_id)
        .where(
            m.Record.workload_key == workload_key,
            m.Record.target_id == target_id,
            m.Record.trusted_ms.is_not(None),
        )
        .order_by(*_BY_TRUSTED)
        .limit(1)
    )
    best_id = func.coalesce(chosen.scalar_subquery(), lowest.scalar_subquery())
    rows = session.execute(select_records().where(m.Record.record_id == best_id)).all()
    return record_from_row(*rows[0]) if rows else None


def final_of(
    session: Session, workload_key: str, target_id: int, canonical: str
) -> FinalChoice | None:
    row = session.execute(
        select(m.Final.record_id, m.Final.retimed_ms, m.Final.decided_at).where(
            m.Final.workload_key == workload_key, m.Final.target_id == target_id
        )
    ).first()
    return (
        None
        if row is None
        else FinalChoice(workload_key, canonical, row[0], row[1], as_utc(row[2]))
    )


class SQLDatabase:
    """A `tuner.database.Database` in a SQL database (call `ensure_schema` first)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sessions = sessionmaker(engine, expire_on_commit=False)
        self._target_ids: dict[str, int] = {}
        self._workloads: set[str] = set()

    # -- writing ---------------------------------------------------------------------

    def _target_id(self, session: Session, canonical: str, *, create: bool) -> int | None:
        if canonical in self._target_ids:
            return self._target_ids[canonical]
        found = session.scalar(select(m.Target.id).where(m.Target.canonical == canonical))
        if found is None and create:
            cpu, features, threads = _parse_target(canonical)
            session.execute(
                dialect_insert(session, m.Target)
                .values(canonical=canonical, cpu=cpu, features=features, threads=threads)
                .on_conflict_do_nothing()
            )
            found = session.scalar(select(m.Target.id).where(m.Target.canonical == canonical))
        if found is not None:
            self._target_ids[canonical] = found
        return found

    def _commit_workload(
        self,
        session: Session,
        key: str,
        op: str,
        params: Mapping[str, int],
        definition: Mapping[str, Any],
    ) -> None:
        if key in self._workloads:
            return
        session.execute(
            dialect_insert(session, m.Workload)
            .values(
                key=key,
                op=op,
                params=dict(params),
                definition=dict(definition),
                created_at=utc_now(),
            )
            .on_conflict_do_nothing()
        )

    def commit_workload(
        self, workload_key: str, op: str, params: Mapping[str, int], definition: Mapping[str, Any]
    ) -> None:
        with self.sessions.begin() as session:
            self._commit_workload(session, workload_key, op, params, definition)
        self._workloads.add(workload_key)

    def commit_record(self, record: TuningRecord) -> bool:
        return self.commit_records([record]) == 1

    def commit_records(
        self, records: Iterable[TuningRecord], *, candidate_ids: Sequence[int | None] = ()
    ) -> int:
        """Store records in one transaction (all or nothing); how many were new."""
        batch = list(records)
        if not batch:
            return 0
        added = 0
        new_workloads: set[str] = set()
        try:
            with self.sessions.begin() as session:
                for i, r in enumerate(batch):
                    self._commit_workload(session, r.workload_key, r.op, r.params, r.definition)
                    new_workloads.add(r.workload_key)
                    target_id = self._target_id(session, r.target, create=True)
                    result = session.execute(
                        dialect_insert(session, m.Record)
                        .values(
                            record_to_row(
                                record_id=r.record_id,
                                workload_key=r.workload_key,
                                target_id=target_id,
                                job_id=r.job_id,
                                candidate_id=candidate_ids[i] if i < len(candidate_ids) else None,
                                trace=r.trace,
                                trace_hash=r.trace_hash,
                                run_times_ms=r.run_times_ms,
                                median_ms=r.median_ms,
                                status=r.status,
                                message=r.message,
                                worker=r.worker,
                                loomtune_version=r.loomtune_version,
                                llvm_version=r.llvm_version,
                                measured_at=r.measured_at,
                            )
                        )
                        .on_conflict_do_nothing()
                        # rowcount is not reliable here (psycopg reports -1): count what came back.
                        .returning(m.Record.record_id)
                    )
                    added += len(result.all())
        except BaseException:
            # Ids learnt inside a rolled-back transaction may not exist.
            self._target_ids.clear()
            raise
        self._workloads |= new_workloads
        return added

    # -- reading ---------------------------------------------------------------------

    def _records(self, query: Select[Any]) -> list[TuningRecord]:
        with self.sessions() as session:
            return fetch_records(session, query)

    def _lookup_target(self, target: str) -> int | None:
        with self.sessions() as session:
            return self._target_id(session, target, create=False)

    _select = staticmethod(select_records)

    def has_measured(self, workload_key: str, target: str, trace_hash: str) -> bool:
        target_id = self._lookup_target(target)
        if target_id is None:
            return False
        query = select(m.Record.record_id).where(
            m.Record.workload_key == workload_key,
            m.Record.target_id == target_id,
            m.Record.trace_hash == trace_hash,
        )
        with self.sessions() as session:
            return session.scalar(query.limit(1)) is not None

    def top_k(self, workload_key: str, target: str, k: int) -> list[TuningRecord]:
        target_id = self._lookup_target(target)
        if target_id is None or k <= 0:
            return []
        return self._records(
            self._select()
            .where(
                m.Record.workload_key == workload_key,
                m.Record.target_id == target_id,
                m.Record.status == "ok",
                SERVED,
            )
            .order_by(*_BY_MEDIAN)
            .limit(k)
        )

    def find_record(self, workload_key: str, target: str, trace_hash: str) -> TuningRecord | None:
        target_id = self._lookup_target(target)
        if target_id is None:
            return None
        found = self._records(
            self._select()
            .where(
                m.Record.workload_key == workload_key,
                m.Record.target_id == target_id,
                m.Record.trace_hash == trace_hash,
                m.Record.status == "ok",
                SERVED,
            )
            .limit(1)
        )
        return found[0] if found else None

    def best(self, workload_key: str, target: str) -> TuningRecord | None:
        target_id = self._lookup_target(target)
        if target_id is None:
            return None
        with self.sessions() as session:
            return best_record_of(session, workload_key, target_id)

    def best_of_op(
        self, op: str, target: str, *, exclude_workload_key: str | None = None, limit: int = 64
    ) -> list[TuningRecord]:
        target_id = self._lookup_target(target)
        if target_id is None or limit <= 0:
            return []
        # For each workload of the operator, the finalists' choice or else its
        # lowest median, found by an index seek on (workload_key, target_id,
        # status, median_ms): a window over every record of the operator costs
        # time in proportion to all of them.
        other = m.Record.__table__.alias("other")
        lowest = (
            select(other.c.record_id)
            .where(
                other.c.workload_key == m.Workload.key,
                other.c.target_id == target_id,
                other.c.trusted_ms.is_not(None),
            )
            .order_by(other.c.trusted_ms, other.c.measured_at, other.c.record_id)
            .limit(1)
            .scalar_subquery()
        )
        chosen = (
            select(m.Final.record_id)
            .where(m.Final.workload_key == m.Workload.key, m.Final.target_id == target_id)
            .scalar_subquery()
        )
        query = self._select().where(
            m.Workload.op == op, m.Record.record_id == func.coalesce(chosen, lowest)
        )
        if exclude_workload_key is not None:
            query = query.where(m.Workload.key != exclude_workload_key)
        return self._records(query.order_by(*_BY_MEDIAN).limit(limit))

    def record_counts(self, keys: Sequence[str], target: str) -> dict[str, int]:
        query = (
            select(m.Record.workload_key, func.count())
            .join(m.Target, m.Target.id == m.Record.target_id)
            .where(m.Target.canonical == target, m.Record.workload_key.in_(list(keys)))
            .group_by(m.Record.workload_key)
        )
        with self.sessions() as session:
            counts = {k: int(n) for k, n in session.execute(query)}
        return {k: counts.get(k, 0) for k in keys}

    def other_thread_counts(self, workload_key: str, target: str) -> list[str]:
        # The targets of the same CPU name with ok records of the workload (a handful),
        # compared whole in Python: the features are a JSON list, which neither
        # backend compares portably.
        cpu = target.partition("-mcpu=")[2].split(" ")[0]
        if not cpu:
            return []
        has_records = (
            select(m.Record.record_id)
            .where(
                m.Record.workload_key == workload_key,
                m.Record.target_id == m.Target.id,
                m.Record.status == "ok",
                SERVED,
            )
            .exists()
        )
        with self.sessions() as session:
            found = session.scalars(
                select(m.Target.canonical).where(m.Target.cpu == cpu, has_records)
            ).all()
        return thread_siblings(target, found)

    # -- the finalists' choices ------------------------------------------------------

    def commit_final(
        self, workload_key: str, target: str, record_id: str, retimed_ms: float
    ) -> FinalChoice:
        choice = FinalChoice(workload_key, target, record_id, retimed_ms)
        with self.sessions.begin() as session:
            target_id = self._target_id(session, target, create=False)
            found = session.scalar(
                select(m.Record.record_id).where(
                    m.Record.record_id == record_id,
                    m.Record.workload_key == workload_key,
                    m.Record.target_id == target_id,
                    m.Record.status == "ok",
                )
            )
            if target_id is None or found is None:
                raise DatabaseError(
                    f"record {record_id} is not an ok record of workload {workload_key} on {target}"
                )
            values = {
                "workload_key": workload_key,
                "target_id": target_id,
                "record_id": record_id,
                "retimed_ms": choice.retimed_ms,
                "decided_at": choice.decided_at,
            }
            stmt = dialect_insert(session, m.Final).values(**values)
            session.execute(
                stmt.on_conflict_do_update(
                    index_elements=[m.Final.workload_key, m.Final.target_id],
                    set_={
                        "record_id": stmt.excluded.record_id,
                        "retimed_ms": stmt.excluded.retimed_ms,
                        "decided_at": stmt.excluded.decided_at,
                    },
                )
            )
        return choice

    def final(self, workload_key: str, target: str) -> FinalChoice | None:
        target_id = self._lookup_target(target)
        if target_id is None:
            return None
        with self.sessions() as session:
            return final_of(session, workload_key, target_id, target)

    def training_records(self, target: str, *, limit: int | None = None) -> list[TuningRecord]:
        target_id = self._lookup_target(target)
        if target_id is None:
            return []
        query = (
            self._select()
            .where(m.Record.target_id == target_id)
            .order_by(m.Record.measured_at, m.Record.record_id)
        )
        return self._records(query if limit is None else query.limit(max(limit, 0)))

    def records(self, *, op: str | None = None, target: str | None = None) -> list[TuningRecord]:
        """Every record (of an operator, of a target), oldest first: what `db export` writes."""
        query = self._select().order_by(m.Record.measured_at, m.Record.record_id)
        if op is not None:
            query = query.where(m.Workload.op == op)
        if target is not None:
            query = query.where(m.Target.canonical == target)
        return self._records(query)

    # -- cost models -----------------------------------------------------------------

    def save_cost_model(self, target: str, model: bytes, samples: int) -> None:
        with self.sessions.begin() as session:
            target_id = self._target_id(session, target, create=True)
            values = {
                "target_id": target_id,
                "model": bytes(model),
                "samples": int(samples),
                "updated_at": utc_now(),
            }
            stmt = dialect_insert(session, m.CostModel).values(**values)
            session.execute(
                stmt.on_conflict_do_update(
                    index_elements=[m.CostModel.target_id],
                    set_={
                        "model": stmt.excluded.model,
                        "samples": stmt.excluded.samples,
                        "updated_at": stmt.excluded.updated_at,
                    },
                )
            )

    def load_cost_model(self, target: str) -> tuple[bytes, int] | None:
        target_id = self._lookup_target(target)
        if target_id is None:
            return None
        with self.sessions() as session:
            row = session.execute(
                select(m.CostModel.model, m.CostModel.samples).where(
                    m.CostModel.target_id == target_id
                )
            ).first()
        return None if row is None else (bytes(row[0]), int(row[1]))


class DatabaseUnavailableError(DatabaseError):
    """The configured database cannot be reached or opened."""


def open_database(url: str | None = None) -> SQLDatabase:
    """The configured database, its schema created or checked (what every command opens)."""
    from sqlalchemy.exc import OperationalError

    from service.db.engine import make_engine
    from service.db.schema import ensure_schema

    engine = make_engine(url)
    try:
        ensure_schema(engine)
    except OperationalError as e:
        where = engine.url.render_as_string(hide_password=True)
        reason = str(e.orig).strip().splitlines()[0] if e.orig is not None else type(e).__name__
        engine.dispose()
        raise DatabaseUnavailableError(f"cannot open the database {where}: {reason}") from None
    return SQLDatabase(engine)


def _lease_statement() -> Any:
    c, j = m.Candidate.__table__, m.Job.__table__
    picked = (
        select(c.c.id)
        .join(j, j.c.id == c.c.job_id)
        .where(
            j.c.target_id == bindparam("tid"),
            j.c.status == "running",
            or_(c.c.exclude_worker.is_(None), c.c.exclude_worker != bindparam("wid")),
            or_(
                c.c.status == "pending",
                and_(c.c.status == "leased", c.c.lease_expires_at < bindparam("now")),
            ),
        )
        .order_by(c.c.id)
        .limit(bindparam("n"))
        .with_for_update(of=c, skip_locked=True)
        .cte("picked")
    )
    return (
        update(c)
        .where(c.c.id.in_(select(picked.c.id)))
        .values(
            status="leased",
            lease_holder=bindparam("wid"),
            lease_expires_at=bindparam("until"),
            attempts=c.c.attempts + 1,
        )
        .returning(
            c.c.id, c.c.job_id, c.c.trace, c.c.trace_hash, c.c.attempts, c.c.lease_expires_at
        )
    )


_LEASE = _lease_statement()
"""Built once: the lease is the coordinator's most frequent statement."""


def lease_candidates(
    session: Session,
    target_id: int,
    worker: int,
    n: int,
    lease_seconds: float,
    *,
    now: datetime | None = None,
) -> list[Any]:
    """Lease up to `n` pending (or expired) candidates of the target's running jobs to `worker`.

    Oldest candidate first, in one statement: it picks through the partial
    index of open candidates (`ix_candidates_open`: pending or leased, so done
    ones cost nothing however many there are) and returns the leased rows
    (id, job_id, trace, trace_hash, attempts, lease_expires_at) in id order.
    On PostgreSQL, `FOR UPDATE SKIP LOCKED` lets coordinators lease at once
    without waiting on each other or leasing a candidate twice. SQLite ignores
    it and serialises writers instead (a second writer with a stale snapshot
    fails rather than double-leases): there, one coordinator only. The
    caller's transaction commits the lease.
    """
    now = now or utc_now()
    params = {
        "tid": target_id,
        "now": now,
        "n": n,
        "wid": worker,
        "until": now + timedelta(seconds=lease_seconds),
    }
    rows = session.execute(_LEASE, params).all()
    return sorted(rows, key=lambda row: row.id)
