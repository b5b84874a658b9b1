"""How fast the tuning database answers the search's questions with many records.

    python -m benchmarks run --suite db       # result file + README table (benchmarks/harness.py)
    python -m benchmarks.db_queries [--records 100000] [--repeat 200] [--postgres URL]   # prints only

Fills a fresh SQLite file and a fresh PostgreSQL schema of its own (dropped
afterwards, so the database it lives in is left as it was) with `records`
records spread over 50 workloads and 2 targets (10% failures), checks the
answers of `best`, `top_k(64)`, `has_measured` and `best_of_op` against what
was inserted, then times each through `SQLDatabase`: every one of `repeat`
calls after one warm-up call, in ms (the tables show the median and the 95th
percentile). PostgreSQL is found at `--postgres`, else
LOOMTUNE_TEST_DATABASE_URL, else the local `test` database.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, insert, select, text
from sqlalchemy.engine import make_url

from service.db import models as m
from service.db.engine import database_url, make_engine
from service.db.schema import ensure_schema
from service.db.store import SQLDatabase

WORKLOADS = 50
TARGETS = (
    "llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma -num-threads=1",
    "llvm -mcpu=znver3 -mattr=+avx,+avx2,+fma -num-threads=8",
)
PG_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
QUERY_GOAL_MS = 20.0
"""The issue's goal for `best` and `top_k(64)` with 100,000 records, per call."""
TOP_K = 64
PROBE_WORKLOAD = 7  # the workload the queries ask about


@dataclass(frozen=True, kw_only=True)
class DbBenchConfig:
    """What a run inserts and how often it asks.

    Attributes:
        records: rows inserted into each backend.
        repeat: timed calls per query (after one warm-up call).
        postgres_url: the PostgreSQL database to make (and drop) a schema in.
    """

    records: int = 100_000
    repeat: int = 200
    postgres_url: str = PG_DEFAULT


def config_for(quick: bool) -> DbBenchConfig:
    """Full: 100,000 records, 200 calls per query; quick (smoke): 10,000 records, 10 calls."""
    url = os.environ.get("LOOMTUNE_TEST_DATABASE_URL") or PG_DEFAULT
    if quick:
        return DbBenchConfig(records=10_000, repeat=10, postgres_url=url)
    return DbBenchConfig(postgres_url=url)


# -- the records ------------------------------------------------------------------------
#
# Record i belongs to workload i % 50 and target (i // 50) % 2; every tenth
# record of each (workload, target) is a wrong result. The medians are
# distinct within a (workload, target), so the right answer of every query is
# known exactly (`expected_medians`).


def _key(w: int) -> str:
    return hashlib.sha256(f"workload {w}".encode()).hexdigest()


def _workload_of(i: int) -> int:
    return i % WORKLOADS


def _target_of(i: int) -> int:
    return (i // WORKLOADS) % len(TARGETS)


def _is_ok(i: int) -> bool:
    return (i // (WORKLOADS * len(TARGETS))) % 10 != 9


def _median(i: int) -> float:
    return 1.0 + (i * 7919 % 10007) / 100.0


def expected_medians(records: int, workload: int, target: int) -> list[float]:
    """The ok medians of one (workload, target), lowest first: what `top_k` must return."""
    return sorted(
        _median(i)
        for i in range(workload, records, WORKLOADS)
        if _target_of(i) == target and _is_ok(i)
    )


def fill(db: SQLDatabase, records: int) -> float:
    """Insert `records` rows in bulk (not the per-record path the tuner uses); seconds taken."""
    start = time.perf_counter()
    for w in range(WORKLOADS):
        db.commit_workload(_key(w), "matmul", {"m": 64 + w, "n": 64, "k": 64}, {"stand_in": True})
    for target in TARGETS:
        db.save_cost_model(target, b"", 0)  # creates the target's row
    with db.sessions() as session:
        target_ids = [
            session.scalar(select(m.Target.id).where(m.Target.canonical == t)) for t in TARGETS
        ]
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    trace = {"version": 1, "instructions": [], "decisions": {}}
    batch: list[dict[str, object]] = []
    with db.engine.begin() as conn:
        for i in range(records):
            ok, median = _is_ok(i), _median(i)
            batch.append(
                {
                    "record_id": str(uuid.UUID(int=i + 1)),
                    "workload_key": _key(_workload_of(i)),
                    "target_id": target_ids[_target_of(i)],
                    "trace": trace,
                    "trace_hash": hashlib.sha256(str(i).encode()).hexdigest(),
                    "run_times": [median] * 3,
                    "median_ms": median if ok else None,
                    "trusted_ms": median if ok else None,  # a local record: trusted as measured
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
        if db.engine.dialect.name == "sqlite":
            conn.execute(text("ANALYZE"))  # fresh statistics, as a long-lived database has
    if db.engine.dialect.name == "postgresql":
        # What autovacuum does to a long-lived table (statistics, visibility map),
        # done now rather than in the middle of the timings.
        with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE records"))
    return time.perf_counter() - start


# -- the queries ------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """A question the search asks, and how to tell a right answer."""

    name: str
    call: Callable[[SQLDatabase], object]
    check: Callable[[object, int], str | None]  # (answer, records) -> None or what is wrong
    goal_ms: float | None = None


def _medians(answer: object) -> list[float | None]:
    return [r.median_ms for r in answer]  # type: ignore[attr-defined]


def _check_best(answer: object, records: int) -> str | None:
    want = expected_medians(records, PROBE_WORKLOAD, 0)[:1]
    got = [] if answer is None else [answer.median_ms]  # type: ignore[attr-defined]
    if got != want or (
        answer is not None and (answer.status != "ok" or answer.target != TARGETS[0])
    ):  # type: ignore[attr-defined]
        return f"best: got median {got}, expected {want} (ok, {TARGETS[0]!r})"
    return None


def _check_top_k(answer: object, records: int) -> str | None:
    want = expected_medians(records, PROBE_WORKLOAD, 0)[:TOP_K]
    if _medians(answer) != want or any(r.status != "ok" or r.target != TARGETS[0] for r in answer):  # type: ignore[attr-defined]
        return f"top_k({TOP_K}): got {len(_medians(answer))} medians, not the {len(want)} lowest ok ones"
    return None


def _check_has_measured(answer: object, records: int) -> str | None:
    return None if answer is False else f"has_measured of an unknown trace: {answer!r}"


def _check_best_of_op(answer: object, records: int) -> str | None:
    bests = [expected_medians(records, w, 0)[:1] for w in range(WORKLOADS) if w != PROBE_WORKLOAD]
    want = sorted(b[0] for b in bests if b)[:64]
    if _medians(answer) != want:
        return f"best_of_op: got {len(_medians(answer))} medians, expected the {len(want)} workloads' bests"
    return None


QUERIES = (
    Query("best", lambda db: db.best(_key(PROBE_WORKLOAD), TARGETS[0]), _check_best, QUERY_GOAL_MS),
    Query(
        f"top_k({TOP_K})",
        lambda db: db.top_k(_key(PROBE_WORKLOAD), TARGETS[0], TOP_K),
        _check_top_k,
        QUERY_GOAL_MS,
    ),
    Query(
        "has_measured",
        lambda db: db.has_measured(_key(PROBE_WORKLOAD), TARGETS[0], "0" * 64),
        _check_has_measured,
    ),
    Query(
        f"best_of_op ({WORKLOADS} workloads)",
        lambda db: db.best_of_op("matmul", TARGETS[0], exclude_workload_key=_key(PROBE_WORKLOAD)),
        _check_best_of_op,
    ),
)


def time_calls(call: Callable[[], object], repeat: int) -> list[float]:
    """Milliseconds of each of `repeat` calls, after one call that warms the caches."""
    call()  # target id, connection pool, statement cache
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return times


Meter = Callable[
    [Callable[[], list[float]], Callable[[], float] | None],
    tuple[list[float], dict[str, float] | None],
]
"""Runs a timing; returns its times and the shares of the CPUs others took meanwhile (or None).

The second argument, when given, counts CPU seconds of helper processes
(the local database server) that are working for this run, not against it.
"""


def unmetered(
    timing: Callable[[], list[float]], _helpers: Callable[[], float] | None = None
) -> tuple[list[float], dict[str, float] | None]:
    return timing(), None


def local_server_cpu(engine: Engine) -> Callable[[], float] | None:
    """CPU seconds used so far by the PostgreSQL server's processes, when it runs on this machine.

    A query's time is partly spent in the server; without this, a meter
    would count that as another process competing with the benchmark.
    """
    if engine.dialect.name != "postgresql" or engine.url.host not in (
        None,
        "127.0.0.1",
        "localhost",
        "::1",
    ):
        return None
    tick = os.sysconf("SC_CLK_TCK")

    def seconds() -> float:
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                line = stat.read_text(encoding="ascii", errors="replace")
            except OSError:  # the process has gone
                continue
            comm, _, rest = line.partition(" (")[2].rpartition(") ")
            if comm.startswith("postgres"):
                fields = rest.split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / tick

    return seconds if Path("/proc/self/stat").exists() else None


# -- one backend ------------------------------------------------------------------------


def server_version(engine: Engine) -> str:
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            return str(conn.execute(text("SELECT sqlite_version()")).scalar())
        return str(conn.execute(text("SHOW server_version")).scalar()).split()[0]


def measure_backend(
    backend: str, engine: Engine, config: DbBenchConfig, meter: Meter = unmetered
) -> list[dict[str, Any]]:
    """Create the schema, fill it, check every query's answer, time the queries: one row each."""
    ensure_schema(engine)
    db = SQLDatabase(engine)
    version = server_version(engine)
    fill_s = fill(db, config.records)
    helpers = local_server_cpu(engine)
    rows = []
    for query in QUERIES:
        message = query.check(query.call(db), config.records)
        times, load = (
            (None, None)
            if message
            else meter(lambda q=query: time_calls(lambda: q.call(db), config.repeat), helpers)
        )
        rows.append(query_row(backend, version, query, config, fill_s, times, load, message))
    return rows


def query_row(
    backend: str,
    version: str | None,
    query: Query,
    config: DbBenchConfig,
    fill_s: float | None,
    times: list[float] | None,
    load: dict[str, float] | None,
    message: str | None,
) -> dict[str, Any]:
    """A result row (benchmarks/README.md, "The db suite")."""
    median = statistics.median(times) if times else None
    ordered = sorted(times or [])
    return {
        "case": query.name,
        "label": f"{backend} {query.name}",
        "backend": backend,
        "backend_version": version,
        "records": config.records,
        "fill_s": fill_s,
        "correct": message is None,
        "message": message,
        "times_ms": times,
        "median_ms": median,
        "p95_ms": ordered[int(0.95 * (len(ordered) - 1))] if ordered else None,
        "min_ms": ordered[0] if ordered else None,
        "goal_ms": query.goal_ms,
        "met": None if query.goal_ms is None or median is None else median < query.goal_ms,
        "others_load": load,
        "contended": None,  # the harness judges `others_load` by its own threshold
    }


def postgresql_unreachable(url: str) -> str | None:
    """None when PostgreSQL answers at `url`, else why not (one line)."""
    from sqlalchemy.exc import OperationalError

    engine = make_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect():
            return None
    except OperationalError as e:
        return str(e.orig or e).strip().splitlines()[0]
    finally:
        engine.dispose()


@contextlib.contextmanager
def postgres_schema(url: str) -> Iterator[tuple[Engine, str]]:
    """An engine on a new schema of its own in `url`'s database, dropped (with its tables) afterwards."""
    schema = f"loomtune_bench_{uuid.uuid4().hex[:12]}"
    admin = make_engine(url)
    try:
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        engine = make_engine(url, connect_args={"options": f"-csearch_path={schema}"})
        try:
            yield engine, schema
        finally:
            engine.dispose()
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    finally:
        admin.dispose()


def run(
    config: DbBenchConfig, meter: Meter = unmetered
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows for SQLite then PostgreSQL, and what the result file says about the run (`db`)."""
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(f"sqlite:///{Path(folder) / 'bench.db'}")
        try:
            rows = measure_backend("SQLite", engine, config, meter)
        finally:
            engine.dispose()

    where = make_url(database_url(config.postgres_url)).render_as_string(hide_password=True)
    schema = None
    server_cpu_s = None
    unreachable = postgresql_unreachable(config.postgres_url)
    if unreachable is None:
        with postgres_schema(config.postgres_url) as (engine, schema):
            server_cpu = local_server_cpu(engine)
            started = server_cpu() if server_cpu else 0.0
            rows += measure_backend("PostgreSQL", engine, config, meter)
            server_cpu_s = server_cpu() - started if server_cpu else None
    else:  # rows that say so, marked not correct
        reason = f"PostgreSQL unreachable at {where}: {unreachable}"
        rows += [
            query_row("PostgreSQL", None, q, config, None, None, None, reason) for q in QUERIES
        ]
    details = {
        "records": config.records,
        "repeat": config.repeat,
        "workloads": WORKLOADS,
        "targets": list(TARGETS),
        "failures": 0.1,
        "postgres_url": where,
        "postgres_schema": schema,
        "postgres_cpu_s": server_cpu_s,  # the local server's CPU time for this run (None: not local)
        "sqlalchemy": importlib.metadata.version("sqlalchemy"),
        "psycopg": importlib.metadata.version("psycopg"),
    }
    return rows, details


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=200)
    p.add_argument("--postgres", default=config_for(False).postgres_url)
    args = p.parse_args()
    rows, _ = run(
        DbBenchConfig(records=args.records, repeat=args.repeat, postgres_url=args.postgres)
    )
    for row in rows:
        if row["message"]:
            print(f"{row['backend']:<11} {row['case']:<28} FAILED: {row['message']}")
        else:
            print(
                f"{row['backend']:<11} {row['case']:<28} median {row['median_ms']:8.3f} ms   p95 {row['p95_ms']:8.3f} ms"
            )


if __name__ == "__main__":
    main()
