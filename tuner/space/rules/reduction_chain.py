"""Reduction chains (softmax, layer norm, average pooling): producers move into the consumer's row loop.

    x_max[i] = max_r X[i, r];  x_exp = exp(X - x_max);  s[i] = sum_r x_exp[i, r];  Y = x_exp / s
  ->
    for i:                      # one row at a time: the intermediates shrink to a row
      x_max[i] = ...; x_exp[i, :] = ...; s[i] = ...; Y[i, :] = ...

Blocks are visited consumers first, so each producer lands under the loop that
already holds its consumers: the deepest of their common loops that every
consumer's read of the buffer depends on (deeper ones would recompute it).
The chain then runs as one nest: one parallel loop (one fork-join) instead of
one per block, and compaction keeps each intermediate row in cache.

The location is recorded as a `sample_compute_location` with this decision,
so the compute-location mutator can still move it (to the root, or inline).
Applies to reductions without data reuse and to the element-wise blocks that
feed them; tiled reductions (matmul, conv) and their inputs are left to the
other rules.
"""

from __future__ import annotations

from ir.schedule.state import find_block, find_loop
from tuner.space.analysis import (
    consumers,
    has_reuse,
    is_legal,
    is_output,
    is_simple,
    load_loop_vars,
    written_buffer,
)
from tuner.space.context import SpaceContext
from tuner.space.rules.base import RULES, ScheduleRule
from tuner.trace.traced_schedule import TracedSchedule


@RULES.register("reduction-chain")
class ReductionChain(ScheduleRule):
    def apply(self, sch: TracedSchedule, block: str | None, ctx: SpaceContext) -> None:
        assert block is not None
        program = sch.program
        name = block
        if not is_simple(program, name):
            return
        r = find_block(program, name)
        out = written_buffer(r)
        if out is None or is_output(program, out):
            return
        readers = consumers(program, name)
        row_reductions = [c for c in readers if c.block.init is not None and not has_reuse(c)]
        tiled = r.block.init is not None and has_reuse(r)
        if not readers or tiled or not (r.block.init is not None or row_reductions):
            return
        candidates = sch.compute_location_candidates(name)
        chosen = -1
        for k, loop in enumerate(candidates):
            var = find_loop(program, loop).var
            if all(var in used for c in readers for used in load_loop_vars(program, c, out)):
                chosen = k
            else:
                break
        if chosen < 0 or not is_legal(program, lambda s: s.compute_at(name, candidates[chosen])):
            return
        b = sch.get_block(name)
        sch.compute_at(b, sch.sample_compute_location(b, decision=chosen))
