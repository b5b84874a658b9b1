"""Stopping rules of a tuning run besides its trial budget: a time budget, early stopping.

A rule watches each trial the loop records and says why the run should end, or
None; the loop asks it between results, so the result in hand always finishes
and is recorded. A rule is not an interrupt: a run it ends is complete, and
its `stop_reason` says which rule ended it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from tuner.search.loop import StopRuleLike, Trial

StopRule = StopRuleLike
"""`observe(trial)` after each recorded trial; `reason()`: why to stop now, or None."""


class TimeBudget:
    """Start no new trial once `seconds` have passed since the loop first asked.

    The clock starts at that first question, not when the rule is made, so
    starting the measurement processes is not counted against the budget and a
    run always gets to start tuning.
    """

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not seconds > 0:
            raise ValueError(f"a time budget must be positive, got {seconds}")
        self.seconds = seconds
        self.clock = clock
        self.start: float | None = None

    def observe(self, trial: Trial) -> None:
        pass

    def reason(self) -> str | None:
        now = self.clock()
        if self.start is None:
            self.start = now
        if now - self.start >= self.seconds:
            return f"time budget of {self.seconds:g} s spent"
        return None


class EarlyStop:
    """Stop after `patience` consecutive trials that did not improve the best so far.

    A failed trial counts as not improving; trials before the first correct one
    count too, so a workload that only fails stops as well.
    """

    def __init__(self, patience: int) -> None:
        if patience < 1:
            raise ValueError(f"early-stop patience must be >= 1, got {patience}")
        self.patience = patience
        self.best: float | None = None
        self.since_best = 0

    def observe(self, trial: Trial) -> None:
        ms = trial.result.median_ms if trial.result.ok else None
        if ms is not None and (self.best is None or ms < self.best):
            self.best = ms
            self.since_best = 0
        else:
            self.since_best += 1

    def reason(self) -> str | None:
        if self.since_best >= self.patience:
            return f"no improvement in the last {self.patience} trials"
        return None


class AnyOf:
    """The first of several rules that says stop."""

    def __init__(self, rules: Sequence[StopRule]) -> None:
        self.rules = list(rules)

    def observe(self, trial: Trial) -> None:
        for rule in self.rules:
            rule.observe(trial)

    def reason(self) -> str | None:
        for rule in self.rules:
            why = rule.reason()
            if why is not None:
                return why
        return None


def stopping_rules(time_budget: float | None, early_stop: int | None) -> StopRule | None:
    """The rules a command line asked for (`--time-budget`, `--early-stop`), or None."""
    rules: list[StopRule] = []
    if time_budget is not None:
        rules.append(TimeBudget(time_budget))
    if early_stop is not None:
        rules.append(EarlyStop(early_stop))
    if not rules:
        return None
    return rules[0] if len(rules) == 1 else AnyOf(rules)
