"""The tuning loop: propose -> measure -> record -> observe, until the budget is spent.

One loop serves every deployment: the embedded `loomtune tune` (local pool of
measurement processes), the coordinator's job runner (remote workers) and the
tests (simulated runner). Every candidate that gets a result is a trial,
failures included, and becomes a record in the database before the strategy
hears about it, so an interrupted run loses nothing it measured.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Protocol

from ir.task import Task
from tuner.database import Database, TuningRecord
from tuner.runner import MeasureResult, Runner, RunnerFuture
from tuner.search.strategy import SearchStrategy
from tuner.trace.trace import Trace

DEFAULT_BATCH = 16
"""Candidates proposed per round: enough to keep a pool busy, few enough to learn often."""


def loomtune_version() -> str:
    try:
        return metadata.version("loomtune")
    except metadata.PackageNotFoundError:
        return "0+unknown"


@dataclass(frozen=True)
class Trial:
    """One measured candidate of this run."""

    index: int
    trace: Trace
    result: MeasureResult
    record: TuningRecord
    best_ms: float | None
    """Best median of this run so far, this trial included (None before the first ok)."""


@dataclass
class TuneRun:
    """What one run of the loop did."""

    trials: int
    trials_done: int = 0
    history: list[float | None] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    exhausted: bool = False
    interrupted: bool = False
    seconds: float = 0.0
    search_seconds: float = 0.0
    """Of `seconds`, the time the strategy spent proposing and observing (the rest is measuring)."""
    best_trial: Trial | None = None
    stopped_by: str | None = None
    """Why a stopping rule (`tuner.search.stopping`) ended the run, if one did."""

    @property
    def stop_reason(self) -> str:
        if self.interrupted:
            return f"interrupted after {self.trials_done} of {self.trials} trials"
        if self.exhausted:
            return f"the design space ran out of new candidates after {self.trials_done} of {self.trials} trials"
        if self.stopped_by is not None:
            return f"{self.stopped_by} after {self.trials_done} of {self.trials} trials"
        return f"budget of {self.trials} trials spent"


class StopRuleLike(Protocol):
    """What the loop asks of a stopping rule (`tuner.search.stopping.StopRule`)."""

    def observe(self, trial: Trial) -> None: ...

    def reason(self) -> str | None: ...


WAIT_SLICE_S = 0.25
"""How often a wait for a result checks `should_stop`."""


def _wait(future: RunnerFuture, should_stop: Callable[[], bool] | None) -> MeasureResult | None:
    """The future's result, or None once `should_stop()` says so while waiting."""
    while True:
        try:
            return future.result(timeout=WAIT_SLICE_S)
        except TimeoutError:
            if should_stop is not None and should_stop():
                return None


def make_record(
    task: Task, target: str, trace: Trace, result: MeasureResult, *, job_id: int | None = None
) -> TuningRecord:
    return TuningRecord.create(
        workload_key=task.key,
        op=task.op,
        params=task.params,
        definition=task.to_definition(),
        target=target,
        trace=trace.to_json(),
        trace_hash=trace.hash,
        run_times_ms=result.run_times_ms,
        status=result.status,
        message=result.message,
        worker=result.worker,
        loomtune_version=loomtune_version(),
        llvm_version=result.llvm_version,
        job_id=job_id,
    )


def tune_loop(
    task: Task,
    target: str,
    *,
    strategy: SearchStrategy,
    runner: Runner,
    database: Database,
    trials: int,
    batch_size: int = DEFAULT_BATCH,
    on_trial: Callable[[Trial], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    job_id: int | None = None,
    stop_rule: StopRuleLike | None = None,
) -> TuneRun:
    """Measure up to `trials` new candidates of `task` on `target`.

    Ends early when the strategy has nothing new (`exhausted`), when
    `should_stop()` says so — checked between results and while waiting for
    one, so a trial is either recorded and counted or neither — or on Ctrl-C
    (`interrupted`; what was measured is already stored). A `stop_rule`
    (`tuner.search.stopping`) is asked before each proposal and after each
    recorded trial; when it says why, the run ends there (`stopped_by`), the
    result in hand recorded. The runner is not closed here: its owner closes it.
    """
    if trials < 0:
        raise ValueError(f"trials must be >= 0, got {trials}")
    database.commit_workload(task.key, task.op, task.params, task.to_definition())
    run = TuneRun(trials=trials)
    start = time.perf_counter()
    best: float | None = None
    try:
        while run.trials_done < trials:
            if should_stop is not None and should_stop():
                run.interrupted = True
                break
            if stop_rule is not None and (why := stop_rule.reason()) is not None:
                run.stopped_by = why
                break
            t_search = time.perf_counter()
            traces = strategy.propose(min(batch_size, trials - run.trials_done))
            run.search_seconds += time.perf_counter() - t_search
            if not traces:
                run.exhausted = True
                break
            if should_stop is not None and should_stop():
                run.interrupted = True
                break
            futures = runner.submit(task, target, traces)
            results: list[MeasureResult] = []
            for trace, future in zip(traces, futures):
                result = _wait(future, should_stop)
                if result is None:
                    run.interrupted = True
                    break
                results.append(result)
                record = make_record(task, target, trace, result, job_id=job_id)
                database.commit_record(record)
                run.trials_done += 1
                if result.ok:
                    assert result.median_ms is not None
                    if best is None or result.median_ms < best:
                        best = result.median_ms
                else:
                    run.failures[result.status] += 1
                run.history.append(best)
                trial = Trial(run.trials_done, trace, result, record, best)
                if result.ok and best == result.median_ms:
                    run.best_trial = trial
                if on_trial is not None:
                    on_trial(trial)
                if stop_rule is not None:
                    stop_rule.observe(trial)
                    if (why := stop_rule.reason()) is not None:
                        run.stopped_by = why
                        break
            t_search = time.perf_counter()
            strategy.observe(traces[: len(results)], results)
            run.search_seconds += time.perf_counter() - t_search
            if run.interrupted or run.stopped_by is not None:
                break
    except KeyboardInterrupt:
        run.interrupted = True
    finally:
        run.seconds = time.perf_counter() - start
    return run
