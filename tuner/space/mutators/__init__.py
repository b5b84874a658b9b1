"""Mutators, one module each, registered by name in `MUTATORS` (see base.py)."""

# isort: off
# Importing registers the built-in mutators, in this order (the order `MUTATORS.names()`
# and an unknown name's error list them in).
from tuner.space.mutators import parallel, unroll, prefetch, loop_choice, structure  # noqa: F401
from tuner.space.mutators import compute_location, tile_size  # noqa: F401

# isort: on
from tuner.space.mutators.base import MUTATORS, Mutator

DEFAULT_MUTATORS = {
    "tile-size": 0.77,
    "compute-location": 0.05,
    "loop-choice": 0.05,
    "structure": 0.05,
    "unroll": 0.03,
    "parallel": 0.02,
    "prefetch": 0.03,
}
"""Name -> probability of being tried first (MetaSchedule's CPU defaults, with the
write-back level's, the structural choices' 0.05 each and the prefetch distance's 0.03
taken from the tile sizes)."""

__all__ = ["DEFAULT_MUTATORS", "MUTATORS", "Mutator"]
