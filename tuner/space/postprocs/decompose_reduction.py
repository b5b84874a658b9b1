"""Decompose reductions: each reduction's init moves out of its reduction loops.

The init goes just before the outermost loop that feeds a reduction axis
(for the SSRSRS tiling: before R0, zeroing the accumulator tile once), so the
update loop runs without an `if first iteration` test. The init nest repeats
the spatial loops inside, with their kinds (vectorized, unrolled), which is
why this runs after the loop-kind postprocessors. It also has to come after
every `reverse_compute_at` (the rules): that primitive refuses a decomposed
reduction. A reduction that cannot be decomposed keeps its init (correct).
"""

from __future__ import annotations

from ir.schedule.state import all_blocks, find_block, loops_above
from tuner.space.analysis import is_legal, loop_role
from tuner.space.context import SpaceContext
from tuner.space.postprocs.base import POSTPROCS, Postproc
from tuner.trace.traced_schedule import TracedSchedule


@POSTPROCS.register("decompose-reduction")
class DecomposeReduction(Postproc):
    def apply(self, sch: TracedSchedule, ctx: SpaceContext) -> None:
        names = [r.block.name for r in all_blocks(sch.program) if r.block.init is not None]
        for name in names:
            r = find_block(sch.program, name)
            loops = loops_above(sch.program, name)
            k = next(
                (k for k, lp in enumerate(loops) if loop_role(r, lp) in ("reduce", "both")), None
            )
            if k is None:
                continue
            loop = loops[k].var.name
            if is_legal(sch.program, lambda s, b=name, lp=loop: s.decompose_reduction(b, lp)):
                b = sch.get_block(name)
                sch.decompose_reduction(b, sch.get_loops(b)[k])
