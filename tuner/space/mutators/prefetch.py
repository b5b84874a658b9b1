"""Prefetch distance: another value for the categorical a `prefetch:<buffer>` annotation takes.

Like the unroll depth, the categorical is recognised by the annotations that take
its value (every reduction level's innermost loop takes the same one).
"""

from __future__ import annotations

import random

from ir.program import PREFETCH
from tuner.space.context import SpaceContext
from tuner.space.mutators.base import (
    MUTATORS,
    Mutator,
    annotated_categoricals,
    resample_categorical,
)
from tuner.trace.trace import Trace


@MUTATORS.register("prefetch")
class MutatePrefetch(Mutator):
    def apply(self, trace: Trace, rng: random.Random, ctx: SpaceContext) -> Trace | None:
        return resample_categorical(
            trace, annotated_categoricals(trace, PREFETCH, prefix=True), rng
        )
