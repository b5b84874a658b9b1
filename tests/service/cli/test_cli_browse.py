"""`tune --time-budget`, then `workloads`, `records` and `db prune` on what it stored."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from service.db import models as m
from service.db.store import open_database
from tuner.database import utc_now

ROOT = Path(__file__).resolve().parents[3]
WORKLOAD = ("dense", "m=32", "n=32", "k=32")


def loomtune(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args, "--database", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    """One short tune whose time budget, not its 300 trials, ends it."""
    url = f"sqlite:///{tmp_path_factory.mktemp('browse') / 'loomtune.db'}"
    proc = loomtune(url, "tune", *WORKLOAD, "--trials", "300", "--time-budget", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    return url, json.loads(proc.stdout)


def test_time_budget_ends_the_tune_with_its_reason(tuned: tuple[str, dict]) -> None:
    _, result = tuned
    assert 0 < result["trials_done"] < 300
    assert result["stop_reason"].startswith("time budget of 1 s spent after")
    assert result["correct"] and len(result["history"]) == result["trials_done"]


def test_workloads_and_records_list_what_the_tune_stored(tuned: tuple[str, dict]) -> None:
    url, result = tuned
    proc = loomtune(url, "workloads", "--json")
    assert proc.returncode == 0, proc.stderr
    (w,) = json.loads(proc.stdout)["workloads"]
    assert (w["op"], w["params"], w["workload_key"]) == (
        "dense",
        result["params"],
        result["workload_key"],
    )
    assert w["records"] == result["trials_done"]
    assert w["best_ms"] == {result["target"]: result["best_record_ms"]}

    proc = loomtune(url, "records", *WORKLOAD, "--top", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["records"]
    ok = [h for h in result["history"] if h is not None]
    assert len(rows) == min(3, len(ok)) and rows
    times = [r["median_ms"] for r in rows]
    assert times == sorted(times) and times[0] == pytest.approx(min(ok))
    assert all(r["worker"] and r["measured_at"] and r["record_id"] for r in rows)

    text = loomtune(url, "workloads")
    assert text.returncode == 0 and "dense m=32 n=32 k=32" in text.stdout


@pytest.fixture
def stored(tmp_path: Path) -> str:
    """A database of 12 simulated records of one workload (no compiling, deterministic)."""
    from ir.task import library_task
    from tuner.search.loop import tune_loop
    from tuner.search.strategy import SearchContext, make_strategy
    from tuner.simulated import SimulatedRunner
    from tuner.space.simple import SimpleSpace

    url = f"sqlite:///{tmp_path / 'loomtune.db'}"
    db = open_database(url)
    task = library_task("matmul", {"m": 64, "n": 48, "k": 32})
    target = "llvm -mcpu=test -num-threads=1"
    ctx = SearchContext(task, target, SimpleSpace(task.program), db)
    strategy = make_strategy("replay", ctx, 0)
    run = tune_loop(
        task, target, strategy=strategy, runner=SimulatedRunner(), database=db, trials=12
    )
    assert run.trials_done == 12
    db.engine.dispose()
    return url


def test_prune_dry_run_deletes_nothing_and_yes_deletes_only_old_ones(stored: str) -> None:
    url = stored
    db = open_database(url)
    with db.sessions.begin() as session:
        ids = list(session.scalars(select(m.Record.record_id).order_by(m.Record.measured_at)))
        old, new = ids[:8], ids[8:]
        session.execute(
            update(m.Record)
            .where(m.Record.record_id.in_(old))
            .values(measured_at=utc_now() - timedelta(days=30))
        )
        best = session.scalar(
            select(m.Record.record_id)
            .where(m.Record.status == "ok")
            .order_by(m.Record.trusted_ms, m.Record.measured_at)
            .limit(1)
        )
        # Make the best an old record, so that prune has to keep it.
        session.execute(
            update(m.Record)
            .where(m.Record.record_id == best)
            .values(measured_at=utc_now() - timedelta(days=40))
        )
    old, new = [i for i in ids if i in old or i == best], [i for i in new if i != best]

    proc = loomtune(url, "db", "prune", "--older-than", "7", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["dry_run"] and plan["deleted"] == 0
    assert plan["kept"] == {best: "the workload's best on its target"}
    assert set(plan["to_delete"]) == set(old) - {best}
    assert "would delete" in proc.stderr and f"keeping record {best}" in proc.stderr
    with db.sessions() as session:
        assert len(list(session.scalars(select(m.Record.record_id)))) == len(ids)

    proc = loomtune(url, "db", "prune", "--worker", "nobody", "--json")
    assert json.loads(proc.stdout)["matched"] == 0

    proc = loomtune(url, "db", "prune", "--older-than", "7", "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["deleted"] == len(old) - 1
    with db.sessions() as session:
        left = set(session.scalars(select(m.Record.record_id)))
    assert left == set(new) | {best}
    db.engine.dispose()


def test_prune_needs_a_criterion(tuned: tuple[str, dict]) -> None:
    url, _ = tuned
    proc = loomtune(url, "db", "prune")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("loomtune: error: db prune: say which records")
