"""Random compute location: where an element-wise producer (a padding) is computed.

A sampled location among the loops of its consumers that may hold it, the root
(stay a separate nest) or inline (recomputed inside each read). Only legal
locations are drawn (each is tried on a scratch schedule first), uniformly; the
decision is recorded by `sample_compute_location`, which the compute-location
mutator changes later. A block another rule already placed that way (the
reduction-chain rule may leave softmax's exp at the root) is not drawn again.
"""

from __future__ import annotations

from ir.schedule.state import find_block
from tuner.space.analysis import (
    consumers,
    is_elementwise,
    is_legal,
    is_output,
    is_simple,
    written_buffer,
)
from tuner.space.context import SpaceContext
from tuner.space.rules.base import RULES, ScheduleRule
from tuner.trace.errors import TraceError
from tuner.trace.traced_schedule import TracedSchedule

ROOT, INLINE = -1, -2


@RULES.register("random-compute-location")
class RandomComputeLocation(ScheduleRule):
    def apply(self, sch: TracedSchedule, block: str | None, ctx: SpaceContext) -> None:
        assert block is not None
        program = sch.program
        name = block
        r = find_block(program, name)
        out = written_buffer(r)
        if (
            not is_elementwise(r)
            or out is None
            or is_output(program, out)
            or not is_simple(program, name)
        ):
            return
        if not consumers(program, name) or _placed(sch, name):
            return
        if sch.rng is None:
            raise TraceError(f'random-compute-location of block "{name}" needs an rng')
        candidates = sch.compute_location_candidates(name)
        options = [ROOT, INLINE, *range(len(candidates))]
        sch.rng.shuffle(options)
        for choice in options:
            if choice == ROOT:
                ok = True
            elif choice == INLINE:
                ok = is_legal(program, lambda s: s.compute_inline(name))
            else:
                ok = is_legal(program, lambda s, c=choice: s.compute_at(name, candidates[c]))
            if ok:
                b = sch.get_block(name)
                sch.compute_at(b, sch.sample_compute_location(b, decision=choice))
                return


def _placed(sch: TracedSchedule, name: str) -> bool:
    """Whether the trace so far has a sample_compute_location of block `name`."""
    handles = {
        i.outputs[0]
        for i in sch.instructions
        if i.kind == "get_block" and i.attr("name") == name and i.outputs
    }
    return any(
        i.kind == "sample_compute_location" and getattr(i.inputs[0], "name", None) in handles
        for i in sch.instructions
    )
