"""Parallel extent and unroll depth: another value for the annotations' sampled categoricals.

The categoricals are recognised by the block annotation that takes their
value (`loomtune.parallel`, `loomtune.unroll`), not by their position, so the
mutators work on any trace the parallel-vectorize-unroll rule contributed to.
"""

from __future__ import annotations

import random

from tuner.space.context import SpaceContext
from tuner.space.mutators.base import (
    MUTATORS,
    Mutator,
    annotated_categoricals,
    resample_categorical,
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
