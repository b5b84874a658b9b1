"""Column reductions: the reduction loop goes outside the unit-stride spatial loop.

    for j in range(3072):                         for rk in range(768):
      for rk in range(768):              ->         for j in range(3072):     (vectorized later)
        wsum[j] += W[rk, j]                           wsum[j] += W[rk, j]

A reduction with no data reuse (nothing to tile) whose innermost loop is the
reduction, while the last spatial loop walks the last axis of a read buffer
with unit stride, reads that buffer with a stride of a whole row per step —
dense_int8's weight column sums, 2.4M strided byte loads, took longer than its
tensorized product. Reordered, each step streams one row and the spatial loop
vectorizes; every element still sums in the same order, so the result is
unchanged (floats too). Where the shape is otherwise the rule does nothing.
"""

from __future__ import annotations

from ir.arith import strides_in
from ir.expr import Load
from ir.node import walk
from ir.schedule.state import find_block, loops_above
from ir.visit import substitute
from tuner.space.analysis import has_reuse, is_simple, loop_role
from tuner.space.context import SpaceContext
from tuner.space.rules.base import RULES, ScheduleRule
from tuner.trace.traced_schedule import TracedSchedule


@RULES.register("column-reduction")
class ColumnReduction(ScheduleRule):
    def apply(self, sch: TracedSchedule, block: str | None, ctx: SpaceContext) -> None:
        assert block is not None
        program = sch.program
        r = find_block(program, block)
        if r.block.init is None or not is_simple(program, block) or has_reuse(r):
            return
        fors = loops_above(program, block)
        roles = [loop_role(r, lp) for lp in fors]
        if roles[-1] != "reduce" or "spatial" not in roles:
            return
        spatial = max(k for k, role in enumerate(roles) if role == "spatial")
        s_var, r_var = fors[spatial].var, fors[-1].var
        binds = {iv.var: v for iv, v in zip(r.block.iter_vars, r.values)}
        column = False
        for ld in (n for n in walk(r.block.body) if isinstance(n, Load) and n.indices):
            if ld.buffer.name in {w.buffer.name for w in r.block.writes}:
                continue
            last = substitute(ld.indices[-1], binds)
            s_stride, r_stride = strides_in(last, [s_var, r_var])  # type: ignore[arg-type]
            earlier = [strides_in(substitute(i, binds), [r_var])[0] for i in ld.indices[:-1]]  # type: ignore[arg-type]
            if s_stride == 1 and r_stride == 0 and any(e for e in earlier):
                column = True
        if not column:
            return
        loops = sch.get_loops(sch.get_block(block))
        order = [lp for k, lp in enumerate(loops) if k != spatial] + [loops[spatial]]
        sch.reorder(*order[spatial:])
