"""`loomtune tune --model` and `loomtune.tune_model`: one budget over a model's tasks, the
contract's JSON, the tuned schedules used by `model inspect` and `run --model`, and resuming:
the budget is the model's in all, so a second run measures only what is left."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import loomtune
from service.cli.main import main
from service.db.store import open_database
from tests.service.cli.modelkit import RUN_FIELDS, run_json

TUNE_FIELDS = RUN_FIELDS | {"trials", "trials_done", "tuning_seconds", "stop_reason"}
TASK_FIELDS = {"key", "trials", "best_ms", "share"}
REPLAY = ("--strategy", "replay", "--json")
"""The resume test's search (what is measured when follows the budget, whatever the search):
the learned one evolves ~150 children a batch before its model trains. test_tune_model_from_python
runs the default search."""


def _records(url: str, keys: list[str]) -> tuple[Counter[str], int]:
    """Records per task key, and how many (key, trace) pairs were stored more than once."""
    records = [r for r in open_database(url).records() if r.workload_key in keys]
    pairs = Counter((r.workload_key, r.trace_hash) for r in records)
    return Counter(r.workload_key for r in records), sum(n - 1 for n in pairs.values())


def test_tune_model_spends_one_budget_and_resumes(db, capsys, mlp_file: Path) -> None:
    code, r = run_json(capsys, "tune", "--model", str(mlp_file), "--trials", "4", *REPLAY)
    assert code == 0 and set(r) == TUNE_FIELDS
    assert r["correct"] is True and r["max_abs_err"] < 1e-4 and r["latency_ms"] > 0
    assert r["trials"] == r["trials_done"] == 4 and r["tuning_seconds"] > 0
    tasks = r["tasks"]
    assert len(tasks) == r["kernels"] == 4 and all(set(t) >= TASK_FIELDS for t in tasks)
    assert sum(t["trials"] for t in tasks) == 4 and all(t["trials"] >= 1 for t in tasks)
    assert r["tuned_tasks"] == 4 and all(t["best_ms"] > 0 for t in tasks)
    assert sum(t["share"] for t in tasks) == pytest.approx(1.0)
    keys = [t["key"] for t in tasks]
    per_task, repeated = _records(db, keys)
    assert per_task == {t["key"]: t["trials"] for t in tasks} and repeated == 0

    # The tuned schedules are what inspect reports and run --model uses.
    code, inspected = run_json(capsys, "model", "inspect", str(mlp_file), "--json")
    assert code == 0 and all(t["tuned"] for t in inspected["tasks"])
    code, ran = run_json(capsys, "run", "--model", str(mlp_file), "--json")
    assert code == 0 and ran["correct"] is True and ran["tuned_tasks"] == 4

    # A larger budget measures only the difference, nothing twice.
    code, r = run_json(capsys, "tune", "--model", str(mlp_file), "--trials", "6", *REPLAY)
    assert code == 0 and r["correct"] is True and r["trials_done"] == 2
    assert sum(t["trials"] for t in r["tasks"]) == 6
    per_task, repeated = _records(db, keys)
    assert sum(per_task.values()) == 6 and repeated == 0

    # The same budget again: nothing is measured.
    code, r = run_json(capsys, "tune", "--model", str(mlp_file), "--trials", "6", *REPLAY)
    assert code == 0 and r["trials_done"] == 0 and r["correct"] is True
    assert "already spent" in r["stop_reason"]
    assert sum(_records(db, keys)[0].values()) == 6


def test_tune_model_measures_both_implementations_and_runs_the_faster(
    db, capsys, res_block_file: Path
) -> None:
    """The block's two stride-1 3×3 convs are tuned directly and by Winograd; the model
    runs, for each, whichever measured faster, and only those count in its time."""
    code, r = run_json(capsys, "tune", "--model", str(res_block_file), "--trials", "5", *REPLAY)
    assert code == 0 and r["correct"] is True and r["kernels"] == 3
    tasks = {t["pattern"]: t for t in r["tasks"]}
    assert sorted(tasks) == [
        "conv2d+add+relu+transpose [direct]",
        "conv2d+add+relu+transpose [winograd]",
        "conv2d+relu [direct]",
        "conv2d+relu [winograd]",
        "transpose+conv2d+relu",
    ]
    assert all(t["trials"] == 1 and t["best_ms"] > 0 for t in tasks.values())
    code, inspected = run_json(capsys, "model", "inspect", str(res_block_file), "--json")
    assert code == 0 and len(inspected["tasks"]) == 3
    for pattern in ("conv2d+relu", "conv2d+add+relu+transpose"):
        faster = min(("direct", "winograd"), key=lambda n: tasks[f"{pattern} [{n}]"]["best_ms"])
        (t,) = [t for t in inspected["tasks"] if t["pattern"] == pattern]
        assert t["implementation"] == faster and t["tuned"]
        assert t["alternatives"] == [({"direct", "winograd"} - {faster}).pop()]
        assert t["key"] == tasks[f"{pattern} [{faster}]"]["key"]
        slower = ({"direct", "winograd"} - {faster}).pop()
        assert tasks[f"{pattern} [{slower}]"]["share"] is None
    assert sum(t["share"] for t in r["tasks"] if t["share"] is not None) == pytest.approx(1.0)
    code, ran = run_json(capsys, "run", "--model", str(res_block_file), "--json")
    assert code == 0 and ran["correct"] is True and ran["tuned_tasks"] == 3


def test_tune_model_from_python(db, mlp_file: Path) -> None:
    result = loomtune.tune_model(mlp_file, trials=2, database_url=db)
    assert result.trials_done == 2 and result.correct is True
    assert sum(t.trials for t in result.tasks) == 2
    tuned = [t for t in result.tasks if t.best_ms is not None]
    assert tuned and sum(t.share for t in tuned) == pytest.approx(1.0)
    assert all(t.share is None for t in result.tasks if t.best_ms is None)
    x = np.random.default_rng(0).uniform(-1, 1, (4, 64)).astype(np.float32)
    (y,) = result.model(x=x)
    assert y.shape == (4, 10) and np.allclose(y.sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tune", "--model", "missing.onnx"], "missing.onnx"),
        (["tune", "matmul", "--model", "x.onnx"], "not several"),
        (["tune", "--model", "x.onnx", "--plot", "c.png"], "--plot"),
    ],
)
def test_user_errors_are_one_line_exit_2(db, capsys, argv: list[str], message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_a_file_that_is_not_onnx_is_one_line(db, capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert main(["tune", "--model", str(bad), "--trials", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.onnx" in err and len(err.splitlines()) == 1


def test_a_time_budget_bounds_tuning_and_finishing(db, mlp_file: Path) -> None:
    """Tuning keeps time back for finishing; finishing past the deadline re-times nothing
    more, and the model still builds from the tuning medians' bests."""
    import time

    from service.tuning import FINISH_S_PER_TASK, TAIL_S_PER_TASK, ModelTuning

    spent = ModelTuning(
        mlp_file, trials=4, strategy="replay", database=open_database(db), time_budget_s=1e-6
    )
    assert spent.tune() == 0 and spent.stopped_by == "time budget spent before tuning"

    tuning = ModelTuning(
        mlp_file, trials=4, strategy="replay", database=open_database(db), time_budget_s=60.0
    )
    kept_back = 60.0 - tuning._tuning_seconds()
    reserve = (FINISH_S_PER_TASK + TAIL_S_PER_TASK) * len(tuning.tasks)
    assert min(reserve, 15.0) <= kept_back < min(reserve, 15.0) + 1.0
    assert tuning.tune() == 4
    # the budget, less what compiling keeps back, runs out as finishing starts
    tuning.deadline = time.monotonic() + tuning._tail_seconds() - 0.5
    result = tuning.finish()
    measured = sorted(t.pattern for t in result.tasks if t.trials_done)
    assert measured and sorted(tuning.not_retimed) == measured
    assert result.correct is True and all(t.best_ms for t in result.tasks if t.trials_done)


def test_finishing_re_times_only_implementations_that_could_run(db, res_block_file: Path) -> None:
    """An alternative more than `RETIME_MARGIN` behind its plan task's fastest is not
    re-timed: its finalists cannot change what the model runs."""
    from service.tuning import RETIME_MARGIN, ModelTuning

    tuning = ModelTuning(res_block_file, trials=0, database=open_database(db))
    by_label = {s.pattern: s for s in tuning.tasks}
    assert len(by_label) == 5 and tuning.groups == [0, 1, 1, 2, 2]
    for label, ms in {
        "transpose+conv2d+relu": 1.0,
        "conv2d+relu [direct]": 2.0,
        "conv2d+relu [winograd]": 2.0 * RETIME_MARGIN * 1.01,  # behind: not re-timed
        "conv2d+add+relu+transpose [direct]": 3.0,
        "conv2d+add+relu+transpose [winograd]": 3.0 * RETIME_MARGIN * 0.99,  # close: re-timed
    }.items():
        by_label[label].best_ms = ms
    kept = sorted(state.pattern for _, state in tuning._contenders())
    assert kept == sorted(set(by_label) - {"conv2d+relu [winograd]"})
