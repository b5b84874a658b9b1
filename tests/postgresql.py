"""PostgreSQL for the tests: one schema of its own per test, dropped afterwards.

PostgreSQL is found at LOOMTUNE_TEST_DATABASE_URL (default: the local test
database). When it cannot be reached, a test that needs it is skipped, except
in CI (CI=true), where that is a failure. The `pg_schema` fixture
(tests/conftest.py) is `fresh_pg_schema`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

PG_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
PG_URL = os.environ.get("LOOMTUNE_TEST_DATABASE_URL", PG_DEFAULT)

_pg_reachable: bool | None = None


def require_postgresql() -> None:
    from sqlalchemy.exc import OperationalError

    from service.db.engine import make_engine

    global _pg_reachable
    if _pg_reachable is None:
        engine = make_engine(PG_URL, connect_args={"connect_timeout": 3})
        try:
            with engine.connect():
                _pg_reachable = True
        except OperationalError:
            _pg_reachable = False
        finally:
            engine.dispose()
    if not _pg_reachable:
        message = f"PostgreSQL unreachable at {PG_URL} (set LOOMTUNE_TEST_DATABASE_URL)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def fresh_pg_schema(prefix: str = "loomtune_test") -> Iterator[str]:
    """A fresh, empty PostgreSQL schema (its name), dropped afterwards: iterate it once."""
    from sqlalchemy import text

    from service.db.engine import make_engine

    require_postgresql()
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = make_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield schema
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def pg_url_for(schema: str) -> str:
    """A URL whose connections use `schema` (what a subprocess is given)."""
    return f"{PG_URL}?options=-csearch_path%3D{schema}"


def pg_schema_engine(schema: str) -> Any:
    """An engine whose connections use `schema`."""
    from service.db.engine import make_engine

    return make_engine(PG_URL, connect_args={"options": f"-csearch_path={schema}"})
