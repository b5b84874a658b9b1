"""Alembic's environment: runs migrations on the configured engine or connection."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from service.db.engine import make_engine
from service.db.models import Base

target_metadata = Base.metadata
config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things: Alembic copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    given = config.attributes.get("connection")
    if given is None:
        engine = make_engine(config.get_main_option("sqlalchemy.url"))
        try:
            with engine.connect() as connection:
                _run(connection)
        finally:
            engine.dispose()
    elif isinstance(given, Connection):
        _run(given)
    else:  # an Engine
        with given.connect() as connection:
            _run(connection)


if context.is_offline_mode():
    raise SystemExit("loomtune's migrations run online only (no SQL scripts)")
run_migrations_online()
