"""Schema checks: every command creates the schema on an empty database; only the
embedded SQLite file upgrades itself; anything else at an older revision is
refused until `loomtune db upgrade` (DESIGN.md "Tuning database").
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Connection, Engine, inspect, text

import migrations
from ir.errors import LoomtuneError

# Any constant both sides agree on: serialises schema creation across coordinators.
_PG_SCHEMA_LOCK = 0x6C6F6F6D  # "loom"


class StaleSchemaError(LoomtuneError):
    """The database's schema is not the one this loomtune was built for."""


def current_revision(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def _known(revision: str) -> bool:
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    script = ScriptDirectory.from_config(migrations.alembic_config())
    try:
        return script.get_revision(revision) is not None
    except CommandError:
        return False


def check_schema(engine: Engine) -> str | None:
    """None when the schema is current, else one line saying what is wrong."""
    head = migrations.head_revision()
    with engine.connect() as conn:
        revision = current_revision(conn)
        has_tables = bool(inspect(conn).get_table_names())
    if revision == head:
        return None
    if revision is None:
        what = "has tables but no loomtune schema revision" if has_tables else "is empty"
        return f"the database {what}; run `loomtune db upgrade`"
    if not _known(revision):
        return (
            f"the database schema is at revision {revision!r}, unknown to this loomtune "
            f"(which needs {head!r}); run `loomtune db upgrade` with a loomtune that knows it"
        )
    return f"the database schema is at revision {revision!r}, this loomtune needs {head!r}; run `loomtune db upgrade`"


def upgrade(engine: Engine) -> None:
    """Upgrade to the newest revision, one process at a time."""
    with _schema_lock(engine):
        if engine.dialect.name == "postgresql":
            # Transactional DDL: the lock is released when the upgrade commits.
            with engine.begin() as conn:
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_SCHEMA_LOCK})
                migrations.upgrade(conn)
        else:
            migrations.upgrade(engine)


def ensure_schema(engine: Engine, *, embedded: bool | None = None) -> None:
    """Make the schema usable or refuse: what every command does before touching the database.

    An empty database is upgraded (any backend). An embedded (SQLite)
    database at an older revision upgrades itself; any other raises
    `StaleSchemaError` whose message says to run `loomtune db upgrade`.
    """
    if embedded is None:
        embedded = engine.dialect.name == "sqlite"
    problem = check_schema(engine)
    if problem is None:
        return
    with engine.connect() as conn:
        revision = current_revision(conn)
        empty = revision is None and not inspect(conn).get_table_names()
    if empty or (embedded and revision is not None and _known(revision)):
        upgrade(engine)
        return
    raise StaleSchemaError(problem)


@contextlib.contextmanager
def _schema_lock(engine: Engine) -> Iterator[None]:
    # Two first commands on one new SQLite file would both create the tables;
    # a lock file beside it lets one go first (PostgreSQL uses an advisory lock).
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    if not database or database == ":memory:" or database.startswith("file:"):
        yield
        return
    lock_path = Path(database).expanduser().with_suffix(Path(database).suffix + ".lock")
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
