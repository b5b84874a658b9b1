"""The tuning database as the tuner sees it: records of measurements and a protocol.

The tuner never speaks SQL (STYLE.md habit 14): it talks to a `Database`, and
the service's SQLAlchemy store (`service/db/store.py`) and the in-memory store
below are two implementations of the same protocol, tested by one suite.

Rules every implementation keeps:

- records of two targets never mix: every query names a target (its
  canonical string, see `ir.target.Target.canonical`);
- only `ok` records have a median and only they are ever "best": a wrong
  result is never fast, however short its run time;
- a trace counts as measured once per (workload key, target, trace hash):
  committing a record whose record id, or whose trace, is already stored for
  that workload and target stores nothing (so imports can be repeated);
- "best" is the finalists' choice where a tuning run left one (`FinalChoice`),
  else the ok record with the lowest median.
"""

from __future__ import annotations

import math
import statistics
import threading
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from ir.errors import LoomtuneError
from ir.target import Target, TargetError

STATUSES = ("ok", "compile_error", "runtime_error", "timeout", "wrong_result", "crashed")
"""Every outcome of a measurement (STYLE.md habit 9); only `ok` has a median."""

RECORD_FORMAT = "loomtune.record/1"
"""The `format` of one line of `loomtune db export`."""


class DatabaseError(LoomtuneError):
    """A record or an exported line that cannot be stored as it is."""


def median_of(run_times_ms: Sequence[float]) -> float:
    """The median run time in ms: the number a record is ranked by."""
    return float(statistics.median(run_times_ms))


def utc_now() -> datetime:
    return datetime.now(UTC)


def _as_utc(value: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything stored is UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@dataclass(frozen=True)
class TuningRecord:
    """One measurement of one trace of one workload on one target.

    Attributes:
        record_id: a UUID string given when the candidate was measured; it
            identifies the record in every database it is copied to.
        workload_key: the workload's structural hash (`Task.key`).
        op: the operator's (or custom workload's) name.
        params: the workload's parameters (name -> int).
        definition: the workload definition (`Task.to_definition()`), so a
            record can rebuild its workload anywhere.
        target: the canonical target string.
        trace: the trace as JSON (`Trace.to_json()`).
        trace_hash: `Trace.hash` of that trace.
        run_times_ms: every timed run, in ms (empty when none succeeded).
        median_ms: the median of `run_times_ms` for `ok` records, else None.
        status: one of `STATUSES`.
        message: why it failed ("" when ok).
        worker: which worker (or local pool) measured it.
        loomtune_version, llvm_version: what built and compiled it.
        measured_at: when, in UTC.
        job_id: the coordinator job it belongs to, if any (local to one database).
    """

    record_id: str
    workload_key: str
    op: str
    params: Mapping[str, int]
    definition: Mapping[str, Any]
    target: str
    trace: Mapping[str, Any]
    trace_hash: str
    run_times_ms: tuple[float, ...]
    median_ms: float | None
    status: str
    message: str = ""
    worker: str = ""
    loomtune_version: str = ""
    llvm_version: str = ""
    measured_at: datetime = field(default_factory=utc_now)
    job_id: int | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise DatabaseError(
                f"record status must be one of {', '.join(STATUSES)}, got {self.status!r}"
            )
        try:
            uuid.UUID(self.record_id)
        except (ValueError, TypeError, AttributeError):
            raise DatabaseError(
                f"record_id must be a UUID string, got {self.record_id!r}"
            ) from None
        for name in ("workload_key", "op", "target", "trace_hash"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise DatabaseError(f"record {name} must be a non-empty string")
        times = tuple(float(t) for t in self.run_times_ms)
        object.__setattr__(self, "run_times_ms", times)
        if self.status == "ok":
            if self.median_ms is None or not math.isfinite(self.median_ms) or self.median_ms <= 0:
                raise DatabaseError(f"an ok record needs a positive median, got {self.median_ms!r}")
            object.__setattr__(self, "median_ms", float(self.median_ms))
        elif self.median_ms is not None:
            raise DatabaseError(f"a {self.status} record has no median (got {self.median_ms!r})")
        if not isinstance(self.measured_at, datetime):
            raise DatabaseError("record measured_at must be a datetime")
        object.__setattr__(self, "measured_at", _as_utc(self.measured_at))
        object.__setattr__(self, "params", dict(self.params))

    @staticmethod
    def create(
        *,
        workload_key: str,
        op: str,
        params: Mapping[str, int],
        definition: Mapping[str, Any],
        target: str,
        trace: Mapping[str, Any],
        trace_hash: str,
        run_times_ms: Sequence[float],
        status: str,
        message: str = "",
        worker: str = "",
        loomtune_version: str = "",
        llvm_version: str = "",
        job_id: int | None = None,
    ) -> TuningRecord:
        """A new record: a fresh record id, now as its time, the median when ok."""
        times = tuple(float(t) for t in run_times_ms)
        median = median_of(times) if status == "ok" and times else None
        return TuningRecord(
            str(uuid.uuid4()),
            workload_key,
            op,
            dict(params),
            dict(definition),
            target,
            dict(trace),
            trace_hash,
            times,
            median,
            status,
            message,
            worker,
            loomtune_version,
            llvm_version,
            utc_now(),
            job_id,
        )

    # -- one line of `loomtune db export` --------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """A self-contained export line; the job id is local to a database and is left out."""
        return {
            "format": RECORD_FORMAT,
            "record_id": self.record_id,
            "workload": {
                "key": self.workload_key,
                "op": self.op,
                "params": dict(self.params),
                "definition": self.definition,
            },
            "target": self.target,
            "trace": self.trace,
            "trace_hash": self.trace_hash,
            "run_times_ms": list(self.run_times_ms),
            "median_ms": self.median_ms,
            "status": self.status,
            "message": self.message,
            "worker": self.worker,
            "loomtune_version": self.loomtune_version,
            "llvm_version": self.llvm_version,
            "measured_at": self.measured_at.isoformat(),
        }

    @staticmethod
    def from_json(data: Any) -> TuningRecord:
        """Read an export line; every problem is a `DatabaseError` naming the field."""
        if not isinstance(data, dict):
            raise DatabaseError(f"a record is a JSON object, got {type(data).__name__}")
        if data.get("format") != RECORD_FORMAT:
            raise DatabaseError(
                f"unknown record format {data.get('format')!r}; this loomtune reads {RECORD_FORMAT!r}"
            )
        workload = data.get("workload")
        if not isinstance(workload, dict):
            raise DatabaseError("record workload must be an object")
        params = workload.get("params")
        if not isinstance(params, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in params.values()
        ):
            raise DatabaseError("record workload.params must map names to integers")
        if not isinstance(workload.get("definition"), dict):
            raise DatabaseError("record workload.definition must be an object")
        if not isinstance(data.get("trace"), dict):
            raise DatabaseError("record trace must be an object")
        times = data.get("run_times_ms")
        if not isinstance(times, list) or not all(
            isinstance(t, int | float) and not isinstance(t, bool) for t in times
        ):
            raise DatabaseError("record run_times_ms must be a list of numbers")
        median = data.get("median_ms")
        if median is not None and (not isinstance(median, int | float) or isinstance(median, bool)):
            raise DatabaseError("record median_ms must be a number or null")
        for name in ("message", "worker", "loomtune_version", "llvm_version"):
            if not isinstance(data.get(name, ""), str):
                raise DatabaseError(f"record {name} must be a string")
        try:
            measured_at = datetime.fromisoformat(data["measured_at"])
        except (KeyError, TypeError, ValueError):
            raise DatabaseError("record measured_at must be an ISO 8601 time") from None
        return TuningRecord(
            record_id=data.get("record_id"),  # type: ignore[arg-type]  # checked in __post_init__
            workload_key=workload.get("key"),  # type: ignore[arg-type]
            op=workload.get("op"),  # type: ignore[arg-type]
            params=params,
            definition=workload["definition"],
            target=data.get("target"),  # type: ignore[arg-type]
            trace=data["trace"],
            trace_hash=data.get("trace_hash"),  # type: ignore[arg-type]
            run_times_ms=tuple(times),
            median_ms=None if median is None else float(median),
            status=data.get("status"),  # type: ignore[arg-type]
            message=data.get("message", ""),
            worker=data.get("worker", ""),
            loomtune_version=data.get("loomtune_version", ""),
            llvm_version=data.get("llvm_version", ""),
            measured_at=measured_at,
        )


@dataclass(frozen=True)
class FinalChoice:
    """The record a tuning run's finalists chose for a workload on a target.

    Tuning medians are a few short repeats each, taken at different moments of a
    drifting machine, so the lowest one is often a lucky draw; the finalists
    (`workers/finalists.py`) are re-timed together, which makes their choice the
    better evidence of what is fastest, and `best` prefers it.
    """

    workload_key: str
    target: str
    record_id: str
    retimed_ms: float
    """The chosen record's median when re-timed beside the other finalists."""
    decided_at: datetime = field(default_factory=utc_now)

    def __post_init__(self) -> None:
        if (
            not isinstance(self.retimed_ms, int | float)
            or not math.isfinite(self.retimed_ms)
            or self.retimed_ms <= 0
        ):
            raise DatabaseError(
                f"a final choice needs a positive re-timed median, got {self.retimed_ms!r}"
            )
        object.__setattr__(self, "retimed_ms", float(self.retimed_ms))
        object.__setattr__(self, "decided_at", _as_utc(self.decided_at))


@runtime_checkable
class Database(Protocol):
    """Where measurements go and where the search looks for what is known.

    Targets are canonical target strings; every query is for one target.
    """

    def commit_workload(
        self, workload_key: str, op: str, params: Mapping[str, int], definition: Mapping[str, Any]
    ) -> None:
        """Remember a workload (idempotent); records also commit their workload."""

    def commit_record(self, record: TuningRecord) -> bool:
        """Store one record; False when its record id or its trace is already stored."""

    def commit_records(self, records: Iterable[TuningRecord]) -> int:
        """Store records all or nothing (one transaction); how many were new."""

    def has_measured(self, workload_key: str, target: str, trace_hash: str) -> bool:
        """Whether this trace was measured (with any outcome) for the workload on the target."""

    def top_k(self, workload_key: str, target: str, k: int) -> list[TuningRecord]:
        """The k fastest ok records, by median, fastest first (ties: earliest)."""

    def find_record(self, workload_key: str, target: str, trace_hash: str) -> TuningRecord | None:
        """The ok record of this trace for the workload on the target, or None."""

    def best(self, workload_key: str, target: str) -> TuningRecord | None:
        """The finalists' choice if a run left one, else the ok record with the lowest median; or None."""

    def best_of_op(
        self, op: str, target: str, *, exclude_workload_key: str | None = None, limit: int = 64
    ) -> list[TuningRecord]:
        """The best record (as `best` picks it) of each other workload of operator `op` on the target.

        Fastest first; the search seeds other parameters from these (`--repair`).
        """

    def record_counts(self, keys: Sequence[str], target: str) -> dict[str, int]:
        """Records per workload key on the target, every status: the trials spent on each."""

    def other_thread_counts(self, workload_key: str, target: str) -> list[str]:
        """The targets with the target's CPU and features at another thread count that
        have ok records of the workload: nearest thread count first (ties: fewer threads).

        The search seeds a thread count from the workload's bests at the others: the
        target string (hence every other query) includes the thread count.
        """

    def commit_final(
        self, workload_key: str, target: str, record_id: str, retimed_ms: float
    ) -> FinalChoice:
        """Keep the finalists' choice, replacing the previous one; the record must be an ok
        record of that workload on that target (else `DatabaseError`)."""

    def final(self, workload_key: str, target: str) -> FinalChoice | None:
        """The finalists' last choice for the workload on the target, or None."""

    def training_records(self, target: str, *, limit: int | None = None) -> list[TuningRecord]:
        """Records of a target, every status, oldest first: what a cost model learns from."""

    def save_cost_model(self, target: str, model: bytes, samples: int) -> None:
        """Keep the cost model of a target (replacing the previous one)."""

    def load_cost_model(self, target: str) -> tuple[bytes, int] | None:
        """The target's cost model and how many samples trained it, or None."""


def thread_siblings(target: str, others: Iterable[str]) -> list[str]:
    """Those of `others` that are `target` (canonical) at another thread count, nearest
    thread count first (ties: fewer threads); [] when `target` is not a canonical string."""
    try:
        mine = Target.parse(target)
    except TargetError:
        return []
    found: dict[str, int] = {}
    for text in others:
        try:
            other = Target.parse(text)
        except TargetError:
            continue
        if other.with_threads(mine.num_threads) == mine and other.num_threads != mine.num_threads:
            found[text] = other.num_threads
    return sorted(found, key=lambda t: (abs(found[t] - mine.num_threads), found[t]))


def _rank(record: TuningRecord) -> tuple[float, datetime, str]:
    assert record.median_ms is not None
    return (record.median_ms, record.measured_at, record.record_id)


class InMemoryDatabase:
    """A `Database` held in a process's memory: for tests and throwaway tuning runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workloads: dict[str, tuple[str, dict[str, int], dict[str, Any]]] = {}
        self._records: dict[str, TuningRecord] = {}
        self._measured: set[tuple[str, str, str]] = set()
        self._models: dict[str, tuple[bytes, int]] = {}
        self._finals: dict[tuple[str, str], FinalChoice] = {}

    def commit_workload(
        self, workload_key: str, op: str, params: Mapping[str, int], definition: Mapping[str, Any]
    ) -> None:
        with self._lock:
            self._workloads.setdefault(workload_key, (op, dict(params), dict(definition)))

    def commit_record(self, record: TuningRecord) -> bool:
        return self.commit_records([record]) == 1

    def commit_records(self, records: Iterable[TuningRecord]) -> int:
        batch = list(records)  # read them all before changing anything: all or nothing
        added = 0
        with self._lock:
            for r in batch:
                key = (r.workload_key, r.target, r.trace_hash)
                if r.record_id in self._records or key in self._measured:
                    continue
                self._workloads.setdefault(
                    r.workload_key, (r.op, dict(r.params), dict(r.definition))
                )
                self._records[r.record_id] = r
                self._measured.add(key)
                added += 1
        return added

    def has_measured(self, workload_key: str, target: str, trace_hash: str) -> bool:
        return (workload_key, target, trace_hash) in self._measured

    def _ok(self, target: str) -> list[TuningRecord]:
        with self._lock:
            return [r for r in self._records.values() if r.target == target and r.status == "ok"]

    def top_k(self, workload_key: str, target: str, k: int) -> list[TuningRecord]:
        ok = [r for r in self._ok(target) if r.workload_key == workload_key]
        return sorted(ok, key=_rank)[: max(k, 0)]

    def find_record(self, workload_key: str, target: str, trace_hash: str) -> TuningRecord | None:
        found = (
            r
            for r in self._ok(target)
            if r.workload_key == workload_key and r.trace_hash == trace_hash
        )
        return next(found, None)

    def best(self, workload_key: str, target: str) -> TuningRecord | None:
        chosen = self.final(workload_key, target)
        if chosen is not None:
            return self._records[chosen.record_id]
        top = self.top_k(workload_key, target, 1)
        return top[0] if top else None

    def best_of_op(
        self, op: str, target: str, *, exclude_workload_key: str | None = None, limit: int = 64
    ) -> list[TuningRecord]:
        best: dict[str, TuningRecord] = {}
        for r in self._ok(target):
            if r.op != op or r.workload_key == exclude_workload_key:
                continue
            if r.workload_key not in best or _rank(r) < _rank(best[r.workload_key]):
                best[r.workload_key] = r
        for key in best:
            chosen = self.final(key, target)
            if chosen is not None:
                best[key] = self._records[chosen.record_id]
        return sorted(best.values(), key=_rank)[: max(limit, 0)]

    def record_counts(self, keys: Sequence[str], target: str) -> dict[str, int]:
        with self._lock:
            counts = Counter(r.workload_key for r in self._records.values() if r.target == target)
        return {k: counts.get(k, 0) for k in keys}

    def other_thread_counts(self, workload_key: str, target: str) -> list[str]:
        with self._lock:
            targets = {
                r.target
                for r in self._records.values()
                if r.workload_key == workload_key and r.status == "ok"
            }
        return thread_siblings(target, targets)

    def commit_final(
        self, workload_key: str, target: str, record_id: str, retimed_ms: float
    ) -> FinalChoice:
        choice = FinalChoice(workload_key, target, record_id, retimed_ms)
        with self._lock:
            record = self._records.get(record_id)
            if record is None or (record.workload_key, record.target, record.status) != (
                workload_key,
                target,
                "ok",
            ):
                raise DatabaseError(
                    f"record {record_id} is not an ok record of workload {workload_key} on {target}"
                )
            self._finals[(workload_key, target)] = choice
        return choice

    def final(self, workload_key: str, target: str) -> FinalChoice | None:
        return self._finals.get((workload_key, target))

    def training_records(self, target: str, *, limit: int | None = None) -> list[TuningRecord]:
        with self._lock:
            rows = [r for r in self._records.values() if r.target == target]
        rows.sort(key=lambda r: (r.measured_at, r.record_id))
        return rows if limit is None else rows[: max(limit, 0)]

    def save_cost_model(self, target: str, model: bytes, samples: int) -> None:
        with self._lock:
            self._models[target] = (bytes(model), int(samples))

    def load_cost_model(self, target: str) -> tuple[bytes, int] | None:
        return self._models.get(target)
