"""Sharing one trial budget among several weighted workloads (the layers of a model).

What a user wants is the lowest total weighted latency, sum_i w_i * best_i,
where w_i is how often workload i runs. Two policies hand out the budget one
batch at a time:

- "round_robin": each task in turn;
- "gradient" (default; Ansor's task scheduler, simplified): after one
  warm-up batch each, the next batch goes to the task whose weighted latency
  is expected to drop most per trial — the recent improvement of its best
  (over its last `window` trials), or, for a task that has not improved lately,
  an optimistic guess that more trials still win a share of its latency
  (`w_i * best_i / trials_i`, shrinking as it gets trials); with probability
  `epsilon` a random task instead, so no task starves on a bad estimate.
A task whose space is exhausted gets nothing more.

Tasks may be alternatives — implementations of one computation, a model's conv
directly and by Winograd (`groups`): only the fastest of a group counts in the
total. The fastest's gradient is as above; another's is what it is expected to
drop below the group's best over the next `window` trials, per trial
(`w · max(0, drop − gap / window)`), so an implementation well behind that has
stopped improving gets no more than the random share.

The tasks' searches share one cost model (`scheduled_tasks`), as MetaSchedule's
task scheduler does: a matmul's results teach the dense search what a good
GEMM tile looks like, so a task starts guided from its first batch rather
than after its own first 16 results.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ir.expr import Const
from ir.program import Program
from ir.schedule.state import all_blocks
from ir.task import Task
from tuner.cost_model.model import XGBCostModel
from tuner.database import Database
from tuner.runner import Runner
from tuner.search.loop import DEFAULT_BATCH, StopRuleLike, Trial, TuneRun, tune_loop
from tuner.search.strategy import SearchContext, SearchStrategy, make_strategy
from tuner.space.base import DesignSpace

POLICIES = ("gradient", "round_robin")


@dataclass
class ScheduledTask:
    task: Task
    weight: float
    strategy: SearchStrategy
    run: TuneRun = field(default_factory=lambda: TuneRun(trials=0))
    exhausted: bool = False
    group: int | None = None
    """Tasks of one group are alternatives: only the fastest counts (None: its own)."""
    priority: float = 0.0
    """Untried tasks are tried highest first: weight × iterations (`iterations`)."""

    @property
    def best(self) -> float | None:
        return self.run.history[-1] if self.run.history else None


def scheduled_tasks(
    tasks: Sequence[tuple[Task, float]],
    *,
    target: str,
    database: Database,
    space_of: Callable[[Task], DesignSpace],
    strategy: str,
    seed: int,
    groups: Sequence[int] | None = None,
) -> list[ScheduledTask]:
    """The (task, weight) pairs of one scheduler run, each with its search; the searches
    share one cost model. `groups`: per task, which alternatives it is one of."""
    model = XGBCostModel(seed=seed)
    out = []
    for i, (task, weight) in enumerate(tasks):
        context = SearchContext(task, target, space_of(task), database, cost_model=model)
        group = groups[i] if groups is not None else None
        search = make_strategy(strategy, context, seed)
        priority = weight * iterations(task.program)
        out.append(ScheduledTask(task, weight, search, group=group, priority=priority))
    return out


def iterations(program: Program) -> int:
    """How many block instances `program` runs: its blocks' iteration spaces summed, a
    proxy for its work that any task has (a model's fused tasks have no FLOP count)."""
    return sum(
        math.prod(
            int(iv.extent.value) if isinstance(iv.extent, Const) else 1 for iv in r.block.iter_vars
        )
        for r in all_blocks(program)
    )


@dataclass(frozen=True)
class SchedulerConfig:
    policy: str = "gradient"
    batch_size: int = DEFAULT_BATCH
    window: int = 32
    """Trials over which a task's recent improvement is measured."""
    epsilon: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(
                f"unknown task scheduling policy {self.policy!r}; expected one of {POLICIES}"
            )


def weighted_latency(tasks: Sequence[ScheduledTask]) -> float | None:
    """sum of weight * best latency; None while some task has no correct candidate."""
    if any(t.best is None for t in tasks):
        return None
    return float(sum(t.weight * t.best for t in tasks))  # type: ignore[operator]


def gradient(
    history: Sequence[float | None], weight: float, window: int, ahead: float | None = None
) -> float:
    """Expected drop of weight * best per trial (larger is more promising), from a best-so-far
    history; `ahead`: the best of a faster alternative, which this one must first get below."""
    h = history
    if not h or h[-1] is None:
        return float("inf")  # nothing correct yet: its latency is unknown, fix that first
    best = h[-1]
    past = h[-window - 1] if len(h) > window else h[0]
    recent = (past - best) / min(window, len(h)) if past is not None else 0.0
    optimistic = best / len(h)
    drop = max(recent, 0.0) + optimistic * 0.1
    if ahead is not None and ahead < best:
        drop = max(0.0, drop - (best - ahead) / window)
    return weight * drop


def _ahead(histories: Sequence[Sequence[float | None]], groups: Sequence[int | None]) -> list:
    """Per task: the best of the fastest other task of its group (None: no group, or none)."""
    out: list[float | None] = []
    for i, g in enumerate(groups):
        others = [
            h[-1]
            for j, h in enumerate(histories)
            if j != i and g is not None and groups[j] == g and h and h[-1] is not None
        ]
        out.append(min(others) if others else None)
    return out


def pick_task(
    histories: Sequence[Sequence[float | None]],
    weights: Sequence[float],
    live: Sequence[int],
    config: SchedulerConfig,
    turn: int,
    rng: random.Random,
    groups: Sequence[int | None] | None = None,
    priorities: Sequence[float] | None = None,
) -> int | None:
    """Which of the `live` tasks gets the next batch, from their best-so-far histories alone
    (`groups`: per task, which alternatives it is one of). Untried tasks go first, the
    highest of `priorities` first (else in order): when the budget ends before every task
    is tried, those left without a schedule are the smallest.

    A pure decision (the rng aside), so it can be replayed over recorded tuning
    curves (`benchmarks/scheduler_replay.py`) as well as drive `TaskScheduler`.
    """
    if not live:
        return None
    untried = [i for i in live if not histories[i]]
    if priorities is not None:
        untried.sort(key=lambda i: (-priorities[i], i))
    if config.policy == "round_robin" or untried:
        return untried[0] if untried else live[turn % len(live)]
    if rng.random() < config.epsilon:
        return rng.choice(list(live))
    ahead = _ahead(histories, groups if groups is not None else [None] * len(histories))
    return max(
        live, key=lambda i: (gradient(histories[i], weights[i], config.window, ahead[i]), -i)
    )


class TaskScheduler:
    def __init__(
        self,
        tasks: Sequence[ScheduledTask],
        *,
        target: str,
        runner: Runner,
        database: Database,
        config: SchedulerConfig | None = None,
    ) -> None:
        if not tasks:
            raise ValueError("the task scheduler needs at least one task")
        self.tasks = list(tasks)
        self.target = target
        self.runner = runner
        self.database = database
        self.config = config or SchedulerConfig()
        self.rng = random.Random(self.config.seed)
        self.order: list[int] = []
        """Which task each batch went to, in order."""
        self.interrupted = False
        self.stopped_by: str | None = None
        self.seconds = 0.0

    def _next(self, turn: int) -> int | None:
        live = [i for i, t in enumerate(self.tasks) if not t.exhausted]
        histories = [t.run.history for t in self.tasks]
        weights, groups = [t.weight for t in self.tasks], [t.group for t in self.tasks]
        priorities = [t.priority for t in self.tasks]
        return pick_task(histories, weights, live, self.config, turn, self.rng, groups, priorities)

    def run(
        self,
        trials: int,
        on_trial: Callable[[ScheduledTask, Trial], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        stop_rule: StopRuleLike | None = None,
    ) -> int:
        """Spend `trials` over the tasks; how many were done. A `stop_rule` watches every
        task's trials together and ends the whole run (`stopped_by`)."""
        start = time.perf_counter()
        done = 0
        turn = 0
        try:
            while done < trials:
                index = self._next(turn)
                turn += 1
                if index is None:
                    break
                t = self.tasks[index]
                # Small budgets still reach every task, twice at least.
                share = max(1, -(-trials // (2 * len(self.tasks))))
                n = min(self.config.batch_size, trials - done, share)
                callback = (lambda trial, t=t: on_trial(t, trial)) if on_trial is not None else None
                part = tune_loop(
                    t.task,
                    self.target,
                    strategy=t.strategy,
                    runner=self.runner,
                    database=self.database,
                    trials=n,
                    batch_size=n,
                    on_trial=callback,
                    should_stop=should_stop,
                    stop_rule=stop_rule,
                )
                self.order.append(index)
                _merge(t.run, part)
                done += part.trials_done
                if part.exhausted:
                    t.exhausted = True
                if part.interrupted:
                    self.interrupted = True
                    break
                if part.stopped_by is not None:
                    self.stopped_by = part.stopped_by
                    break
        finally:
            self.seconds = time.perf_counter() - start
        return done


def _merge(total: TuneRun, part: TuneRun) -> None:
    """Append one batch's run to a task's running record (best so far carried across batches)."""
    offset_best = total.history[-1] if total.history else None
    for h in part.history:
        if h is None:
            total.history.append(offset_best)
        else:
            offset_best = h if offset_best is None else min(offset_best, h)
            total.history.append(offset_best)
    total.trials += part.trials
    total.trials_done += part.trials_done
    total.failures.update(part.failures)
    total.seconds += part.seconds
    total.exhausted = part.exhausted
    total.interrupted = part.interrupted
    total.stopped_by = part.stopped_by
    if part.best_trial is not None and (
        total.best_trial is None
        or (part.best_trial.best_ms or float("inf")) < (total.best_trial.best_ms or float("inf"))
    ):
        total.best_trial = part.best_trial
