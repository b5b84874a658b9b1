"""Structure: another candidate for a structural choice, the trace re-derived from there.

Structural choices are categoricals no instruction takes (pack a weight,
rfactor a reduction): their value decided something in a rule's code, so the
space re-derives the trace from that point (`rederives`).
"""

from __future__ import annotations

import random

from tuner.space.context import SpaceContext
from tuner.space.mutators.base import (
    MUTATORS,
    Mutator,
    resample_categorical,
    structural_categoricals,
)
from tuner.trace.trace import Trace


@MUTATORS.register("structure")
class MutateStructure(Mutator):
    rederives = True

    def apply(self, trace: Trace, rng: random.Random, ctx: SpaceContext) -> Trace | None:
        return resample_categorical(trace, structural_categoricals(trace), rng)
