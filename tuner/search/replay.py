"""Replay: random sampling of the design space, the baseline every search must beat.

Each proposal is a fresh sample; a trace already measured for this workload and
target (in the database, from any run) or already proposed in this run is
skipped, so tuning again continues where the last run stopped. When many
samples in a row bring nothing new, the space is taken as exhausted.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ir.schedule import ScheduleError
from tuner.runner import MeasureResult
from tuner.search.strategy import SearchContext, register_strategy
from tuner.space.base import SpaceRejected
from tuner.trace.errors import TraceError
from tuner.trace.trace import Trace

MIN_ATTEMPTS = 64
"""Samples tried per proposal round at least, before the space counts as exhausted."""
ATTEMPTS_PER_CANDIDATE = 16


class ReplayStrategy:
    def __init__(self, context: SearchContext, seed: int) -> None:
        self.context = context
        self.rng = random.Random(seed)
        self.proposed: set[str] = set()
        self.rejected = 0

    def is_new(self, trace: Trace) -> bool:
        h = trace.hash
        return h not in self.proposed and self.context.is_new(h)

    def propose(self, n: int) -> list[Trace]:
        out: list[Trace] = []
        for _ in range(max(MIN_ATTEMPTS, ATTEMPTS_PER_CANDIDATE * n)):
            if len(out) >= n:
                break
            try:
                trace = self.context.space.sample(self.rng)
            except (SpaceRejected, ScheduleError, TraceError):
                self.rejected += 1
                continue
            if self.is_new(trace):
                self.proposed.add(trace.hash)
                out.append(trace)
        return out

    def observe(self, traces: Sequence[Trace], results: Sequence[MeasureResult]) -> None:
        """Random sampling learns nothing."""


@register_strategy("replay")
def _make(context: SearchContext, seed: int) -> ReplayStrategy:
    return ReplayStrategy(context, seed)
