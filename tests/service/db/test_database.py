"""One suite over every tuning database: in memory, a SQLite file, PostgreSQL.

PostgreSQL comes from tests/postgresql.py: each test gets a fresh schema of
its own, dropped afterwards. When PostgreSQL cannot be reached the PostgreSQL
cases are skipped, except in CI (CI=true), where that is a failure. The
schema and the migrations are tested in tests/migrations/.
"""

from __future__ import annotations

import json
import multiprocessing
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, text

from service.db.engine import make_engine
from service.db.schema import ensure_schema
from service.db.store import SQLDatabase
from tests.postgresql import pg_schema_engine
from tests.service.db.recordkit import (
    MATMUL,
    MATMUL_BIG,
    MATMUL_ODD,
    SKX1,
    SOFTMAX,
    T0,
    ZEN1,
    ZEN4,
    record,
    trace_of,
)
from tuner.database import Database, DatabaseError, InMemoryDatabase, TuningRecord

# -- backends --------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def db(request: pytest.FixtureRequest) -> Database:
    if request.param == "memory":
        return InMemoryDatabase()
    engine = request.getfixturevalue(
        f"{'pg' if request.param == 'postgresql' else 'sqlite'}_engine"
    )
    ensure_schema(engine)
    return SQLDatabase(engine)


# -- the protocol, on every backend -----------------------------------------------------


def test_every_backend_is_a_database(db: Database) -> None:
    assert isinstance(db, Database)


def test_best_is_the_lowest_ok_median_never_a_failure(db: Database) -> None:
    db.commit_records(
        [
            record(MATMUL, 1, 3.0),
            record(MATMUL, 2, 2.0),
            record(MATMUL, 3, None, status="wrong_result"),  # would be the fastest
            record(MATMUL, 4, None, status="crashed"),
            record(MATMUL, 5, None, status="timeout"),
            record(MATMUL, 6, 2.5),
        ]
    )
    best = db.best(MATMUL[0], ZEN1)
    assert best is not None
    assert best.median_ms == 2.0 and best.status == "ok"
    assert best.trace == trace_of(2)[0]
    assert best.op == "matmul" and dict(best.params) == {"m": 64, "n": 64, "k": 64}
    assert best.measured_at == T0 and best.measured_at.tzinfo is not None
    assert db.best(SOFTMAX[0], ZEN1) is None


def test_only_failures_have_no_best(db: Database) -> None:
    db.commit_record(record(MATMUL, 1, None, status="wrong_result"))
    db.commit_record(record(MATMUL, 2, None, status="compile_error"))
    assert db.best(MATMUL[0], ZEN1) is None
    assert db.top_k(MATMUL[0], ZEN1, 10) == []


def test_targets_never_mix(db: Database) -> None:
    db.commit_records(
        [
            record(MATMUL, 1, 5.0, target=ZEN1),
            record(MATMUL, 2, 1.0, target=ZEN4),
            record(MATMUL, 3, 0.5, target=SKX1),
        ]
    )
    for target, median in ((ZEN1, 5.0), (ZEN4, 1.0), (SKX1, 0.5)):
        best = db.best(MATMUL[0], target)
        assert best is not None and best.median_ms == median and best.target == target
        assert [r.target for r in db.top_k(MATMUL[0], target, 10)] == [target]
        assert [r.target for r in db.training_records(target)] == [target]
    assert not db.has_measured(MATMUL[0], ZEN4, trace_of(1)[1])
    assert db.best(MATMUL[0], "llvm -mcpu=generic -num-threads=1") is None


def test_top_k_is_ordered_by_median(db: Database) -> None:
    medians = [4.0, 1.5, 9.0, 0.75, 3.25, 2.0]
    db.commit_records([record(MATMUL, i, t, at=i) for i, t in enumerate(medians)])
    db.commit_record(record(MATMUL, 99, None, status="runtime_error"))
    top = db.top_k(MATMUL[0], ZEN1, 4)
    assert [r.median_ms for r in top] == [0.75, 1.5, 2.0, 3.25]
    assert len(db.top_k(MATMUL[0], ZEN1, 100)) == len(medians)
    assert db.top_k(MATMUL[0], ZEN1, 0) == []


def test_has_measured_by_hash_whatever_the_outcome(db: Database) -> None:
    db.commit_record(record(MATMUL, 1, 1.0))
    db.commit_record(record(MATMUL, 2, None, status="crashed"))
    assert db.has_measured(MATMUL[0], ZEN1, trace_of(1)[1])
    assert db.has_measured(MATMUL[0], ZEN1, trace_of(2)[1])
    assert not db.has_measured(MATMUL[0], ZEN1, trace_of(3)[1])
    assert not db.has_measured(SOFTMAX[0], ZEN1, trace_of(1)[1])


def test_find_record_is_the_ok_record_of_a_trace(db: Database) -> None:
    stored = record(MATMUL, 1, 1.0)
    db.commit_records([stored, record(MATMUL, 2, None, status="crashed")])
    found = db.find_record(MATMUL[0], ZEN1, trace_of(1)[1])
    assert found is not None and found.record_id == stored.record_id
    assert db.find_record(MATMUL[0], ZEN1, trace_of(2)[1]) is None  # not ok
    assert db.find_record(MATMUL[0], ZEN4, trace_of(1)[1]) is None  # another target
    assert db.find_record(SOFTMAX[0], ZEN1, trace_of(1)[1]) is None


def test_a_trace_is_measured_once_per_workload_and_target(db: Database) -> None:
    assert db.commit_record(record(MATMUL, 1, 2.0))
    assert not db.commit_record(record(MATMUL, 1, 1.0))  # same trace, new id: the first stands
    assert db.commit_record(record(MATMUL, 1, 1.0, target=ZEN4))  # another target is another trial
    assert [r.median_ms for r in db.top_k(MATMUL[0], ZEN1, 10)] == [2.0]


def test_commit_record_is_idempotent(db: Database) -> None:
    r = record(MATMUL, 1, 2.0)
    assert db.commit_record(r) is True
    assert db.commit_record(r) is False
    assert db.commit_records([r, record(MATMUL, 2, 3.0)]) == 1
    assert len(db.training_records(ZEN1)) == 2


def test_other_parameters_of_the_same_op_on_the_same_target(db: Database) -> None:
    db.commit_records(
        [
            record(MATMUL, 1, 1.0),
            record(MATMUL_BIG, 2, 8.0),
            record(MATMUL_BIG, 3, 6.0),
            record(MATMUL_BIG, 4, None, status="wrong_result"),
            record(MATMUL_ODD, 5, 1.5),
            record(MATMUL_ODD, 6, 0.1, target=ZEN4),  # another target
            record(SOFTMAX, 7, 0.2),  # another operator
        ]
    )
    others = db.best_of_op("matmul", ZEN1, exclude_workload_key=MATMUL[0])
    assert [(r.workload_key, r.median_ms) for r in others] == [
        (MATMUL_ODD[0], 1.5),
        (MATMUL_BIG[0], 6.0),
    ]
    assert all(r.op == "matmul" and r.target == ZEN1 for r in others)
    assert len(db.best_of_op("matmul", ZEN1)) == 3
    assert [r.workload_key for r in db.best_of_op("matmul", ZEN4)] == [MATMUL_ODD[0]]
    assert len(db.best_of_op("matmul", ZEN1, limit=1)) == 1


def test_other_thread_counts_of_the_same_cpu_nearest_first(db: Database) -> None:
    def zen(threads: int, mattr: str = "+avx,+avx2,+fma") -> str:
        return f"llvm -mcpu=znver3 -mattr={mattr} -num-threads={threads}"

    db.commit_records(
        [
            record(MATMUL, 1, 1.0, target=zen(1)),
            record(MATMUL, 2, 0.4, target=zen(4)),
            record(MATMUL, 3, 0.6, target=zen(3)),
            record(MATMUL, 4, 0.5, target=zen(2)),  # the target asked about
            record(MATMUL, 5, None, target=zen(8), status="wrong_result"),  # no ok record
            record(MATMUL, 6, 0.5, target=zen(6, "+avx,+avx2")),  # other features
            record(MATMUL, 7, 0.5, target=SKX1),  # another CPU
            record(MATMUL_BIG, 8, 0.5, target=zen(16)),  # another workload
        ]
    )
    assert db.other_thread_counts(MATMUL[0], zen(2)) == [zen(1), zen(3), zen(4)]
    assert db.other_thread_counts(MATMUL[0], zen(5)) == [zen(4), zen(3), zen(2), zen(1)]
    assert db.other_thread_counts(MATMUL_BIG[0], zen(2)) == [zen(16)]
    assert db.other_thread_counts(SOFTMAX[0], zen(2)) == []
    assert db.other_thread_counts(MATMUL[0], "not a target") == []


def test_the_finalists_choice_is_the_best(db: Database) -> None:
    fast, slow, failed = (
        record(MATMUL, 1, 1.0),
        record(MATMUL, 2, 1.1),
        record(MATMUL, 3, None, status="crashed"),
    )
    big_fast, big_slow = record(MATMUL_BIG, 4, 5.0), record(MATMUL_BIG, 5, 6.0)
    db.commit_records([fast, slow, failed, big_fast, big_slow, record(MATMUL, 6, 0.9, target=ZEN4)])
    assert (
        db.final(MATMUL[0], ZEN1) is None and db.best(MATMUL[0], ZEN1).record_id == fast.record_id
    )

    # re-timed together, the record with the higher tuning median won
    choice = db.commit_final(MATMUL[0], ZEN1, slow.record_id, 1.05)
    assert db.best(MATMUL[0], ZEN1).record_id == slow.record_id
    assert db.final(MATMUL[0], ZEN1) == choice and choice.retimed_ms == 1.05
    assert choice.decided_at.tzinfo is not None
    assert [r.median_ms for r in db.top_k(MATMUL[0], ZEN1, 2)] == [
        1.0,
        1.1,
    ]  # the search still ranks by median
    assert db.best(MATMUL[0], ZEN4).median_ms == 0.9  # targets never mix
    db.commit_final(MATMUL_BIG[0], ZEN1, big_slow.record_id, 5.5)
    assert [r.record_id for r in db.best_of_op("matmul", ZEN1)] == [
        slow.record_id,
        big_slow.record_id,
    ]

    # a later choice replaces it
    db.commit_final(MATMUL[0], ZEN1, fast.record_id, 1.02)
    assert db.best(MATMUL[0], ZEN1).record_id == fast.record_id
    assert db.final(MATMUL[0], ZEN1).retimed_ms == 1.02

    # only an ok record of that very workload on that very target can be chosen
    for key, target, record_id, retimed in (
        (MATMUL[0], ZEN1, failed.record_id, 1.0),
        (MATMUL[0], ZEN1, big_fast.record_id, 1.0),
        (MATMUL[0], ZEN4, fast.record_id, 1.0),
        (MATMUL[0], SKX1, fast.record_id, 1.0),
        (MATMUL[0], ZEN1, str(uuid.uuid4()), 1.0),
        (MATMUL[0], ZEN1, slow.record_id, 0.0),
        (MATMUL[0], ZEN1, slow.record_id, float("nan")),
    ):
        with pytest.raises(DatabaseError):
            db.commit_final(key, target, record_id, retimed)
    assert db.final(MATMUL[0], ZEN1).record_id == fast.record_id  # nothing stored was lost


def test_training_records_are_every_record_of_a_target_oldest_first(db: Database) -> None:
    db.commit_records(
        [
            record(MATMUL, 1, 1.0, at=3),
            record(SOFTMAX, 2, None, status="timeout", at=1),
            record(MATMUL, 3, 2.0, at=2),
            record(MATMUL, 4, 2.0, at=0, target=SKX1),
        ]
    )
    rows = db.training_records(ZEN1)
    assert [r.trace_hash for r in rows] == [trace_of(n)[1] for n in (2, 3, 1)]
    assert [r.status for r in rows] == ["timeout", "ok", "ok"]
    assert len(db.training_records(ZEN1, limit=2)) == 2


def test_a_record_round_trips_every_field(db: Database) -> None:
    r = record(MATMUL, 1, 1.25)
    db.commit_record(r)
    [back] = db.training_records(ZEN1)
    assert back == r


def test_cost_model_round_trip(db: Database) -> None:
    assert db.load_cost_model(ZEN1) is None
    blob = bytes(range(256)) * 40
    db.save_cost_model(ZEN1, blob, 120)
    assert db.load_cost_model(ZEN1) == (blob, 120)
    db.save_cost_model(ZEN1, b"newer", 240)
    assert db.load_cost_model(ZEN1) == (b"newer", 240)
    assert db.load_cost_model(ZEN4) is None


def test_commit_workload_is_idempotent(db: Database) -> None:
    db.commit_workload(*MATMUL)
    db.commit_workload(*MATMUL)
    db.commit_record(record(MATMUL, 1, 1.0))
    assert db.best(MATMUL[0], ZEN1) is not None


# -- records as data ---------------------------------------------------------------------


def test_record_rules() -> None:
    with pytest.raises(DatabaseError, match="median"):
        record(MATMUL, 1, None)
    with pytest.raises(DatabaseError, match="status"):
        record(MATMUL, 1, 1.0, status="fast")
    with pytest.raises(DatabaseError, match="no median"):
        TuningRecord(**{**record(MATMUL, 1, None, status="crashed").__dict__, "median_ms": 1.0})


def test_export_line_round_trip() -> None:
    r = record(MATMUL, 1, 1.25)
    line = json.dumps(r.to_json())
    assert TuningRecord.from_json(json.loads(line)) == r
    with pytest.raises(DatabaseError, match="run_times_ms"):
        TuningRecord.from_json({**r.to_json(), "run_times_ms": "fast"})


# -- SQL only: transactions ------------------------------------------------------------------


def test_commit_records_is_all_or_nothing(sql_engine: Engine) -> None:
    ensure_schema(sql_engine)
    db = SQLDatabase(sql_engine)
    bad = record(
        MATMUL, 2, 1.0, target="llvm -mcpu=znver3 -num-threads=1 -mattr=+fma"
    )  # not canonical
    with pytest.raises(DatabaseError, match="canonical"):
        db.commit_records([record(MATMUL, 1, 1.0), bad])
    assert db.training_records(ZEN1) == []


def test_default_url_is_the_embedded_file(monkeypatch, tmp_path) -> None:
    from service.db.engine import database_url

    monkeypatch.delenv("LOOMTUNE_DATABASE_URL", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert database_url() == f"sqlite:///{tmp_path}/loomtune/loomtune.db"
    monkeypatch.setenv("LOOMTUNE_DATABASE_URL", "postgresql://u@h:5432/d")
    assert database_url() == "postgresql+psycopg://u@h:5432/d"
    assert make_engine().dialect.driver == "psycopg"


# -- concurrency (PostgreSQL) ------------------------------------------------------------------

WRITERS = 4
RECORDS_EACH = 500


def _write_records(schema: str, writer: int) -> float:
    """A child process: commit RECORDS_EACH records one transaction each; seconds taken."""
    engine = pg_schema_engine(schema)
    db = SQLDatabase(engine)
    start = time.perf_counter()
    for i in range(RECORDS_EACH):
        wl = (MATMUL, MATMUL_BIG)[i % 2]
        db.commit_record(record(wl, writer * RECORDS_EACH + i, 1.0 + i))
    engine.dispose()
    return time.perf_counter() - start


def test_concurrent_writers_lose_nothing(pg_schema: str, pg_engine: Engine) -> None:
    ensure_schema(pg_engine)
    with multiprocessing.get_context("spawn").Pool(WRITERS) as pool:
        seconds = pool.starmap(_write_records, [(pg_schema, w) for w in range(WRITERS)])
    with pg_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM records")).scalar() == WRITERS * RECORDS_EACH
        assert conn.execute(text("SELECT count(*) FROM workloads")).scalar() == 2
        assert conn.execute(text("SELECT count(*) FROM targets")).scalar() == 1
    print(f"writers took {[round(s, 2) for s in seconds]} s")
    assert max(seconds) < 20


def _lease_all(schema: str, target_id: int, worker: int, start: Any) -> list[int]:
    """A child process: lease batches of 10 until the target's jobs have none left; the ids leased.

    The processes connect, then start together (`start`, a barrier): spawning one
    takes longer than leasing all 1000 on a fast machine, so the first would
    otherwise take everything and the test would not test concurrency.
    """
    from service.db.store import lease_candidates

    engine = pg_schema_engine(schema)
    sessions = SQLDatabase(engine).sessions
    with engine.connect():
        pass
    start.wait(timeout=120)
    got: list[int] = []
    while True:
        with sessions.begin() as session:
            batch = [c.id for c in lease_candidates(session, target_id, worker, 10, 60)]
        if not batch:
            break
        got += batch
    engine.dispose()
    return got


def test_concurrent_leases_hand_out_each_candidate_once(pg_schema: str, pg_engine: Engine) -> None:
    from service.db import models as m

    ensure_schema(pg_engine)
    SQLDatabase(pg_engine).commit_workload(*MATMUL)
    now = datetime.now(UTC)
    with SQLDatabase(pg_engine).sessions.begin() as session:
        target = m.Target(
            canonical=ZEN1, cpu="znver3", features=["+avx", "+avx2", "+fma"], threads=1
        )
        session.add(target)
        session.flush()
        target_id = target.id
        session.add(
            m.Job(
                id=1,
                owner="alice",
                workload_key=MATMUL[0],
                target_id=target.id,
                budget=1000,
                strategy="replay",
                seed=0,
                status="running",
                created_at=now,
                updated_at=now,
            )
        )
        session.add_all(
            m.Worker(id=w, target_id=target.id, name=f"w{w}", registered_at=now, last_heartbeat=now)
            for w in range(1, WRITERS + 1)
        )
        session.flush()
        session.add_all(
            m.Candidate(job_id=1, trace=trace_of(i)[0], trace_hash=trace_of(i)[1], status="pending")
            for i in range(1000)
        )
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(WRITERS) as pool:
        start = manager.Barrier(WRITERS)
        leased = pool.starmap(
            _lease_all, [(pg_schema, target_id, w, start) for w in range(1, WRITERS + 1)]
        )
    everything = [i for ids in leased for i in ids]
    assert len(everything) == 1000 and len(set(everything)) == 1000
    assert all(ids for ids in leased), "every worker got some"
    with pg_engine.connect() as conn:
        assert (
            conn.execute(
                text("SELECT count(*) FROM candidates WHERE status = 'leased' AND attempts = 1")
            ).scalar()
            == 1000
        )


def test_the_tuner_does_not_import_sqlalchemy() -> None:
    import subprocess
    import sys

    code = "import sys, tuner.database; assert 'sqlalchemy' not in sys.modules, 'tuner imports sqlalchemy'"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
