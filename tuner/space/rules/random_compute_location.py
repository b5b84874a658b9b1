"""Random compute location: where an element-wise producer (a padding) is computed.

A sampled location among the loops of its consumers that may hold it, the root
(stay a separate nest) or inline (recomputed inside each read) — except that a
select (a padding) is never inlined into a reduction that broadcasts it over an
axis (a dense conv's input over the output channels): its bounds check would run on
every load of the hot loop, where LLVM turns the guarded
load times weight into a branch, a multiply and an add per accumulator instead of
one FMA with a folded broadcast. Only legal locations are drawn (each is tried on
a scratch schedule first), uniformly; the decision is recorded by
`sample_compute_location`, which the compute-location mutator changes later. A
block another rule already placed that way (the reduction-chain rule may leave
softmax's exp at the root) is not drawn again.
"""

from __future__ import annotations

from ir.expr import Select, Var
from ir.node import walk
from ir.program import BlockRealize, BufferStore, Program
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
        inline = [] if _guards_a_hot_loop(program, name) else [INLINE]
        options = [ROOT, *inline, *range(len(candidates))]
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


def _guards_a_hot_loop(program: Program, name: str) -> bool:
    """Whether `name` computes a select (a padding) that a reduction reads for several
    outputs along an axis it does not depend on (a dense conv's input, broadcast over the
    output channels): inlined, the select would guard every load of that reduction's hot
    loop. A depthwise conv reads each element for one channel: left as it was."""
    r = find_block(program, name)
    store = r.block.body
    if not isinstance(store, BufferStore) or not any(
        isinstance(n, Select) for n in walk(store.value)
    ):
        return False
    buffer = written_buffer(r)
    return any(c.block.init is not None and _broadcast(c, buffer) for c in consumers(program, name))


def _broadcast(r: BlockRealize, buffer: str | None) -> bool:
    """Some spatial axis (of extent > 1) of block `r` indexes none of its reads of `buffer`."""
    spatial = {
        iv.var for iv in r.block.iter_vars if iv.kind == "spatial" and int(iv.extent.value) > 1
    }
    for rd in r.block.reads:
        if rd.buffer.name == buffer:
            used = {n for rng in rd.region for n in walk(rng.min) if isinstance(n, Var)}
            if spatial - used:
                return True
    return False
