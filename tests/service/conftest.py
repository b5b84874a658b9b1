"""Fixtures: a coordinator per test, on SQLite or PostgreSQL (helpers in coordinator/apikit.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.postgresql import pg_url_for
from tests.service.coordinator.apikit import Api, make_api
from tests.sqlite import fresh_sqlite


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "postgresql":
        return pg_url_for(request.getfixturevalue("pg_schema"))
    return request.getfixturevalue("sqlite_url")


@pytest.fixture
def sqlite_url(tmp_path, migrated_sqlite) -> str:
    """A SQLite database of the test's own, empty, at the current schema."""
    return fresh_sqlite(migrated_sqlite, tmp_path / "coordinator.db")


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
