"""Stopping rules (time budget, early stopping) in the tuning loop, on the simulated runner."""

from __future__ import annotations

import pytest

from ir.task import library_task
from tuner.database import InMemoryDatabase
from tuner.search.loop import tune_loop
from tuner.search.stopping import EarlyStop, TimeBudget, stopping_rules
from tuner.search.strategy import SearchContext, make_strategy
from tuner.simulated import SimulatedRunner
from tuner.space.simple import SimpleSpace

TARGET = "llvm -mcpu=test -num-threads=1"
TASK = library_task("matmul", {"m": 64, "n": 48, "k": 32})


def _run(trials: int, rule, **kw):
    db = InMemoryDatabase()
    ctx = SearchContext(TASK, TARGET, SimpleSpace(TASK.program), db)
    run = tune_loop(
        TASK,
        TARGET,
        strategy=make_strategy("replay", ctx, 0),
        runner=SimulatedRunner(),
        database=db,
        trials=trials,
        stop_rule=rule,
        **kw,
    )
    return run, db


class FakeClock:
    """Each reading advances one second: the budget is counted in readings."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_time_budget_stops_starting_trials_and_says_so() -> None:
    clock = FakeClock()
    budget = TimeBudget(5, clock=clock)  # starts at the loop's first question (1)
    run, db = _run(40, budget, batch_size=4)
    # Asked before each proposal (1, then 6 after the batch of 4) and after each trial (2-5).
    assert run.trials_done == 4 and not run.interrupted and not run.exhausted
    assert len(db.training_records(TARGET)) == 4  # what was measured is stored
    assert run.stopped_by == "time budget of 5 s spent"
    assert run.stop_reason == "time budget of 5 s spent after 4 of 40 trials"


def test_early_stop_after_n_trials_without_improvement() -> None:
    full, _ = _run(60, None, batch_size=5)
    history = full.history
    # Where the loop must stop: the first trial that ends a run of 6 without a new best.
    since, expected = 0, None
    for i in range(1, len(history)):
        since = (
            0
            if history[i] is not None and (history[i - 1] is None or history[i] < history[i - 1])
            else since + 1
        )
        if since == 6:
            expected = i + 1
            break
    assert expected is not None, "the simulated search should plateau within 60 trials"
    run, _ = _run(60, EarlyStop(6), batch_size=5)
    assert run.trials_done == expected
    assert run.history == history[:expected]  # same search, cut at the plateau
    assert run.stop_reason == f"no improvement in the last 6 trials after {expected} of 60 trials"
    assert not run.interrupted


def test_early_stop_counts_failures_and_resets_on_a_new_best() -> None:
    from tuner.runner import MeasureResult
    from tuner.search.loop import Trial

    rule = EarlyStop(2)

    def trial(ms: float | None) -> Trial:
        result = (
            MeasureResult("ok", (ms,), "", "w")
            if ms is not None
            else MeasureResult.failure("runtime_error", "x", "w")
        )
        return Trial(0, None, result, None, None)  # type: ignore[arg-type]

    for ms, why in [
        (5.0, None),
        (6.0, None),
        (4.0, None),
        (None, None),
        (4.5, "no improvement in the last 2 trials"),
    ]:
        rule.observe(trial(ms))
        assert rule.reason() == why


def test_rules_from_the_command_line() -> None:
    assert stopping_rules(None, None) is None
    assert isinstance(stopping_rules(None, 3), EarlyStop)
    both = stopping_rules(10.0, 3)
    assert both is not None and both.reason() is None
    with pytest.raises(ValueError, match="positive"):
        TimeBudget(0)
    with pytest.raises(ValueError, match=">= 1"):
        EarlyStop(0)
