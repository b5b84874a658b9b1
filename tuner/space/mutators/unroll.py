"""Unroll depth: another value for the categorical a `loomtune.unroll` annotation takes.

The categorical is recognised by the block annotation that takes its value,
not by its position, so the mutator works on any trace the
parallel-vectorize-unroll rule contributed to.
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
from tuner.space.rules.base import UNROLL
from tuner.trace.trace import Trace


@MUTATORS.register("unroll")
class MutateUnroll(Mutator):
    def apply(self, trace: Trace, rng: random.Random, ctx: SpaceContext) -> Trace | None:
        return resample_categorical(trace, annotated_categoricals(trace, UNROLL), rng)
