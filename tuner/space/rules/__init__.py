"""Schedule rules, one module each, registered by name in `RULES` (see base.py)."""

from tuner.space.rules import (  # noqa: F401  (importing registers the built-in rules)
    add_rfactor,
    auto_inline,
    column_reduction,
    multi_level_tiling,
    parallel_vectorize_unroll,
    random_compute_location,
    reduction_chain,
    tensorize_tiling,
)
from tuner.space.rules.base import PARALLEL, RULES, UNROLL, VECTORIZE, ScheduleRule

DEFAULT_RULES = (
    "auto-inline",
    "add-rfactor",
    "column-reduction",
    "multi-level-tiling-intrin",
    "multi-level-tiling",
    "reduction-chain",
    "random-compute-location",
    "parallel-vectorize-unroll",
)
"""Applied in this order to each block (consumers first); root rules run after every block rule."""

__all__ = ["DEFAULT_RULES", "PARALLEL", "RULES", "UNROLL", "VECTORIZE", "ScheduleRule"]
