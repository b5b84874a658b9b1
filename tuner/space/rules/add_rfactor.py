"""Add-rfactor: a reduction with little output to share out gets partial results.

    for i in range(3): for r in range(4096): Y[i] += X[i, r]
  -> (r split in r0 x r1, rfactor on one part)
    for i, r0, r1: Y_rf[i, r1] += X[i, r0 * F + r1]      # r1 now spatial: vectorized
    for i, r1: Y[i] += Y_rf[i, r1]

When the spatial extent is smaller than the reduction and at most
`max_jobs_per_core` x threads (MetaSchedule's test), a sampled choice keeps the
block, or factors the inner part (vector lanes of partial sums), or, with
several threads, the outer part (partial sums over parallel chunks). The
reduction loops are fused first, then split by a sampled perfect tile.
Only reductions that write a program output: intermediate ones (softmax's)
are fused into their consumer's rows by the reduction-chain rule instead.
"""

from __future__ import annotations

import math

from ir.expr import Const
from ir.program import BufferStore
from ir.schedule.state import find_block, loops_above
from tuner.space.analysis import is_output, is_simple, loop_role, written_buffer
from tuner.space.context import SpaceContext
from tuner.space.rules.base import RULES, ScheduleRule
from tuner.trace.traced_schedule import TracedSchedule

NONE, INNER, OUTER = 0, 1, 2


@RULES.register("add-rfactor")
class AddRFactor(ScheduleRule):
    def __init__(self, *, max_jobs_per_core: int = 16, probability: float = 0.5) -> None:
        self.max_jobs_per_core = max_jobs_per_core
        self.probability = probability

    def apply(self, sch: TracedSchedule, block: str | None, ctx: SpaceContext) -> None:
        assert block is not None
        program = sch.program
        r = find_block(program, block)
        out = written_buffer(r)
        if (
            r.block.init is None
            or out is None
            or not is_output(program, out)
            or not is_simple(program, block)
        ):
            return
        if not isinstance(r.block.body, BufferStore):
            return
        fors = loops_above(program, block)
        roles = [loop_role(r, lp) for lp in fors]
        n_spatial = roles.count("spatial")
        if roles != ["spatial"] * n_spatial + ["reduce"] * (
            len(roles) - n_spatial
        ) or n_spatial == len(roles):
            return
        extents = [int(lp.extent.value) for lp in fors if isinstance(lp.extent, Const)]
        spatial, reduction = math.prod(extents[:n_spatial]), math.prod(extents[n_spatial:])
        if not (
            spatial < reduction
            and spatial <= self.max_jobs_per_core * ctx.threads
            and reduction > 1
        ):
            return
        p = self.probability
        if ctx.threads > 1:
            choice = int(sch.sample_categorical([NONE, INNER, OUTER], [1 - p, p / 2, p / 2]))
        else:
            choice = int(sch.sample_categorical([NONE, INNER], [1 - p, p]))
        if choice == NONE:
            return
        loops = sch.get_loops(sch.get_block(block))
        reduce_loops = loops[n_spatial:]
        fused = reduce_loops[0] if len(reduce_loops) == 1 else sch.fuse(*reduce_loops)
        tile = sch.sample_perfect_tile(fused, n=2, max_innermost_factor=ctx.max_vector_extent)
        r0, r1 = sch.split(fused, tile)
        sch.rfactor(r1 if choice == INNER else r0, len(r.block.body.indices))
