"""Auto-inline: cheap element-wise blocks disappear into their consumers or producers.

An element-wise block writing an intermediate whose expression is cheap (no
calls such as exp or tanh, no selects: recomputing those per use costs more
than storing them) is inlined into its consumers (`compute_inline`); an
element-wise consumer of an element-wise producer is folded into it
(`reverse_compute_inline`). Either saves a pass over memory. Selects (padding)
are left to the random compute location, which may still inline them.
"""

from __future__ import annotations

from ir.program import BufferStore
from ir.schedule.state import find_block
from tuner.space.analysis import (
    is_elementwise,
    is_expensive,
    is_legal,
    is_output,
    is_simple,
    written_buffer,
)
from tuner.space.context import SpaceContext
from tuner.space.rules.base import RULES, ScheduleRule
from tuner.trace.traced_schedule import TracedSchedule


@RULES.register("auto-inline")
class AutoInline(ScheduleRule):
    def __init__(self, *, into_consumer: bool = True, into_producer: bool = True) -> None:
        self.into_consumer = into_consumer
        self.into_producer = into_producer

    def apply(self, sch: TracedSchedule, block: str | None, ctx: SpaceContext) -> None:
        assert block is not None
        program = sch.program
        r = find_block(program, block)
        if not is_elementwise(r) or not is_simple(program, block):
            return
        store = r.block.body
        assert isinstance(store, BufferStore)
        out = written_buffer(r)
        cheap = out is not None and not is_output(program, out) and not is_expensive(store.value)
        if self.into_consumer and cheap and is_legal(program, lambda s: s.compute_inline(block)):
            sch.compute_inline(sch.get_block(block))
            return
        if self.into_producer and is_legal(program, lambda s: s.reverse_compute_inline(block)):
            sch.reverse_compute_inline(sch.get_block(block))
