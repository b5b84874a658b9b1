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


def test_prune_dry_run_deletes_nothing_and_yes_deletes_only_old_ones(
    tuned: tuple[str, dict],
) -> None:
    url, _ = tuned
    db = open_database(url)
    with db.sessions.begin() as session:
        ids = list(session.scalars(select(m.Record.record_id).order_by(m.Record.measured_at)))
        old, new = ids[: len(ids) // 2], ids[len(ids) // 2 :]
        session.execute(
            update(m.Record)
            .where(m.Record.record_id.in_(old))
            .values(measured_at=utc_now() - timedelta(days=30))
        )
    assert old and new

    proc = loomtune(url, "db", "prune", "--older-than", "7", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["dry_run"] and plan["deleted"] == 0
    assert set(plan["to_delete"]) | set(plan["kept"]) == set(old)
    assert "would delete" in proc.stderr
    with db.sessions() as session:
        assert len(list(session.scalars(select(m.Record.record_id)))) == len(ids)

    proc = loomtune(url, "db", "prune", "--older-than", "7", "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["deleted"] == len(plan["to_delete"])
    with db.sessions() as session:
        left = set(session.scalars(select(m.Record.record_id)))
    assert left == set(new) | set(plan["kept"])
    # The workload's best is kept (and said so) whether it was old or new.
    with db.sessions() as session:
        best_ids = set(session.scalars(select(m.Final.record_id)))
    assert best_ids <= left
    db.engine.dispose()


def test_prune_needs_a_criterion(tuned: tuple[str, dict]) -> None:
    url, _ = tuned
    proc = loomtune(url, "db", "prune")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("loomtune: error: db prune: say which records")
