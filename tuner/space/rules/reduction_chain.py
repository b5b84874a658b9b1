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

What is sampled (so sampling reaches what the mutators reach, and more):

- the location, by `sample_compute_location` over every legal location no
  deeper than the row loop: the row loop (probability `row_probability`), the
  root (its own pass over all rows) or inline (recomputed where it is read,
  e.g. exp inlined into both the sum and the division); the compute-location
  mutator moves it among the same places (deeper ones are rejected by the
  verify postprocessor: they repeat the same work);
- for a reduction computed in the row, a structural choice (a categorical,
  not mutated): keep it, or `rfactor` it into vector-wide partial results,

      for r0, v: s_rf[i, v] += x_exp[i, r0 * F + v]   # v data-parallel: vectorized, F accumulators
      for v:     s[i] += s_rf[i, v]

  with F two or four vector registers of float32 (`rfactor_widths` x lanes),
  the reduction split by a `sample_perfect_tile` (mutated like any tile).
  Not one register: that is a single accumulator chain, slower than the plain
  row reduction, which LLVM vectorizes with four.

Applies to reductions without data reuse and to the element-wise blocks that
feed them; tiled reductions (matmul, conv) and their inputs are left to the
other rules.
"""

from __future__ import annotations

from collections.abc import Sequence

from ir.program import BufferStore
from ir.schedule.state import block_name, find_block, find_loop, loops_above
from tuner.space.analysis import (
    consumers,
    has_reuse,
    is_legal,
    is_output,
    is_simple,
    load_loop_vars,
    loop_role,
    written_buffer,
)
from tuner.space.context import SpaceContext
from tuner.space.rules.base import RULES, ScheduleRule
from tuner.trace.sampling import sample_categorical
from tuner.trace.traced_schedule import BlockRef, TracedSchedule

ROOT, INLINE = -1, -2


@RULES.register("reduction-chain")
class ReductionChain(ScheduleRule):
    def __init__(
        self,
        *,
        row_probability: float = 0.7,
        rfactor_probability: float = 0.5,
        rfactor_widths: Sequence[int] = (2, 4),
    ) -> None:
        self.row_probability = row_probability
        self.rfactor_probability = rfactor_probability
        self.rfactor_widths = tuple(rfactor_widths)

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
        row = self._row_loop(sch, name, candidates)
        if row < 0:
            return
        options = self._legal(sch, name, candidates, row)
        location = self._draw(sch, options, row)

        b = sch.get_block(name)
        rf = None
        if location == row and self._factorable(sch, name):
            rf = self._maybe_rfactor(sch, b, name, ctx)
        sch.compute_at(b, sch.sample_compute_location(b, decision=location))
        if rf is not None:
            self._place_partials(sch, rf)

    # -- where -----------------------------------------------------------------------

    @staticmethod
    def _row_loop(sch: TracedSchedule, name: str, candidates: list[str]) -> int:
        """The deepest common loop of the consumers that every consumer's read depends on (-1: none)."""
        program = sch.program
        out = written_buffer(find_block(program, name))
        readers = consumers(program, name)
        chosen = -1
        for k, loop in enumerate(candidates):
            var = find_loop(program, loop).var
            if all(var in used for c in readers for used in load_loop_vars(program, c, out)):
                chosen = k
            else:
                break
        if chosen >= 0 and not is_legal(program, lambda s: s.compute_at(name, candidates[chosen])):
            return -1
        return chosen

    @staticmethod
    def _legal(sch: TracedSchedule, name: str, candidates: list[str], row: int) -> list[int]:
        """The row loop, the root, inline and shallower loops, where the primitive accepts them."""
        program = sch.program
        options = [row, ROOT]
        if is_legal(program, lambda s: s.compute_inline(name)):
            options.append(INLINE)
        options += [
            k
            for k in range(row)
            if is_legal(program, lambda s, c=candidates[k]: s.compute_at(name, c))
        ]
        return options

    def _draw(self, sch: TracedSchedule, options: list[int], row: int) -> int:
        if sch.rng is None or len(options) == 1:
            return row
        rest = (1 - self.row_probability) / (len(options) - 1)
        weights = [self.row_probability if o == row else rest for o in options]
        return options[sample_categorical(sch.rng, weights)]

    # -- rfactor ---------------------------------------------------------------------

    @staticmethod
    def _factorable(sch: TracedSchedule, name: str) -> bool:
        """A naive reduction with one reduction loop after its spatial ones."""
        r = find_block(sch.program, name)
        if r.block.init is None or not isinstance(r.block.body, BufferStore):
            return False
        roles = [loop_role(r, lp) for lp in loops_above(sch.program, name)]
        return len(roles) >= 2 and roles[-1] == "reduce" and "reduce" not in roles[:-1]

    def _maybe_rfactor(
        self, sch: TracedSchedule, b: BlockRef, name: str, ctx: SpaceContext
    ) -> str | None:
        """A sampled choice: rfactor the reduction into vector-wide partials. Returns the rf block."""
        lp = loops_above(sch.program, name)[-1]
        extent = int(lp.extent.value)  # type: ignore[attr-defined]
        widths = [w * ctx.lanes for w in self.rfactor_widths]
        widths = [w for w in widths if extent % w == 0 and extent // w >= 2]
        if not widths or self.rfactor_probability <= 0:
            return None
        p = self.rfactor_probability
        choice = int(
            sch.sample_categorical([0, *widths], [1 - p] + [p / len(widths)] * len(widths))
        )
        if choice == 0:
            return None
        loop = sch.get_loops(b)[-1]
        tile = sch.sample_perfect_tile(
            loop,
            n=2,
            max_innermost_factor=max(widths),
            decision=None if sch.rng is None else [extent // choice, choice],
        )
        _, inner = sch.split(loop, tile)
        store = find_block(sch.program, name).block.body
        assert isinstance(store, BufferStore)
        return block_name(sch.rfactor(inner, len(store.indices)))

    @staticmethod
    def _place_partials(sch: TracedSchedule, rf: str) -> None:
        """The partial reduction goes into the write-back's row, its vector axis innermost."""
        rf_name = rf
        candidates = sch.compute_location_candidates(rf_name)
        program = sch.program
        chosen = -1
        out = written_buffer(find_block(program, rf_name))
        readers = consumers(program, rf_name)
        for k, loop in enumerate(candidates):
            var = find_loop(program, loop).var
            if all(var in used for c in readers for used in load_loop_vars(program, c, out)):
                chosen = k
            else:
                break
        if chosen < 0:
            return
        b = sch.get_block(rf_name)
        sch.compute_at(b, sch.sample_compute_location(b, decision=chosen))
        r = find_block(sch.program, rf_name)
        loops = loops_above(sch.program, rf_name)
        if (
            len(loops) >= 2
            and loop_role(r, loops[-1]) == "reduce"
            and loop_role(r, loops[-2]) == "spatial"
        ):
            handles = sch.get_loops(sch.get_block(rf_name))
            sch.reorder(handles[-1], handles[-2])
