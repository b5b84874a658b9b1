"""The db suite at smoke-test sizes: answers checked, every query timed, nothing left behind.

As in the other smoke test, speed is not judged here (the machine is shared);
the README's numbers come from a full run's committed result file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sqlalchemy import text

from benchmarks import db_queries
from benchmarks.__main__ import main
from benchmarks.report import suite_section
from service.db.engine import make_engine


def test_quick_db_run_writes_checked_timings_and_drops_its_schema(tmp_path: Path) -> None:
    code = main(["run", "--suite", "db", "--quick", "--out", str(tmp_path)])
    (path,) = tmp_path.glob("db-*.json")
    result = json.loads(path.read_text(encoding="utf-8"))
    config = db_queries.config_for(True)
    assert result["suite"] == "db" and result["kind"] == "db" and result["quick"] is True
    assert (
        result["db"]["records"] == config.records and result["measure"]["repeat"] == config.repeat
    )

    names = [q.name for q in db_queries.QUERIES]
    rows = {(row["backend"], row["case"]): row for row in result["rows"]}
    assert list(rows) == [(b, n) for b in ("SQLite", "PostgreSQL") for n in names]
    postgres = [row for row in result["rows"] if row["backend"] == "PostgreSQL"]
    if not all(row["correct"] for row in postgres) and "unreachable" in (
        postgres[0]["message"] or ""
    ):
        if os.environ.get("CI") == "true":
            pytest.fail(postgres[0]["message"])
        pytest.skip(postgres[0]["message"])
    assert code == 0
    for row in result["rows"]:
        assert row["correct"] is True, (row["label"], row["message"])
        assert len(row["times_ms"]) == config.repeat and row["median_ms"] > 0
        assert row["min_ms"] <= row["median_ms"] <= row["p95_ms"]
        assert row["records"] == config.records and row["backend_version"]
    for backend in ("SQLite", "PostgreSQL"):
        for query in ("best", f"top_k({db_queries.TOP_K})"):
            assert rows[backend, query]["goal_ms"] == db_queries.QUERY_GOAL_MS

    # the PostgreSQL schema the run filled is gone
    schema = result["db"]["postgres_schema"]
    assert schema and schema.startswith("loomtune_bench_")
    engine = make_engine(config.postgres_url)
    try:
        with engine.connect() as conn:
            left = conn.execute(
                text("SELECT count(*) FROM pg_namespace WHERE nspname = :s"), {"s": schema}
            )
            assert left.scalar() == 0
    finally:
        engine.dispose()

    section = suite_section(result)
    assert "| backend | query |" in section and "PostgreSQL" in section and "< 20 ms" in section


def test_a_wrong_answer_is_caught_before_timing() -> None:
    best, top_k = db_queries.QUERIES[0], db_queries.QUERIES[1]
    assert best.check(None, 10_000) is not None
    assert top_k.check([], 10_000) is not None
    want = db_queries.expected_medians(10_000, db_queries.PROBE_WORKLOAD, 0)
    assert len(want) == 90 and want == sorted(set(want))  # distinct: one right order
    # the workload asked about has failures among its records, as every workload does
    for w in range(db_queries.WORKLOADS):
        for t in range(len(db_queries.TARGETS)):
            assert len(db_queries.expected_medians(10_000, w, t)) == 90
