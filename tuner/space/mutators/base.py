"""The mutator interface and its registry.

A mutator works on the *rule part* of a trace (tuner/space/space.py): it
returns the same instructions with some decisions changed, or None when it
finds nothing to change. It never replays the whole trace; the space replays
the result and reruns the postprocessors, rejecting what became illegal.
"""

from __future__ import annotations

import random
from typing import ClassVar

from tuner.space.context import SpaceContext
from tuner.space.registry import Registry
from tuner.trace.instruction import RV
from tuner.trace.trace import Trace


class Mutator:
    name: ClassVar[str] = ""
    rederives: ClassVar[bool] = False
    """True: the space re-derives the changed rule part (`RuleSpace.rederive`) instead of
    replaying it, because the changed decision decides which instructions follow."""

    def apply(self, trace: Trace, rng: random.Random, ctx: SpaceContext) -> Trace | None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<mutator {self.name}>"


MUTATORS: Registry[Mutator] = Registry("mutator")


def annotated_categoricals(trace: Trace, key: str, *, prefix: bool = False) -> list[int]:
    """Indices of the sample_categorical instructions whose value an annotation `key` takes
    (with `prefix`, any key starting with `key`)."""
    used = {
        inst.inputs[1].name
        for inst in trace.instructions
        if inst.kind == "annotate"
        and (inst.attr("key").startswith(key) if prefix else inst.attr("key") == key)
        and isinstance(inst.inputs[1], RV)
    }
    return [
        i
        for i, inst in enumerate(trace.instructions)
        if inst.kind == "sample_categorical" and inst.outputs and inst.outputs[0] in used
    ]


def resample_categorical(trace: Trace, indices: list[int], rng: random.Random) -> Trace | None:
    """Another candidate for one of the categoricals at `indices` (chosen at random), or None."""
    options = [
        i
        for i in indices
        if len(trace.instructions[i].attr("candidates")) > 1 and i in trace.decisions
    ]
    if not options:
        return None
    i = rng.choice(options)
    n = len(trace.instructions[i].attr("candidates"))
    old = trace.decisions[i]
    new = rng.choice([k for k in range(n) if k != old])
    return trace.with_decision(i, new)


def structural_categoricals(trace: Trace) -> list[int]:
    """Indices of the sample_categorical instructions whose value no instruction takes.

    Such a value decided something in a rule's code (pack a weight or not,
    rfactor or not), so only re-deriving the trace follows a change of it.
    """
    used: set[str] = set()
    for inst in trace.instructions:
        used |= inst.used_rvs()
    return [
        i
        for i, inst in enumerate(trace.instructions)
        if inst.kind == "sample_categorical" and not (set(inst.outputs) & used)
    ]
