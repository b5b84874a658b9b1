"""Shared test helpers: goldens that regenerate with LOOMTUNE_UPDATE_GOLDENS=1; database fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.postgresql import fresh_pg_schema, pg_schema_engine
from tests.sqlite import migrated_sqlite_file

SLOW_FOLDERS = ("e2e", "benchmarks")
"""Tests under these folders start real servers, workers or benchmark runs: `slow`."""
SLOW_FILES = ("test_readme_shell.py",)
ALONE_FOLDERS = ("e2e",)
"""Real coordinators and workers holding leases of a few seconds: `e2e`, run on a machine
left to them (docs/decisions.md, Tests and CI)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`pytest -m "not slow"` is the fast subset: end-to-end, benchmark and README-command
    tests are marked slow here, by where they live; long property tests by hand. The
    end-to-end tests are also `e2e`: the README's test command runs them after the rest."""
    root = Path(__file__).resolve().parent
    for item in items:
        rel = item.path.resolve().relative_to(root)
        if rel.parts[0] in SLOW_FOLDERS or rel.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
        if rel.parts[0] in ALONE_FOLDERS:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(autouse=True, scope="session")
def _isolated_database(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Commands open the tuning database; tests (and their subprocesses) never use the user's."""
    if "LOOMTUNE_DATABASE_URL" not in os.environ:
        os.environ["LOOMTUNE_DATABASE_URL"] = (
            f"sqlite:///{tmp_path_factory.mktemp('db') / 'loomtune.db'}"
        )


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


@pytest.fixture
def golden(request: pytest.FixtureRequest):
    """compare(name, text): whitespace-normalised comparison with tests/<pkg>/goldens/<name>."""
    folder = Path(request.path).parent / "goldens"

    def compare(name: str, text: str) -> None:
        path = folder / name
        if os.environ.get("LOOMTUNE_UPDATE_GOLDENS") == "1":
            folder.mkdir(exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"golden {path} missing; regenerate with LOOMTUNE_UPDATE_GOLDENS=1"
        assert _normalise(text) == _normalise(path.read_text()), f"{name} differs from its golden"

    return compare


# -- databases: PostgreSQL (tests/postgresql.py) and SQLite ------------------------------------


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh, empty PostgreSQL schema, dropped afterwards (fails under CI=true when unreachable)."""
    yield from fresh_pg_schema()


@pytest.fixture
def pg_engine(pg_schema: str) -> Iterator[Any]:
    engine = pg_schema_engine(pg_schema)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file at the current schema, made once: `tests.sqlite.fresh_sqlite` copies it."""
    return migrated_sqlite_file(tmp_path_factory.mktemp("migrated") / "loomtune.db")


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Any]:
    from service.db.engine import make_engine

    engine = make_engine(f"sqlite:///{tmp_path / 'data' / 'loomtune.db'}")
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_engine(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{'pg' if request.param == 'postgresql' else 'sqlite'}_engine")
