"""Tile size: move a factor from one level of a loop's tiling to another.

    [8, 2, 1, 16]  (product 256)  --move 4 from level 0 to level 2-->  [2, 2, 4, 16]

The product stays the loop's extent and the innermost factor stays within the
instruction's `max_innermost_factor`, so the decision is always a valid perfect
tile of the same loop (MetaSchedule's mutate-tile-size).
"""

from __future__ import annotations

import random

from tuner.space.context import SpaceContext
from tuner.space.mutators.base import MUTATORS, Mutator
from tuner.trace.sampling import divisors
from tuner.trace.trace import Trace


def moves(factors: list[int], max_innermost: int) -> list[tuple[int, int, int]]:
    """(from level, to level, divisor moved) for every legal move."""
    n = len(factors)
    out = []
    for a in range(n):
        for d in divisors(factors[a])[1:]:
            for b in range(n):
                if b != a and (b != n - 1 or factors[b] * d <= max_innermost):
                    out.append((a, b, d))
    return out


@MUTATORS.register("tile-size")
class MutateTileSize(Mutator):
    def apply(self, trace: Trace, rng: random.Random, ctx: SpaceContext) -> Trace | None:
        tiles = [
            i
            for i, inst in enumerate(trace.instructions)
            if inst.kind == "sample_perfect_tile"
            and isinstance(trace.decisions.get(i), list | tuple)
        ]
        rng.shuffle(tiles)
        for i in tiles:
            factors = [int(f) for f in trace.decisions[i]]
            options = moves(factors, int(trace.instructions[i].attr("max_innermost_factor")))
            if options:
                a, b, d = rng.choice(options)
                factors[a] //= d
                factors[b] *= d
                return trace.with_decision(i, factors)
        return None
