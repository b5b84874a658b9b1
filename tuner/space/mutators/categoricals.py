"""Parallel extent, unroll depth and sampled loops: another value for a sampled choice.

The categoricals are recognised by the block annotation that takes their
value (`loomtune.parallel`, `loomtune.unroll`), not by their position, so the
mutators work on any trace the parallel-vectorize-unroll rule contributed to.
`sample_loop` choices (where multi-level tiling writes a tile back) are
another of their loops. Structural choices (categoricals no instruction
takes: pack a weight, rfactor a reduction) get another candidate and the
trace is re-derived from that point (`structure`).
"""

from __future__ import annotations

import random

from tuner.space.context import SpaceContext
from tuner.space.mutators.base import (
    MUTATORS,
    Mutator,
    annotated_categoricals,
    resample_categorical,
    structural_categoricals,
)
from tuner.space.rules.base import PARALLEL, UNROLL
from tuner.trace.trace import Trace


@MUTATORS.register("parallel")
class MutateParallel(Mutator):
    def apply(self, trace: Trace, rng: random.Random, ctx: SpaceContext) -> Trace | None:
        return resample_categorical(trace, annotated_categoricals(trace, PARALLEL), rng)


@MUTATORS.register("unroll")
class MutateUnroll(Mutator):
    def apply(self, trace: Trace, rng: random.Random, ctx: SpaceContext) -> Trace | None:
        return resample_categorical(trace, annotated_categoricals(trace, UNROLL), rng)


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


@MUTATORS.register("structure")
class MutateStructure(Mutator):
    rederives = True

    def apply(self, trace: Trace, rng: random.Random, ctx: SpaceContext) -> Trace | None:
        return resample_categorical(trace, structural_categoricals(trace), rng)
