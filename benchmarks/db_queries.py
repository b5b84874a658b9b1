"""How fast the tuning database answers the search's questions with many records.

    python -m benchmarks.db_queries [--records 100000] [--repeat 200] [--postgres URL]

Fills a fresh SQLite file and a fresh PostgreSQL schema (dropped afterwards;
skipped when PostgreSQL cannot be reached) with `--records` records spread
over 50 workloads and 2 targets (10% failures), then times `best`,
`top_k(64)`, `has_measured` and `best_of_op` through `SQLDatabase`: the
median and the 95th percentile of `--repeat` calls, in ms. Prints a table;
nothing is written.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine, insert, select, text

from service.db import models as m
from service.db.engine import make_engine
from service.db.schema import ensure_schema
from service.db.store import SQLDatabase

WORKLOADS = 50
TARGETS = (
    "llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma -num-threads=1",
    "llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma -num-threads=8",
)
PG_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _key(i: int) -> str:
    return hashlib.sha256(f"workload {i}".encode()).hexdigest()


def fill(db: SQLDatabase, records: int) -> float:
    """Insert `records` rows in bulk (not the per-record path the tuner uses); seconds taken."""
    start = time.perf_counter()
    for w in range(WORKLOADS):
        db.commit_workload(_key(w), "matmul", {"m": 64 + w, "n": 64, "k": 64}, {"stand_in": True})
    db.save_cost_model(TARGETS[0], b"", 0)  # creates the targets' rows
    db.save_cost_model(TARGETS[1], b"", 0)
    with db.sessions() as session:
        target_ids = [session.scalar(select(m.Target.id).where(m.Target.canonical == t)) for t in TARGETS]
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    trace = {"version": 1, "instructions": [], "decisions": {}}
    batch: list[dict[str, object]] = []
    with db.engine.begin() as conn:
        for i in range(records):
            ok = i % 10 != 0
            median = 1.0 + (i * 7919 % 10007) / 100.0
            batch.append(
                {
                    "record_id": str(uuid.UUID(int=i + 1)),
                    "workload_key": _key(i % WORKLOADS),
                    "target_id": target_ids[(i // WORKLOADS) % 2],
                    "trace": trace,
                    "trace_hash": hashlib.sha256(str(i).encode()).hexdigest(),
                    "run_times": [median] * 3,
                    "median_ms": median if ok else None,
                    "status": "ok" if ok else "wrong_result",
                    "message": "",
                    "worker": "bench",
                    "loomtune_version": "0.1.0",
                    "llvm_version": "22.1.0",
                    "measured_at": t0 + timedelta(seconds=i),
                }
            )
            if len(batch) == 5000:
                conn.execute(insert(m.Record.__table__), batch)
                batch.clear()
        if batch:
            conn.execute(insert(m.Record.__table__), batch)
        conn.execute(text("ANALYZE"))  # fresh statistics, as a long-lived database has
    return time.perf_counter() - start


def timed(call: Callable[[], object], repeat: int) -> tuple[float, float]:
    call()  # warm the caches (target id, connection pool)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def run(name: str, engine: Engine, records: int, repeat: int) -> None:
    ensure_schema(engine)
    db = SQLDatabase(engine)
    seconds = fill(db, records)
    print(f"{name}: inserted {records:,} records in {seconds:.1f} s")
    target, key = TARGETS[0], _key(7)
    assert db.best(key, target) is not None and len(db.top_k(key, target, 64)) == 64
    queries: dict[str, Callable[[], object]] = {
        "best": lambda: db.best(key, target),
        "top_k(64)": lambda: db.top_k(key, target, 64),
        "has_measured": lambda: db.has_measured(key, target, "0" * 64),
        "best_of_op (50 workloads)": lambda: db.best_of_op("matmul", target, exclude_workload_key=key),
    }
    for label, call in queries.items():
        median, p95 = timed(call, repeat)
        print(f"  {label:<28} median {median:8.3f} ms   p95 {p95:8.3f} ms")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=200)
    p.add_argument("--postgres", default=os.environ.get("LOOMTUNE_TEST_DATABASE_URL", PG_DEFAULT))
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(f"sqlite:///{Path(folder) / 'bench.db'}")
        run("SQLite", engine, args.records, args.repeat)
        engine.dispose()

    schema = f"loomtune_bench_{uuid.uuid4().hex[:8]}"
    admin = make_engine(args.postgres, connect_args={"connect_timeout": 3})
    try:
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    except Exception as e:  # unreachable: say so and stop, SQLite's numbers stand
        print(f"PostgreSQL: skipped ({type(e).__name__}: {str(e).splitlines()[0]})")
        return
    try:
        engine = make_engine(args.postgres, connect_args={"options": f"-csearch_path={schema}"})
        run("PostgreSQL", engine, args.records, args.repeat)
        engine.dispose()
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


if __name__ == "__main__":
    main()
