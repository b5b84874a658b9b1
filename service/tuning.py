"""Tune one workload on this machine: the embedded deployment of the tuner's loop.

`loomtune tune` and `loomtune.tune(...)` both come here: the database (SQLite
by default), the design space for the target, the strategy by name, the local
pool of measurement processes, the loop; then the few best stored records are
re-timed together and the fastest is compiled once more and timed against
numpy, interleaved, in this process (`workers/finalists.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from codegen.host import host_target
from codegen.kernel import Kernel, compile_program
from ir.target import Target
from ir.task import Task
from tuner.database import Database, TuningRecord
from tuner.runner import Runner
from tuner.search.loop import DEFAULT_BATCH, Trial, TuneRun, tune_loop
from tuner.search.strategy import SearchContext, default_strategy, make_strategy
from tuner.space.base import DesignSpace
from tuner.trace.trace import Trace
from workers.compare import Comparison, compare_with_numpy
from workers.finalists import FINALISTS, Finalist, select_fastest


def make_space(task: Task, target: Target) -> DesignSpace:
    """The design space tuning samples for `task` on `target`: the rule-based space."""
    from tuner.space import default_space

    return default_space(task.program, target)


@dataclass
class TuneOutcome:
    task: Task
    target: Target
    strategy: str
    run: TuneRun
    best: TuningRecord | None
    """The fastest of the best stored records of the workload on the target (this run's or
    earlier ones', and the earlier finalists' choice) when re-timed together, which the
    database keeps as the workload's best; the database's best where none could be re-timed."""
    kernel: Kernel | None = None
    comparison: Comparison | None = None
    finalists: tuple[Finalist, ...] = ()

    @property
    def best_trace(self) -> Trace | None:
        return Trace.from_json(self.best.trace) if self.best is not None else None


def _contenders(task: Task, canonical: str, database: Database) -> list[TuningRecord]:
    """The database's best first (the earlier finalists' choice, which defends its place),
    then the best stored records by tuning median."""
    reigning = database.best(task.key, canonical)
    if reigning is None:
        return []
    top = database.top_k(task.key, canonical, FINALISTS)
    return [reigning, *(r for r in top if r.record_id != reigning.record_id)]


def _finish(
    task: Task, target: Target, strategy: str, run: TuneRun, database: Database, compare: bool
) -> TuneOutcome:
    canonical = target.canonical()
    top = _contenders(task, canonical, database)
    outcome = TuneOutcome(task, target, strategy, run, top[0] if top else None)
    if outcome.best is not None:
        chosen = select_fastest(task, target, top)
        if chosen is not None:
            outcome.best, outcome.kernel, outcome.finalists = (
                chosen.best,
                chosen.kernel,
                chosen.finalists,
            )
            winner = chosen.finalists[0]
            if (
                winner.retimed_ms is not None
            ):  # timed beside others: the database's best from now on
                database.commit_final(
                    task.key, canonical, winner.record.record_id, winner.retimed_ms
                )
        else:
            program = Trace.from_json(outcome.best.trace).apply(task.program).program
            outcome.kernel = compile_program(program, target)
        if compare:
            outcome.comparison = compare_with_numpy(
                outcome.kernel, task, threads=target.num_threads
            )
    return outcome


def tune_task(
    task: Task,
    *,
    threads: int = 1,
    trials: int = 64,
    strategy: str | None = None,
    seed: int = 0,
    database: Database | None = None,
    runner: Runner | None = None,
    batch_size: int = DEFAULT_BATCH,
    on_trial: Callable[[Trial], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    compare: bool = True,
) -> TuneOutcome:
    """Measure `trials` new candidates of `task`, then compile and check the best stored one.

    With `compare`, the best kernel is verified and timed against numpy
    (limited to the same threads) in this process; otherwise it is only compiled.
    """
    if database is None:
        from service.db.store import open_database

        database = open_database()
    target = host_target(threads)
    canonical = target.canonical()
    name = strategy or default_strategy()
    context = SearchContext(task, canonical, make_space(task, target), database)
    search = make_strategy(name, context, seed)
    own_runner = runner is None
    if runner is None:
        from workers.pool import LocalPool

        runner = LocalPool(threads=threads)
    try:
        run = tune_loop(
            task,
            canonical,
            strategy=search,
            runner=runner,
            database=database,
            trials=trials,
            batch_size=batch_size,
            on_trial=on_trial,
            should_stop=should_stop,
        )
    finally:
        if own_runner:
            runner.close()
    return _finish(task, target, name, run, database, compare)


@dataclass
class TasksOutcome:
    outcomes: list[TuneOutcome]
    weights: list[float]
    order: list[int]
    """Which task each batch of trials went to."""

    @property
    def weighted_latency_ms(self) -> float | None:
        """sum of weight * latency of the final (re-timed) best kernels; None if one is missing."""
        total = 0.0
        for o, w in zip(self.outcomes, self.weights):
            if o.comparison is None or o.comparison.latency_ms is None:
                return None
            total += w * o.comparison.latency_ms
        return total


def tune_tasks(
    tasks: Sequence[tuple[Task, float]],
    *,
    threads: int = 1,
    trials: int = 64,
    strategy: str | None = None,
    seed: int = 0,
    database: Database | None = None,
    runner: Runner | None = None,
    policy: str = "gradient",
    on_trial: Callable[[Trial], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    compare: bool = True,
) -> TasksOutcome:
    """Share `trials` among weighted tasks (`tuner.search.task_scheduler`), then check each best."""
    from tuner.search.task_scheduler import (
        ScheduledTask,
        SchedulerConfig,
        TaskScheduler,
        scheduled_tasks,
    )

    if database is None:
        from service.db.store import open_database

        database = open_database()
    target = host_target(threads)
    canonical = target.canonical()
    name = strategy or default_strategy()
    scheduled = scheduled_tasks(
        tasks,
        target=canonical,
        database=database,
        space_of=lambda t: make_space(t, target),
        strategy=name,
        seed=seed,
    )
    own_runner = runner is None
    if runner is None:
        from workers.pool import LocalPool

        runner = LocalPool(threads=threads)
    scheduler = TaskScheduler(
        scheduled,
        target=canonical,
        runner=runner,
        database=database,
        config=SchedulerConfig(policy=policy, seed=seed),
    )
    done = [0]

    def count(_t: ScheduledTask, trial: Trial) -> None:
        done[0] += 1
        if on_trial is not None:
            on_trial(Trial(done[0], trial.trace, trial.result, trial.record, trial.best_ms))

    try:
        scheduler.run(trials, on_trial=count, should_stop=should_stop)
    finally:
        if own_runner:
            runner.close()
    outcomes = []
    for t in scheduled:
        t.run.interrupted = scheduler.interrupted
        outcomes.append(_finish(t.task, target, name, t.run, database, compare))
    return TasksOutcome(outcomes, [w for _, w in tasks], scheduler.order)
