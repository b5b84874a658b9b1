"""Compute location: another place for a block placed by `sample_compute_location`.

The candidates are the loops where the block may go at that point of the
trace (replayed up to the instruction; cached per trace prefix), the root
(-1) or inline (-2). A location that turns out illegal is rejected when the
space replays the mutated trace.
"""

from __future__ import annotations

import random
from typing import Any

from ir.schedule import ScheduleError
from tuner.space.context import SpaceContext
from tuner.space.mutators.base import MUTATORS, Mutator
from tuner.trace.errors import TraceError
from tuner.trace.instruction import RV
from tuner.trace.trace import Trace
from tuner.trace.traced_schedule import TracedSchedule, replay_instruction

_CACHE_SIZE = 4096


@MUTATORS.register("compute-location")
class MutateComputeLocation(Mutator):
    def __init__(self) -> None:
        self._counts: dict[tuple[Any, ...], int] = {}

    def apply(self, trace: Trace, rng: random.Random, ctx: SpaceContext) -> Trace | None:
        sites = [
            i for i, inst in enumerate(trace.instructions) if inst.kind == "sample_compute_location"
        ]
        rng.shuffle(sites)
        for i in sites:
            count = self._candidates(trace, i, ctx)
            if count is None:
                continue
            old = trace.decisions.get(i)
            choices = [d for d in range(-2, count) if d != old]
            if choices:
                return trace.with_decision(i, rng.choice(choices))
        return None

    def _candidates(self, trace: Trace, index: int, ctx: SpaceContext) -> int | None:
        """How many loops the block may go to at instruction `index` (None: the prefix does not replay)."""
        key = (
            trace.instructions[: index + 1],
            tuple(sorted((k, str(v)) for k, v in trace.decisions.items() if k < index)),
        )
        if key not in self._counts:
            if len(self._counts) >= _CACHE_SIZE:
                self._counts.clear()
            sch = TracedSchedule(ctx.program)
            env: dict[str, Any] = {}
            try:
                for k, inst in enumerate(trace.instructions[:index]):
                    replay_instruction(sch, inst, env, trace.decisions.get(k))
            except (TraceError, ScheduleError):
                return None
            arg = trace.instructions[index].inputs[0]
            block = env[arg.name] if isinstance(arg, RV) else arg
            self._counts[key] = len(sch.compute_location_candidates(block))
        return self._counts[key]
