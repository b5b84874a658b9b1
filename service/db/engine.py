"""Engines from database URLs (DESIGN.md "Configuration").

`LOOMTUNE_DATABASE_URL` names the database; without it, the embedded SQLite
file `$XDG_DATA_HOME/loomtune/loomtune.db` (`~/.local/share/loomtune/loomtune.db`).
A `postgresql://` URL uses psycopg 3, the driver loomtune installs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from service.db.url import check_database_url

DATABASE_URL_ENV = "LOOMTUNE_DATABASE_URL"

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite writer waits for another process's write lock, in ms."""


def default_database_path() -> Path:
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "loomtune" / "loomtune.db"


def database_url(url: str | None = None) -> str:
    """The URL to use: the given one, else the environment's, else the embedded file's."""
    if url:
        return normalise_url(url)
    from_env = os.environ.get(DATABASE_URL_ENV, "").strip()
    if from_env:
        return normalise_url(from_env)
    return f"sqlite:///{default_database_path()}"


def normalise_url(url: str) -> str:
    """`postgresql://` and `postgres://` mean psycopg 3 (SQLAlchemy would pick psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def is_embedded(engine: Engine) -> bool:
    """Whether this is the embedded (SQLite) database, which may upgrade itself."""
    return engine.dialect.name == "sqlite"


def make_engine(
    url: str | None = None, *, connect_args: dict[str, Any] | None = None, **kwargs: Any
) -> Engine:
    """An engine for `url` (see `database_url`); SQLite files get their folder, WAL and a busy timeout."""
    text = database_url(url)
    parsed = make_url(check_database_url(text, folder_must_exist=False))
    args = dict(connect_args or {})
    if parsed.get_backend_name() == "sqlite":
        if (
            parsed.database
            and parsed.database != ":memory:"
            and not parsed.database.startswith("file:")
        ):
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        args.setdefault("timeout", SQLITE_BUSY_TIMEOUT_MS / 1000)
        engine = create_engine(text, connect_args=args, **kwargs)
        event.listen(engine, "connect", _configure_sqlite)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(text, connect_args=args, **kwargs)


def _configure_sqlite(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers go on while one process writes; the busy timeout makes
    # concurrent writers wait instead of failing; SQLite enforces foreign keys
    # only when asked, per connection. In WAL mode synchronous=NORMAL keeps the
    # file consistent through any crash and skips the fsync per transaction
    # (a transaction per measured candidate); only a power loss may forget the
    # last transactions.
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()
