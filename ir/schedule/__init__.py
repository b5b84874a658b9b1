"""Schedule primitives: the transformations every candidate kernel is made of.

One module per family: `loops` (split, fuse, reorder, parallel, vectorize,
unroll, annotate), `compute_at` (compute_at, reverse_compute_at), `inline`
(compute_inline, reverse_compute_inline) over the shared analyses of `region`,
`cache` (cache_read, cache_write), `reduction` (decompose_reduction, rfactor),
`layout` (transform_layout).
"""

from ir.schedule.schedule import BlockRV, LoopRV, Schedule, ScheduleError

__all__ = ["BlockRV", "LoopRV", "Schedule", "ScheduleError"]
