"""Loop choice: another of its loops for a `sample_loop` decision.

Multi-level tiling samples where a tile is written back among a block's
loops; the mutator picks another of them.
"""

from __future__ import annotations

import random

from tuner.space.context import SpaceContext
from tuner.space.mutators.base import MUTATORS, Mutator
from tuner.trace.trace import Trace


@MUTATORS.register("loop-choice")
class MutateLoopChoice(Mutator):
    def apply(self, trace: Trace, rng: random.Random, ctx: SpaceContext) -> Trace | None:
        sites = [
            i
            for i, inst in enumerate(trace.instructions)
            if inst.kind == "sample_loop" and len(inst.inputs[0]) > 1 and i in trace.decisions
        ]
        if not sites:
            return None
        i = rng.choice(sites)
        old = trace.decisions[i]
        return trace.with_decision(
            i, rng.choice([k for k in range(len(trace.instructions[i].inputs[0])) if k != old])
        )
