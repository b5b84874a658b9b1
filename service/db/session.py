"""Transactions of the coordinator: `Sessions.read()` and `Sessions.write()`.

On PostgreSQL every write is an ordinary transaction and concurrent ones are
safe (row locks, `SKIP LOCKED`). SQLite has no row locks and its driver runs a
SELECT outside the transaction that a later UPDATE opens, so a read-then-write
(lease a candidate, check a lease) could interleave with another thread's;
there, `write()` also holds a process-wide lock. That is why `serve` on SQLite
is a single coordinator (DESIGN.md "Tuning database").
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from datetime import UTC, datetime

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

_SQLITE_LOCKS: weakref.WeakKeyDictionary[Engine, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def _sqlite_lock(engine: Engine) -> threading.RLock:
    """One lock per engine, shared by every `Sessions` on it (the API's and the job runner's)."""
    with _LOCKS_GUARD:
        if engine not in _SQLITE_LOCKS:
            _SQLITE_LOCKS[engine] = threading.RLock()
        return _SQLITE_LOCKS[engine]


class Sessions:
    """Sessions on one engine: reads, and writes that commit as one transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.factory = sessionmaker(engine, expire_on_commit=False)
        self._lock = _sqlite_lock(engine) if engine.dialect.name == "sqlite" else None

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        """A session for queries; nothing it changes is committed."""
        with self.factory() as session:
            yield session

    @contextlib.contextmanager
    def write(self) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        lock = self._lock if self._lock is not None else contextlib.nullcontext()
        with lock, self.factory.begin() as session:
            yield session


def as_utc(value: datetime) -> datetime:
    """Every stored time is UTC; SQLite reads it back naive."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def as_utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else as_utc(value)
