"""Verify: reject candidates that would compile to something unreasonable.

Legality is the primitives' job (each refuses what would change the result);
this postprocessor rejects what is legal but never worth a measurement:
- a block under unrolled loops whose extents multiply past `max_unrolled`
  (code size and compile time explode);
- a parallel loop inside another loop of extent > 1 (threads forked once per
  outer iteration);
- a reduction under a loop (of extent > 1) that feeds none of its iteration
  variables: every iteration of that loop repeats the whole reduction (a
  producer computed inside a consumer's loop it does not depend on, e.g.
  softmax's row sum recomputed for every column: n times the work). The
  compute-location mutator can propose such a place; this is where it is
  refused. Element-wise producers may repeat (a padding recomputed per tile of
  output channels costs a copy and may stay in cache): that is a trade-off the
  search measures.
"""

from __future__ import annotations

import itertools
import math

from ir.expr import Const, Var
from ir.node import walk
from ir.schedule.state import all_blocks, loops_above
from tuner.space.base import SpaceRejected
from tuner.space.context import SpaceContext
from tuner.space.postprocs.base import POSTPROCS, Postproc
from tuner.trace.traced_schedule import TracedSchedule


@POSTPROCS.register("verify")
class Verify(Postproc):
    def __init__(self, *, max_unrolled: int = 1024) -> None:
        self.max_unrolled = max_unrolled

    def apply(self, sch: TracedSchedule, ctx: SpaceContext) -> None:
        for r in all_blocks(sch.program):
            loops = loops_above(sch.program, r.block.name)
            unrolled = math.prod(
                int(lp.extent.value)
                for lp in loops
                if lp.kind == "unrolled" and isinstance(lp.extent, Const)
            )
            if unrolled > self.max_unrolled:
                raise SpaceRejected(
                    f'block "{r.block.name}" is unrolled {unrolled} times (more than {self.max_unrolled})'
                )
            repeating = [lp for lp in loops if lp.extent != Const(1, lp.extent.dtype)]
            used = {n for v in r.values for n in walk(v) if isinstance(n, Var)}
            for lp in repeating if r.block.is_reduction else ():
                if lp.var not in used:
                    raise SpaceRejected(
                        f'block "{r.block.name}" repeats the same work in every iteration of loop '
                        f"{lp.var.name}, which feeds none of its iteration variables"
                    )
            for outer, lp in itertools.pairwise(repeating):
                if lp.kind == "parallel":
                    raise SpaceRejected(
                        f"loop {lp.var.name} is parallel inside loop {outer.var.name}: "
                        "threads would be forked once per outer iteration"
                    )
