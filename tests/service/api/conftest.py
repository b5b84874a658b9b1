"""Fixtures: a coordinator per test, on SQLite or PostgreSQL (helpers in apikit.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from service.db.engine import make_engine
from tests.service.api.apikit import PG_URL, Api, make_api, pg_url_for, require_postgresql


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh, empty PostgreSQL schema, dropped afterwards."""
    require_postgresql()
    schema = f"loomtune_api_{uuid.uuid4().hex[:12]}"
    admin = make_engine(PG_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield schema
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "postgresql":
        return pg_url_for(request.getfixturevalue("pg_schema"))
    return f"sqlite:///{tmp_path / 'coordinator.db'}"


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'coordinator.db'}"


@pytest.fixture
def api(database_url: str) -> Iterator[Api]:
    coordinator, client = make_api(database_url)
    with client:
        yield coordinator
    coordinator.engine.dispose()


@pytest.fixture
def sqlite_api(sqlite_url: str) -> Iterator[Api]:
    coordinator, client = make_api(sqlite_url)
    with client:
        yield coordinator
    coordinator.engine.dispose()
