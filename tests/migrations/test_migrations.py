"""The schema and its migrations: models and migrations agree, stale schemas are refused, empty databases get the schema.

PostgreSQL comes from tests/postgresql.py (fresh schema per test; skipped
when unreachable, except in CI (CI=true), where that is a failure).
"""

from __future__ import annotations

import os
import sqlite3

import pytest
from sqlalchemy import Engine, text

from service.db.engine import make_engine
from service.db.schema import StaleSchemaError, check_schema, ensure_schema
from service.db.store import SQLDatabase
from tests.service.db.recordkit import MATMUL, record


def test_unreachable_postgresql_fails_in_ci_and_is_skipped_elsewhere() -> None:
    """The rule above, checked: a pytest run against a closed port, with CI=true and without."""
    import subprocess
    import sys
    from pathlib import Path

    node = f"{Path(__file__).resolve()}::test_empty_postgresql_database_gets_the_schema"
    env = {
        **os.environ,
        "LOOMTUNE_TEST_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none",
        # the rule is tests/conftest.py's: no installed plugin (hypothesis, schemathesis:
        # 1.7 s of imports per run) takes part in it
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }
    for ci in ("true", ""):
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
            env={**env, "CI": ci},
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            timeout=120,
        )
        summary = proc.stdout.strip().splitlines()[-1]
        assert "PostgreSQL unreachable" in proc.stdout, proc.stdout[-2000:]
        if ci:  # the fixture fails: pytest reports an error, the run fails
            assert proc.returncode == 1 and "1 error" in summary and "skipped" not in summary, (
                summary
            )
        else:
            assert proc.returncode == 0 and "1 skipped" in summary, summary


def test_models_and_migrations_agree(sql_engine: Engine) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from service.db.models import Base

    ensure_schema(sql_engine)
    with sql_engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        diff = compare_metadata(context, Base.metadata)
    assert diff == []


def test_migrations_downgrade_to_nothing_and_back(sql_engine: Engine) -> None:
    import migrations

    ensure_schema(sql_engine)
    migrations.downgrade(sql_engine, "base")
    with sql_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 0
    migrations.upgrade(sql_engine)
    assert check_schema(sql_engine) is None


def test_stale_postgresql_schema_is_refused(pg_engine: Engine) -> None:
    with pg_engine.begin() as conn:
        conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)"))
        conn.execute(text("INSERT INTO alembic_version VALUES ('0000_older')"))
        conn.execute(text("CREATE TABLE records (record_id VARCHAR(36) PRIMARY KEY)"))
    with pytest.raises(StaleSchemaError) as info:
        ensure_schema(pg_engine)
    message = str(info.value)
    assert "loomtune db upgrade" in message and "\n" not in message
    with pytest.raises(StaleSchemaError, match="loomtune db upgrade"):
        ensure_schema(pg_engine, embedded=False)


def test_tables_without_a_revision_are_refused(pg_engine: Engine) -> None:
    with pg_engine.begin() as conn:
        conn.execute(text("CREATE TABLE records (record_id VARCHAR(36) PRIMARY KEY)"))
    with pytest.raises(StaleSchemaError, match="loomtune db upgrade"):
        ensure_schema(pg_engine)


def test_empty_postgresql_database_gets_the_schema(pg_engine: Engine) -> None:
    assert "empty" in (check_schema(pg_engine) or "")
    ensure_schema(pg_engine, embedded=False)
    assert check_schema(pg_engine) is None


def test_empty_sqlite_file_is_created_and_upgraded_on_first_use(tmp_path) -> None:
    path = tmp_path / "new" / "deeper" / "loomtune.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        ensure_schema(engine)
        SQLDatabase(engine).commit_record(record(MATMUL, 1, 1.0))
    finally:
        engine.dispose()
    assert path.exists()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
    assert {
        "workloads",
        "targets",
        "jobs",
        "candidates",
        "records",
        "cost_models",
        "workers",
        "api_tokens",
    } <= tables


def test_embedded_sqlite_at_an_unknown_revision_is_refused(sqlite_engine: Engine) -> None:
    ensure_schema(sqlite_engine)
    with sqlite_engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff_from_the_future'"))
    with pytest.raises(StaleSchemaError, match="loomtune db upgrade"):
        ensure_schema(sqlite_engine)
