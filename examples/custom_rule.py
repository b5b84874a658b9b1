"""A schedule rule of your own, plugged into the design space through the registry.

    python examples/custom_rule.py      # samples transpose 1024x1024 with and without it

The rule cache-blocks transposing copies (`B[j, i] = A[i, j]`): it tiles the two
innermost loops with sampled sizes and orders them tile by tile, so both the
rows read and the columns written stay in cache. The built-in rules leave such
element-wise blocks as they are (MetaSchedule tiles only blocks that reuse data).

Three steps: subclass `ScheduleRule`, register it under a name, and name it in
the rule list of `default_space`. Every primitive and sampling call goes
through the `TracedSchedule`, so the rule's choices are in the trace, replayed
and mutated like the built-in ones (its tile sizes by the tile-size mutator).
"""

from __future__ import annotations

import random
import statistics

from ir.expr import Load
from ir.node import walk
from ir.program import BufferStore
from ir.schedule.state import find_block
from tuner.space import DEFAULT_RULES, RULES, ScheduleRule, SpaceContext
from tuner.space.analysis import is_elementwise, is_simple
from tuner.trace.traced_schedule import TracedSchedule


@RULES.register("tile-transpose")
class TileTranspose(ScheduleRule):
    """Tile the last two loops of a transposing element-wise block: (a, b) -> (a0, b0, a1, b1)."""

    def __init__(self, *, max_tile: int = 32) -> None:
        self.max_tile = max_tile

    def apply(self, sch: TracedSchedule, block: str | None, ctx: SpaceContext) -> None:
        assert block is not None
        r = find_block(sch.program, block)
        if not is_elementwise(r) or not is_simple(sch.program, block) or len(r.block.iter_vars) < 2:
            return
        store = r.block.body
        assert isinstance(store, BufferStore)
        reads = [n for n in walk(store.value) if isinstance(n, Load) and n.indices]
        if not any(ld.indices[-1] != store.indices[-1] for ld in reads):
            return  # no transposing read: the loops already stream
        b = sch.get_block(block)
        *_, outer, inner = sch.get_loops(b)
        o0, o1 = sch.split(
            outer, sch.sample_perfect_tile(outer, n=2, max_innermost_factor=self.max_tile)
        )
        i0, i1 = sch.split(
            inner, sch.sample_perfect_tile(inner, n=2, max_innermost_factor=self.max_tile)
        )
        sch.reorder(o0, i0, o1, i1)


def main() -> None:
    from codegen.host import host_target
    from codegen.kernel import compile_program
    from ir.task import library_task
    from tuner.space import SpaceRejected, default_space
    from workers.compare import compare_with_numpy

    task = library_task("transpose", {"m": 1024, "n": 1024})
    target = host_target(1)
    for label, rules in (
        ("default rules", DEFAULT_RULES),
        ("+ tile-transpose", (*DEFAULT_RULES, "tile-transpose")),
    ):
        space = default_space(task.program, target, rules=rules)
        rng = random.Random(0)
        times = []
        for _ in range(8):
            try:
                trace = space.sample(rng)
            except SpaceRejected:
                continue
            result = compare_with_numpy(
                compile_program(trace.apply(task.program).program, target), task
            )
            assert result.correct, result.message
            times.append((result.latency_ms, result.numpy_ms))
        best = min(times)
        print(
            f"{label:18s} best {best[0]:.3f} ms (numpy {best[1]:.3f} ms), "
            f"median {statistics.median(t for t, _ in times):.3f} ms over {len(times)} samples"
        )


if __name__ == "__main__":
    main()
