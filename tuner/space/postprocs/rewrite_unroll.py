"""Unroll: the inner loops of each block, up to the nest's sampled depth.

Walking outward from a block's innermost loop (past a vectorized one), serial
loops holding only this block are unrolled while the product of their extents
stays within the nest's `loomtune.unroll` annotation (e.g. the 6 rows of a
6 x 16 register tile: 12 accumulators in registers). Extent-1 loops are
passed over; the walk stops at the first loop that does not fit.
"""

from __future__ import annotations

from ir.expr import Const
from ir.schedule.state import all_blocks, blocks_under, loops_above
from tuner.space.analysis import nest_annotation
from tuner.space.context import SpaceContext
from tuner.space.postprocs.base import POSTPROCS, Postproc
from tuner.space.rules.base import UNROLL
from tuner.trace.traced_schedule import TracedSchedule


@POSTPROCS.register("rewrite-unroll")
class RewriteUnroll(Postproc):
    def apply(self, sch: TracedSchedule, ctx: SpaceContext) -> None:
        for r in all_blocks(sch.program):
            name = r.block.name
            depth = nest_annotation(sch.program, name, UNROLL)
            if not isinstance(depth, int) or depth <= 1:
                continue
            loops = loops_above(sch.program, name)
            positions: list[int] = []
            product = 1
            k = len(loops) - 1
            if k >= 0 and loops[k].kind == "vectorized":
                k -= 1
            while k >= 0:
                lp = loops[k]
                if (
                    lp.kind != "serial"
                    or not isinstance(lp.extent, Const)
                    or len(blocks_under(lp)) != 1
                ):
                    break
                extent = int(lp.extent.value)
                if extent > 1:
                    if product * extent > depth:
                        break
                    positions.append(k)
                    product *= extent
                k -= 1
            if positions:
                handles = sch.get_loops(sch.get_block(name))
                for k in reversed(positions):
                    sch.unroll(handles[k])
