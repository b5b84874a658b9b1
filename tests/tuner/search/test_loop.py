"""The tuning loop against the deterministic simulated runner (no real timings)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

import pytest

from ir.task import library_task
from tuner.database import InMemoryDatabase
from tuner.runner import MeasureResult, ReadyFuture
from tuner.search.loop import tune_loop
from tuner.search.strategy import SearchContext, UnknownStrategyError, make_strategy
from tuner.simulated import SimulatedRunner, analytic_cost_ms
from tuner.space.simple import SimpleSpace
from tuner.trace.trace import Trace

TARGET = "llvm -mcpu=test -num-threads=1"


def _run(task, db, trials, seed=0, runner=None, **kw):
    ctx = SearchContext(task, TARGET, SimpleSpace(task.program), db)
    return tune_loop(
        task,
        TARGET,
        strategy=make_strategy("replay", ctx, seed),
        runner=runner or SimulatedRunner(),
        database=db,
        trials=trials,
        **kw,
    )


def test_budget_spent_every_trial_recorded_and_best_is_the_minimum() -> None:
    task = library_task("matmul", {"m": 64, "n": 48, "k": 32})
    db = InMemoryDatabase()
    run = _run(task, db, 40, batch_size=7)
    assert run.trials_done == 40 and len(run.history) == 40 and not run.exhausted
    records = db.training_records(TARGET)
    assert len(records) == 40 and len({r.trace_hash for r in records}) == 40
    best = min(r.median_ms for r in records)
    assert run.history[-1] == pytest.approx(best)
    assert db.best(task.key, TARGET).median_ms == pytest.approx(best)
    # best-so-far never increases
    assert all(b <= a for a, b in zip(run.history, run.history[1:]))
    # the simulated time of a record is the analytic cost of its trace
    r = records[5]
    assert r.median_ms == pytest.approx(
        analytic_cost_ms(Trace.from_json(r.trace).apply(task.program).program)
    )


def test_a_second_run_measures_no_trace_twice() -> None:
    task = library_task("matmul", {"m": 64, "n": 48, "k": 32})
    db = InMemoryDatabase()
    _run(task, db, 20, seed=1)
    _run(task, db, 20, seed=1)  # the same seed proposes the same samples first: all skipped
    hashes = [r.trace_hash for r in db.training_records(TARGET)]
    assert len(hashes) == 40 and len(set(hashes)) == 40


def test_a_space_that_runs_out_ends_early_and_says_so() -> None:
    task = library_task("matmul", {"m": 2, "n": 2, "k": 2})  # 2 x 2 x 2 tilings: 8 candidates
    db = InMemoryDatabase()
    run = _run(task, db, 50)
    assert run.exhausted and run.trials_done == 8 and len(run.history) == 8
    assert "ran out" in run.stop_reason and "8 of 50" in run.stop_reason


class _FlakyRunner(SimulatedRunner):
    """Every third candidate fails with a rotating status."""

    statuses = ("crashed", "timeout", "wrong_result", "compile_error", "runtime_error")

    def submit(self, task, target, traces: Sequence[Trace]):
        out = []
        for t in traces:
            self.measured += 1
            if self.measured % 3 == 0:
                status = self.statuses[(self.measured // 3) % len(self.statuses)]
                out.append(ReadyFuture(MeasureResult.failure(status, f"injected {status}")))
            else:
                out.append(ReadyFuture(self.measure(task, t)))
        return out


def test_failures_are_trials_and_records_but_never_best() -> None:
    task = library_task("matmul", {"m": 64, "n": 48, "k": 32})
    db = InMemoryDatabase()
    run = _run(task, db, 30, runner=_FlakyRunner())
    assert run.trials_done == 30
    assert sum(run.failures.values()) == 10
    records = db.training_records(TARGET)
    assert sum(r.status != "ok" for r in records) == 10
    assert all(r.median_ms is None and r.message for r in records if r.status != "ok")
    assert db.best(task.key, TARGET).status == "ok"


def test_interrupt_keeps_what_was_measured() -> None:
    task = library_task("matmul", {"m": 64, "n": 48, "k": 32})
    db = InMemoryDatabase()

    class Interrupting(SimulatedRunner):
        def submit(self, task, target, traces):
            if self.measured >= 12:
                raise KeyboardInterrupt
            return super().submit(task, target, traces)

    run = _run(task, db, 100, runner=Interrupting(), batch_size=4)
    assert run.interrupted and run.trials_done == 12
    assert len(db.training_records(TARGET)) == 12
    assert "interrupted" in run.stop_reason


def test_should_stop_ends_the_run_between_batches() -> None:
    task = library_task("matmul", {"m": 64, "n": 48, "k": 32})
    db = InMemoryDatabase()
    calls = []
    run = _run(
        task, db, 100, batch_size=5, should_stop=lambda: len(calls) >= 3, on_trial=calls.append
    )
    assert run.interrupted and run.trials_done == 5


def test_unknown_strategy_is_a_clear_error() -> None:
    task = library_task("matmul", {"m": 8, "n": 8, "k": 8})
    ctx = SearchContext(task, TARGET, SimpleSpace(task.program), InMemoryDatabase())
    with pytest.raises(UnknownStrategyError, match=r"unknown search strategy 'annealing'.*replay"):
        make_strategy("annealing", ctx, 0)


_SCRIPT = """
import json
from ir.task import library_task
from tuner.database import InMemoryDatabase
from tuner.search.loop import tune_loop
from tuner.simulated import SimulatedRunner
from tuner.space.simple import SimpleSpace
from tuner.search.strategy import SearchContext, make_strategy
task = library_task("matmul", {"m": 64, "n": 48, "k": 32})
db = InMemoryDatabase()
ctx = SearchContext(task, "t", SimpleSpace(task.program), db)
seen = []
tune_loop(task, "t", strategy=make_strategy("replay", ctx, 7), runner=SimulatedRunner(), database=db,
          trials=16, on_trial=lambda t: seen.append([t.trace.hash, t.result.median_ms]))
print(json.dumps(seen))
"""


def test_a_seeded_run_gives_identical_traces_in_a_fresh_process() -> None:
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and len(runs[0]) == 16
    # and in this process too
    task = library_task("matmul", {"m": 64, "n": 48, "k": 32})
    db = InMemoryDatabase()
    ctx = SearchContext(task, "t", SimpleSpace(task.program), db)
    seen = []
    tune_loop(
        task,
        "t",
        strategy=make_strategy("replay", ctx, 7),
        runner=SimulatedRunner(),
        database=db,
        trials=16,
        on_trial=lambda t: seen.append([t.trace.hash, t.result.median_ms]),
    )
    assert seen == runs[0]


def test_search_time_is_the_strategys_share_of_the_run() -> None:
    """`search_seconds` counts propose and observe, not the wait for measurements."""
    import time

    task = library_task("matmul", {"m": 64, "n": 48, "k": 32})

    class SlowRunner(SimulatedRunner):
        def submit(self, task, target, traces):
            time.sleep(0.2)
            return super().submit(task, target, traces)

    run = _run(task, InMemoryDatabase(), 16, batch_size=8, runner=SlowRunner())
    assert run.trials_done == 16
    assert 0 < run.search_seconds < run.seconds - 0.35
