"""Vectorize: the innermost loop of each block, when it is data-parallel.

Under a nest whose `loomtune.vectorize` annotation is positive, each block's
innermost loop is vectorized when it is serial, of constant extent >= 2 and
spatial for every block under it (and the primitive accepts it). Codegen
picks the lanes (`codegen.vector.default_lanes`: whole registers, a power of
two of them, so a register tile 24 wide runs as three AVX2 vectors, also after
`repair` changed the tile) and falls back to a serial loop where vector code
could change the result, so this never breaks a kernel.
"""

from __future__ import annotations

from ir.expr import Const
from ir.program import IntrinsicCall
from ir.schedule.state import all_blocks, blocks_under, loops_above
from tuner.space.analysis import is_legal, loop_role, nest_annotation
from tuner.space.context import SpaceContext
from tuner.space.postprocs.base import POSTPROCS, Postproc
from tuner.space.rules.base import VECTORIZE
from tuner.trace.traced_schedule import TracedSchedule


@POSTPROCS.register("rewrite-vectorize")
class RewriteVectorize(Postproc):
    def apply(self, sch: TracedSchedule, ctx: SpaceContext) -> None:
        for r in all_blocks(sch.program):
            name = r.block.name
            width = nest_annotation(sch.program, name, VECTORIZE)
            if not isinstance(width, int) or width <= 0 or isinstance(r.block.body, IntrinsicCall):
                continue  # a tensorized block's instruction is its vector code
            loops = loops_above(sch.program, name)
            if not loops:
                continue
            lp = loops[-1]
            if lp.kind != "serial" or not isinstance(lp.extent, Const) or int(lp.extent.value) < 2:
                continue
            if any(loop_role(b, lp) != "spatial" for b in blocks_under(lp)):
                continue
            if is_legal(sch.program, lambda s, n=lp.var.name: s.vectorize(n)):
                sch.vectorize(sch.get_loops(sch.get_block(name))[-1])
