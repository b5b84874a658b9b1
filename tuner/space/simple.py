"""A small built-in design space: tile, vectorize the innermost, maybe parallelize.

For every block: each loop is split in two by a sampled perfect tile; the
outer spatial parts come first, then the outer reduction parts, the inner
spatial parts but the last, the inner reduction parts, and the last inner
spatial part, which is vectorized (so a reduction accumulates into a vector); with several threads, a
sampled choice parallelizes the outermost loop. It is the baseline space of the
tuning loop's tests and of `--strategy replay` on any workload: every sample is
legal, none is clever (the rule-based space of `default_space` is).
"""

from __future__ import annotations

import random

from ir.expr import Const
from ir.program import Program
from ir.schedule import ScheduleError
from ir.schedule.analysis import binds_reduce
from ir.schedule.state import all_blocks, find_block, loops_above
from tuner.space.base import SpaceRejected
from tuner.trace.errors import TraceError
from tuner.trace.trace import Trace
from tuner.trace.traced_schedule import TracedSchedule


class SimpleSpace:
    def __init__(
        self, program: Program, *, threads: int = 1, max_innermost_factor: int = 16
    ) -> None:
        self.program = program
        self.threads = threads
        self.max_innermost_factor = max_innermost_factor
        self.blocks = [r.block.name for r in all_blocks(program)]

    def _schedule_block(self, sch: TracedSchedule, name: str) -> None:
        realize = find_block(sch.program, name)
        loops = loops_above(sch.program, name)
        b = sch.get_block(name)
        handles = sch.get_loops(b)
        outer, outer_r, inner, inner_r, fixed = [], [], [], [], []
        for lp, h in zip(loops, handles):
            if not isinstance(lp.extent, Const):
                fixed.append(h)
                continue
            is_reduce = binds_reduce(realize, lp.var)
            factors = sch.sample_perfect_tile(
                h, n=2, max_innermost_factor=self.max_innermost_factor
            )
            o, i = sch.split(h, factors)
            (outer_r if is_reduce else outer).append(o)
            (inner_r if is_reduce else inner).append(i)
        order = [*fixed, *outer, *outer_r, *inner[:-1], *inner_r, *inner[-1:]]
        if len(order) > 1:
            sch.reorder(*order)
        if inner:
            sch.vectorize(inner[-1])
        if self.threads > 1 and outer and sch.sample_categorical([0, 1], [0.5, 0.5]) == 1:
            sch.parallel(outer[0])

    def sample(self, rng: random.Random) -> Trace:
        sch = TracedSchedule(self.program, rng=rng)
        try:
            for name in self.blocks:
                self._schedule_block(sch, name)
        except (ScheduleError, TraceError) as e:
            raise SpaceRejected(str(e)) from None
        return sch.trace

    def mutate(self, trace: Trace, rng: random.Random) -> Trace | None:
        """Re-sample one decision; None when the trace has none."""
        sampled = [i for i, inst in enumerate(trace.instructions) if inst.is_sampling]
        if not sampled:
            return None
        index = rng.choice(sampled)
        decisions = {k: v for k, v in trace.decisions.items() if k != index}
        try:
            return Trace(trace.instructions, decisions).apply(self.program, rng=rng).trace
        except TraceError:
            return None
