"""`loomtune tune` end to end: real measurement processes, a real SQLite file, `apply` of the result."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
TANH_MATMUL = ROOT / "examples" / "tanh_matmul.workload.json"
TRIALS, MORE = 16, 8
"""The first tune's budget (the README's is 32), and the second's: enough for four finalists."""


def loomtune(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOOMTUNE_DATABASE_URL": f"sqlite:///{db}"}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )


def record_hashes(db: Path) -> list[str]:
    with sqlite3.connect(db) as con:
        return [row[0] for row in con.execute("SELECT trace_hash FROM records")]


def history_medians(db: Path) -> list[float]:
    with sqlite3.connect(db) as con:
        return [row[0] for row in con.execute("SELECT median_ms FROM records WHERE status = 'ok'")]


def stored_best(db: Path) -> tuple[str, float]:
    """What `loomtune best` answers: the record id and its re-timed median."""
    proc = loomtune(db, "best", "matmul", "m=256", "n=256", "k=256", "--json")
    assert proc.returncode == 0, proc.stderr
    best = json.loads(proc.stdout)
    return best["record_id"], best["retimed_ms"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    tmp = tmp_path_factory.mktemp("tune")
    db = tmp / "loomtune.db"
    plot = tmp / "curve.png"
    proc = loomtune(
        db,
        "tune",
        "matmul",
        "m=256",
        "n=256",
        "k=256",
        "--trials",
        str(TRIALS),
        "--json",
        "--plot",
        str(plot),
    )
    assert proc.returncode == 0, proc.stderr
    return db, json.loads(proc.stdout), plot


def test_tune_json_has_a_correct_best_and_every_trial(tuned: tuple[Path, dict, Path]) -> None:
    db, out, _ = tuned
    assert (
        out["correct"] is True
        and out["op"] == "matmul"
        and out["params"] == {"m": 256, "n": 256, "k": 256}
    )
    assert out["trials"] == out["trials_done"] == len(out["history"]) == TRIALS
    assert out["latency_ms"] > 0 and out["numpy_ms"] > 0 and out["gflops"] > 0
    assert out["speedup_vs_numpy"] == pytest.approx(out["numpy_ms"] / out["latency_ms"])
    assert out["tuning_seconds"] > 0 and out["strategy"] == "evolutionary"
    assert set(out["failures"]) == {
        "compile_error",
        "runtime_error",
        "timeout",
        "wrong_result",
        "crashed",
    }
    history = [h for h in out["history"] if h is not None]
    assert history and all(b <= a for a, b in itertools.pairwise(history))
    # the four best records were re-timed together; the fastest of them is the result
    finalists = out["finalists"]
    assert len(finalists) == 4 and all(f["retimed_ms"] > 0 for f in finalists)
    assert [f["retimed_ms"] for f in finalists] == sorted(f["retimed_ms"] for f in finalists)
    assert min(f["tuning_ms"] for f in finalists) == pytest.approx(history[-1])
    assert out["best_record_ms"] == finalists[0]["tuning_ms"]
    assert sorted(f["tuning_ms"] for f in finalists) == sorted(history_medians(db))[:4]
    assert len(record_hashes(db)) == TRIALS
    # the database now names the finalists' choice as the best, with its re-timed median
    assert stored_best(db) == (finalists[0]["record_id"], finalists[0]["retimed_ms"])


def test_the_best_trace_is_an_apply_able_trace_file(
    tuned: tuple[Path, dict, Path], tmp_path: Path
) -> None:
    db, out, _ = tuned
    path = tmp_path / "best.trace.json"
    path.write_text(json.dumps(out["best_trace"]))
    proc = loomtune(db, "apply", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    applied = json.loads(proc.stdout)
    assert applied["correct"] is True and applied["workload_key"] == out["workload_key"]


def test_plot_is_a_png(tuned: tuple[Path, dict, Path]) -> None:
    _, _, plot = tuned
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 5000


def test_tuning_again_continues_and_measures_no_trace_twice(tuned: tuple[Path, dict, Path]) -> None:
    db, first, _ = tuned
    proc = loomtune(
        db, "tune", "matmul", "m=256", "n=256", "k=256", "--trials", str(MORE), "--json"
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["trials_done"] == MORE
    hashes = record_hashes(db)
    assert len(hashes) == len(set(hashes)) == TRIALS + MORE
    # the best stored overall can only get better
    assert min(f["tuning_ms"] for f in out["finalists"]) <= min(
        f["tuning_ms"] for f in first["finalists"]
    )
    # the earlier choice defended its place among the finalists; the new choice is the best
    assert first["finalists"][0]["record_id"] in {f["record_id"] for f in out["finalists"]}
    assert stored_best(db) == (out["finalists"][0]["record_id"], out["finalists"][0]["retimed_ms"])


def test_a_custom_workload_tunes_from_its_json_file(tmp_path: Path) -> None:
    proc = loomtune(
        tmp_path / "db.sqlite", "tune", "--workload", str(TANH_MATMUL), "--trials", "6", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (
        out["correct"] is True
        and out["trials_done"] == 6
        and out["best_trace"]["workload"]["definition"]
    )


def test_a_custom_workload_tunes_through_the_python_api(tmp_path: Path) -> None:
    import loomtune as lt

    url = f"sqlite:///{tmp_path / 'api.sqlite'}"
    result = lt.tune(TANH_MATMUL, trials=5, database_url=url)
    assert result.trials_done == 5 and result.latency_ms and result.numpy_ms
    task = result.task
    inputs = task.make_inputs(3)
    out = [np.empty(shape, dtype) for shape, dtype in task.output_specs()]
    kernel = lt.load_best(TANH_MATMUL, database_url=url)
    kernel(*inputs, *out)
    np.testing.assert_allclose(out[0], task.reference(inputs)[0], rtol=1e-4, atol=1e-5)
    assert result.best_trace.hash == result.record.trace_hash


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["matmul", "--strategy", "annealing"], ["unknown search strategy", "annealing"]),
        (["matmul", "m=-3"], ["m"]),
        (["matmul", "--plot", "curve.jpg"], ["PNG"]),
        (["--tasks", "no-such-tasks.json"], ["no-such-tasks.json"]),
        (["matmul", "--tasks", "tasks.json"], ["--tasks"]),
        (["matmul", "--trials", "0"], ["--trials"]),
        ([], ["operator"]),
    ],
)
def test_bad_tune_requests_are_one_line_errors(
    tmp_path: Path, args: list[str], words: list[str]
) -> None:
    db = tmp_path / "db.sqlite"
    proc = loomtune(db, "tune", *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("loomtune: error:") and "Traceback" not in proc.stderr
    for w in words:
        assert w in lines[-1]


def test_ctrl_c_keeps_what_was_measured_and_prints_the_best_so_far(tmp_path: Path) -> None:
    db = tmp_path / "db.sqlite"
    env = {**os.environ, "LOOMTUNE_DATABASE_URL": f"sqlite:///{db}"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service.cli",
            "tune",
            "matmul",
            "m=64",
            "n=64",
            "k=64",
            "--trials",
            "5000",
            "--json",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if db.exists():
            try:
                if len(record_hashes(db)) >= 5:
                    break
            except sqlite3.OperationalError:
                pass
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr  # interrupted: 128 + SIGINT
    out = json.loads(stdout)
    assert 5 <= out["trials_done"] < 5000 and "interrupted" in out["stop_reason"]
    assert out["correct"] is True and out["latency_ms"] > 0
    assert len(record_hashes(db)) == out["trials_done"]
    assert "crashed" not in {s for s, n in out["failures"].items() if n}


def test_tasks_share_one_budget_and_report_the_weighted_latency(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(
        json.dumps(
            {
                "tasks": [
                    {"op": "matmul", "params": {"m": 48, "n": 32, "k": 16}, "weight": 1},
                    {"op": "gelu", "params": {"m": 64, "n": 96}, "weight": 3},
                ]
            }
        )
    )
    plot = tmp_path / "tasks.png"
    proc = loomtune(
        tmp_path / "db.sqlite",
        "tune",
        "--tasks",
        str(tasks),
        "--trials",
        "12",
        # the budget's split is the scheduler's whatever the search; the learned search's
        # rounds (evolving 150 children with an untrained model) were most of the time
        "--strategy",
        "replay",
        "--json",
        "--plot",
        str(plot),
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [t["op"] for t in out["tasks"]] == ["matmul", "gelu"] and [
        t["weight"] for t in out["tasks"]
    ] == [1, 3]
    assert sum(t["trials_done"] for t in out["tasks"]) == 12 and all(
        t["trials_done"] > 0 for t in out["tasks"]
    )
    assert all(t["correct"] for t in out["tasks"])
    expected = sum(t["weight"] * t["latency_ms"] for t in out["tasks"])
    assert out["weighted_latency_ms"] == pytest.approx(expected)
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_a_bad_tasks_file_names_the_entry(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [{"op": "matmul"}, {"op": "matmul", "weight": -1}]}))
    proc = loomtune(tmp_path / "db.sqlite", "tune", "--tasks", str(tasks))
    assert proc.returncode == 2 and "tasks[1].weight" in proc.stderr.strip().splitlines()[-1]
