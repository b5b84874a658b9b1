"""Tune one workload on this machine: the embedded deployment of the tuner's loop.

`loomtune tune` and `loomtune.tune(...)` both come here: the database (SQLite
by default), the design space for the target, the strategy by name, the local
pool of measurement processes, the loop; then the few best stored records are
re-timed together and the fastest is compiled once more and timed against
numpy, interleaved, in this process (`workers/finalists.py`). Several weighted
workloads share one budget through the task scheduler (`tune_tasks`); a whole
model's distinct tasks do too (`ModelTuning`, `tune --model`), where the budget
is the model's in all, so that tuning it again measures only what is left.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from codegen.host import host_target
from codegen.kernel import Kernel, compile_program
from codegen.model import CompiledModel
from ir.graph.graph import Graph
from ir.graph.plan import ModelPlan
from ir.target import Target
from ir.task import Task
from service.model import ModelCheck, Schedules, choose_fastest
from service.model_implementations import ImplementationChoice, settle_implementations
from service.model_threads import ThreadChoice, settle_thread_counts
from tuner.database import Database, TuningRecord
from tuner.runner import Runner
from tuner.search.loop import DEFAULT_BATCH, StopRuleLike, Trial, TuneRun, tune_loop
from tuner.search.stopping import AnyOf, TimeBudget
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
    stop_rule: StopRuleLike | None = None,
) -> TuneOutcome:
    """Measure `trials` new candidates of `task`, then compile and check the best stored one.

    With `compare`, the best kernel is verified and timed against numpy
    (limited to the same threads) in this process; otherwise it is only compiled.
    A `stop_rule` (`tuner.search.stopping`: a time budget, early stopping) may end
    the run before `trials`.
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
            stop_rule=stop_rule,
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
    stop_rule: StopRuleLike | None = None,
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
        scheduler.run(trials, on_trial=count, should_stop=should_stop, stop_rule=stop_rule)
    finally:
        if own_runner:
            runner.close()
    outcomes = []
    for t in scheduled:
        t.run.interrupted = scheduler.interrupted
        t.run.stopped_by = scheduler.stopped_by
        outcomes.append(_finish(t.task, target, name, t.run, database, compare))
    return TasksOutcome(outcomes, [w for _, w in tasks], scheduler.order)


# --- a whole model: its distinct tasks under one budget --------------------------------------


@dataclass
class ModelTaskState:
    """One distinct task of a model being tuned: what is stored, what this run added."""

    key: str
    op: str
    pattern: str
    count: int
    stored: int
    """Records of the task on the target before this run (failures included)."""
    best_ms: float | None
    trials_done: int = 0
    share: float | None = None
    """count × best_ms over the model's sum of them; None while the task has no best."""

    @property
    def trials(self) -> int:
        """Trials the task has had on the target in all, this run's included."""
        return self.stored + self.trials_done


@dataclass
class ModelTuneResult:
    """A model after `tune_model`: per-task results and the compiled model (best schedules),
    checked against the interpreter and ONNX Runtime (`check`; None when not asked)."""

    path: str
    graph: Graph
    plan: ModelPlan
    target: Target
    trials: int
    """The model's budget: trials over its tasks on this target, earlier runs' included."""
    trials_done: int
    tuning_seconds: float
    stop_reason: str
    tasks: list[ModelTaskState]
    model: CompiledModel
    schedules: Schedules
    check: ModelCheck | None

    @property
    def correct(self) -> bool | None:
        return self.check.correct if self.check is not None else None

    @property
    def latency_ms(self) -> float | None:
        return self.check.latency_ms if self.check is not None else None

    @property
    def onnxruntime_ms(self) -> float | None:
        return self.check.onnxruntime_ms if self.check is not None else None


def _best_ms(database: Database, key: str, target: str) -> float | None:
    """The stored best's time: its finalists' re-timing when it won one, else its median."""
    best = database.best(key, target)
    if best is None:
        return None
    final = database.final(key, target)
    if final is not None and final.record_id == best.record_id:
        return final.retimed_ms
    return best.median_ms


def task_states(
    database: Database, tasks: Sequence[tuple[str, str, str, int]], target: str
) -> list[ModelTaskState]:
    """The state of each (key, op, pattern, count) of a model on `target`: the trials stored
    for it and its stored best."""
    stored = database.record_counts([key for key, *_ in tasks], target)
    return [
        ModelTaskState(key, op, pattern, count, stored[key], _best_ms(database, key, target))
        for key, op, pattern, count in tasks
    ]


def schedule_model_tasks(
    tasks: Sequence[Task],
    states: Sequence[ModelTaskState],
    *,
    target: str,
    space_of: Callable[[Task], DesignSpace],
    database: Database,
    runner: Runner,
    trials: int,
    strategy: str,
    seed: int,
    on_trial: Callable[[int, Trial], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    stop_rule: StopRuleLike | None = None,
    groups: Sequence[int] | None = None,
) -> tuple[Any, int]:
    """Spend `trials` over a model's tasks with the task scheduler, each weighted by how
    often it runs (`groups`: per task, the plan task it implements; alternatives share
    one); `states` (`task_states`) are updated as results arrive and
    `on_trial(task index, trial)` follows. The scheduler and the trials done.

    What is stored is where the scheduler starts: no warm-up batch for a task that has
    records, and its weighted latency known from the first decision. `tune --model` runs
    this with the local pool, the coordinator's model jobs with remote workers.
    """
    from tuner.search.task_scheduler import SchedulerConfig, TaskScheduler, scheduled_tasks

    scheduled = scheduled_tasks(
        [(t, float(s.count)) for t, s in zip(tasks, states)],
        target=target,
        database=database,
        space_of=space_of,
        strategy=strategy,
        seed=seed,
        groups=groups,
    )
    index = {id(s): i for i, s in enumerate(scheduled)}
    for s, state in zip(scheduled, states):
        s.run.history = [state.best_ms] * state.stored

    def count(s: Any, trial: Trial) -> None:
        i = index[id(s)]
        state = states[i]
        state.trials_done += 1
        ms = trial.result.median_ms if trial.result.ok else None
        if ms is not None and (state.best_ms is None or ms < state.best_ms):
            state.best_ms = ms
        if on_trial is not None:
            on_trial(i, trial)

    scheduler = TaskScheduler(
        scheduled,
        target=target,
        runner=runner,
        database=database,
        config=SchedulerConfig(seed=seed),
    )
    done = scheduler.run(trials, on_trial=count, should_stop=should_stop, stop_rule=stop_rule)
    return scheduler, done


def _shares(tasks: Sequence[ModelTaskState]) -> None:
    total = sum(t.count * t.best_ms for t in tasks if t.best_ms is not None)
    for t in tasks:
        t.share = t.count * t.best_ms / total if t.best_ms is not None and total > 0 else None


FINISH_S_PER_TASK = 4.0
"""Seconds a time-bounded model run keeps back per task for finishing it (re-timing its
finalists, compiling the winner; docs/decisions.md, Models)."""
TAIL_S_PER_TASK = 1.0
"""Of those, seconds per task (per thread count in the choice: twice above one thread) that
re-timing leaves for what follows it — deciding thread counts, compiling the model — which
ran 4–22 s past an 18- or 12-minute budget on an Intel VM (docs/decisions.md, Models)."""


RETIME_MARGIN = 1.1
"""An implementation more than this far behind its plan task's fastest is not re-timed."""


class ModelTuning:
    """Tuning one model: `--trials` is the model's whole budget on this target.

    The trials already stored for its distinct tasks count as spent, so a run measures
    only what is left (`remaining`): the same model tuned twice with the same budget
    measures nothing the second time, and a model sharing tasks with one tuned before
    starts from their records. The budget goes to the tasks with the task scheduler,
    each weighted by how often it runs; its gradient policy weighs count × best latency,
    so as measurements arrive the tasks that dominate the model's time get more.

    `time_budget_s` bounds the whole of `tune` and `finish` from construction: tuning
    stops early enough to leave `FINISH_S_PER_TASK` and `TAIL_S_PER_TASK` per task (at
    most a quarter of the budget) for finishing, and finishing re-times the tasks in order
    of their share of the model's time while the budget, less the tail (thread counts,
    compiling), lasts (the rest keep their tuning medians' best).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        trials: int,
        threads: int = 1,
        seed: int = 0,
        strategy: str | None = None,
        database: Database | None = None,
        time_budget_s: float | None = None,
    ) -> None:
        from ir.graph.plan import build_plan
        from service.model import load_graph

        if database is None:
            from service.db.store import open_database

            database = open_database()
        self.path = str(path)
        self.graph = load_graph(path)
        self.plan = build_plan(self.graph)
        self.target = host_target(threads)
        self.canonical = self.target.canonical()
        self.trials = trials
        self.seed = seed
        self.strategy = strategy or default_strategy()
        self.database = database
        tuned = self.plan.implementations()  # `groups`: the plan task each implements
        self.candidates, self.groups = [u for *_, u in tuned], [g for g, *_ in tuned]
        counts = [self.plan.tasks[g].count for g in self.groups]
        states = [
            (u.key, u.op if u.opdef else "fused", s, n) for (_, s, u), n in zip(tuned, counts)
        ]
        self.tasks = task_states(database, states, self.canonical)
        self.remaining = max(0, trials - sum(t.stored for t in self.tasks))
        self.runs: list[TuneRun | None] = [None] * len(self.tasks)
        self.interrupted = False
        self.stopped_by: str | None = None
        self.seconds = 0.0
        self.deadline = None if time_budget_s is None else time.monotonic() + time_budget_s
        self.thread_choices: list[ThreadChoice] = []
        """Above one thread: each task's in-model choice between its own and a fewer-thread
        best (`service.model_threads`), made by `finish`."""
        self.implementation_choices: list[ImplementationChoice] = []
        """Each task with several tuned implementations: which ran faster in the model."""
        self.not_retimed: list[str] = []
        """Patterns of the tasks this run measured whose finalists the budget left un-timed."""

    def tune(
        self,
        *,
        runner: Runner | None = None,
        on_trial: Callable[[int, Trial], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        stop_rule: StopRuleLike | None = None,
    ) -> int:
        """Measure the remaining budget; `on_trial(task index, trial)` after each result, with
        the task's `best_ms` already updated. How many trials were done."""
        if self.remaining == 0:
            return 0
        if self.deadline is not None:
            budget = self._tuning_seconds()
            if budget <= 0:
                self.stopped_by = "time budget spent before tuning"
                return 0
            rule = TimeBudget(budget)
            stop_rule = rule if stop_rule is None else AnyOf([rule, stop_rule])
        start = time.perf_counter()
        own_runner = runner is None
        if runner is None:
            from workers.pool import LocalPool

            runner = LocalPool(threads=self.target.num_threads)
        try:
            scheduler, done = schedule_model_tasks(
                self.candidates,
                self.tasks,
                target=self.canonical,
                space_of=lambda t: make_space(t, self.target),
                database=self.database,
                runner=runner,
                trials=self.remaining,
                strategy=self.strategy,
                seed=self.seed,
                on_trial=on_trial,
                should_stop=should_stop,
                stop_rule=stop_rule,
                groups=self.groups,
            )
        finally:
            if own_runner:
                runner.close()
            self.seconds += time.perf_counter() - start
        self.interrupted = scheduler.interrupted
        self.stopped_by = scheduler.stopped_by
        self.runs = [s.run for s in scheduler.tasks]
        return done

    def _tuning_seconds(self) -> float:
        """What the time budget leaves for tuning once finishing is kept back."""
        assert self.deadline is not None
        left = self.deadline - time.monotonic()
        return left - min(FINISH_S_PER_TASK * len(self.tasks) + self._tail_seconds(), left / 4)

    def _tail_seconds(self) -> float:
        """What finishing keeps back after re-timing: the thread-count choice and the compile."""
        return TAIL_S_PER_TASK * len(self.tasks) * (2 if self.target.num_threads > 1 else 1)

    def finish(self, *, check: bool = True, timing: bool = True) -> ModelTuneResult:
        """Re-time the finalists of every task this run measured (the database's best from
        then on) — the largest shares of the model's time first, while the time budget
        lasts — decide in the model each task's thread count above one thread
        (`service.model_threads`), then its implementation where it has several
        (`service.model_implementations`), compile the model with the best schedules, and (`check`)
        verify it and time it against ONNX Runtime."""
        from service.model import check_model, compile_model, sample_inputs

        by_share = sorted(
            self._contenders(), key=lambda pair: -(pair[1].count * (pair[1].best_ms or 0.0))
        )
        tail = self._tail_seconds()
        for task, state in by_share:
            if (
                state.trials_done
                and self.deadline is not None
                and time.monotonic() >= self.deadline - tail
            ):
                self.not_retimed.append(state.pattern)
            elif state.trials_done:
                _finish(
                    task,
                    self.target,
                    self.strategy,
                    TuneRun(trials=0),
                    self.database,
                    compare=False,
                )
        timed = {s.key: _best_ms(self.database, s.key, self.canonical) for s in self.tasks}
        self.plan = choose_fastest(self.plan, timed.get)
        inputs, name = sample_inputs(self.graph), os.path.basename(self.path)
        decide = (self.plan, self.target, self.database, inputs)
        self.thread_choices = settle_thread_counts(*decide, model_name=name)
        self.implementation_choices = settle_implementations(*decide, model_name=name)
        for state in self.tasks:
            state.best_ms = _best_ms(self.database, state.key, self.canonical)
        self.plan = choose_fastest(self.plan, {s.key: s.best_ms for s in self.tasks}.get)
        run = {t.task.key for t in self.plan.tasks}  # the implementations the model runs
        _shares([s for s in self.tasks if s.key in run])
        model, schedules = compile_model(self.plan, self.target, database=self.database)
        result = (
            check_model(self.path, self.graph, model, self.target.num_threads, timing=timing)
            if check
            else None
        )
        return ModelTuneResult(
            self.path,
            self.graph,
            self.plan,
            self.target,
            self.trials,
            sum(t.trials_done for t in self.tasks),
            self.seconds,
            self._stop_reason(),
            self.tasks,
            model,
            schedules,
            result,
        )

    def _contenders(self) -> list[tuple[Task, ModelTaskState]]:
        """The implementations whose finalists are worth re-timing: those within
        `RETIME_MARGIN` of their plan task's fastest (re-timing a well-beaten alternative
        cannot change what the model runs, and would spend the finishing budget)."""
        fastest: dict[int, float] = {}
        for g, state in zip(self.groups, self.tasks):
            if state.best_ms is not None:
                fastest[g] = min(fastest.get(g, state.best_ms), state.best_ms)
        return [
            (task, state)
            for task, state, g in zip(self.candidates, self.tasks, self.groups)
            if state.best_ms is None or state.best_ms <= RETIME_MARGIN * fastest[g]
        ]

    def _stop_reason(self) -> str:
        done = sum(t.trials_done for t in self.tasks)
        if self.remaining == 0:
            spent = sum(t.stored for t in self.tasks)
            return f"budget of {self.trials} trials already spent ({spent} stored)"
        if self.interrupted:
            return f"interrupted after {done} of {self.remaining} trials"
        if self.stopped_by is not None:
            return f"{self.stopped_by} after {done} of {self.remaining} trials"
        if done < self.remaining:
            return f"the design spaces ran out of new candidates after {done} trials"
        return f"budget of {self.trials} trials spent ({done} this run)"


def tune_model(
    path: str | os.PathLike,
    *,
    trials: int,
    threads: int = 1,
    seed: int = 0,
    strategy: str | None = None,
    database: Database | None = None,
    runner: Runner | None = None,
    check: bool = True,
) -> ModelTuneResult:
    """Tune a model's tasks up to a budget of `trials` (stored trials count), then compile,
    verify and time it (`ModelTuning` in one call)."""
    tuning = ModelTuning(
        path, trials=trials, threads=threads, seed=seed, strategy=strategy, database=database
    )
    tuning.tune(runner=runner)
    return tuning.finish(check=check)
