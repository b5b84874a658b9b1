"""Vectorize: the innermost loop of each block, when it is data-parallel.

Under a nest whose `loomtune.vectorize` annotation is positive, each block's
innermost loop is vectorized when it is serial, of constant extent >= 2 and
spatial for every block under it (and the primitive accepts it). Codegen
picks the lanes (the extent up to 4 registers) and falls back to a serial
loop where vector code could change the result, so this never breaks a kernel.

An extent that is a multiple of the target's lanes but not a power of two
(a register tile 24 wide: three AVX2 registers) gets a `vector_width`
annotation: the widest power-of-two number of registers (at most 4) that
divides it. Left to codegen it would be one `<24 x float>` vector, which LLVM
legalises with shuffles: dense 128x768->3072 with a 4 x 24 tile ran 59-105 ms
instead of 11 ms.
"""

from __future__ import annotations

from ir.expr import Const
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
            if not isinstance(width, int) or width <= 0:
                continue
            loops = loops_above(sch.program, name)
            if not loops:
                continue
            lp = loops[-1]
            if lp.kind != "serial" or not isinstance(lp.extent, Const) or int(lp.extent.value) < 2:
                continue
            if any(loop_role(b, lp) != "spatial" for b in blocks_under(lp)):
                continue
            if is_legal(sch.program, lambda s, n=lp.var.name: s.vectorize(n)):
                handle = sch.get_loops(sch.get_block(name))[-1]
                sch.vectorize(handle)
                lanes = vector_width(int(lp.extent.value), ctx.lanes, ctx.max_vector_extent)
                if lanes is not None:
                    sch.annotate(handle, "vector_width", lanes)


def vector_width(extent: int, lanes: int, cap: int) -> int | None:
    """The lanes to emit a vectorized loop of `extent` with, where codegen's default
    (the extent itself, up to `cap`) would be a vector of a non-power-of-two width;
    None where the default is right."""
    if extent % lanes or (extent & (extent - 1)) == 0:
        return None
    width = lanes
    while width * 2 <= cap and extent % (width * 2) == 0:
        width *= 2
    return width
