"""The schedule-rule interface and its registry.

A rule is a small probabilistic program over one block: it records primitives
and sampling instructions on a `TracedSchedule`, so what it chose is in the
trace. Block rules run on every block of the program (consumers first); root
rules run once afterwards, on the whole program (like MetaSchedule's rules on
the root block).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from tuner.space.context import SpaceContext
from tuner.space.registry import Registry
from tuner.trace.traced_schedule import TracedSchedule


class ScheduleRule:
    """Base class: override `apply`; leave the schedule alone where the rule does not fit."""

    name: ClassVar[str] = ""
    scope: ClassVar[Literal["block", "root"]] = "block"

    def apply(self, sch: TracedSchedule, block: str | None, ctx: SpaceContext) -> None:
        """Schedule the block named `block` (None for root rules).

        Record primitives on `sch`, with handles from `sch.get_block(block)`; a refused
        primitive may propagate: the sample is then rejected.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<rule {self.name}>"


RULES: Registry[ScheduleRule] = Registry("schedule rule")

# Block annotations the parallel-vectorize-unroll rule leaves for the postprocessors.
PARALLEL = "loomtune.parallel"
VECTORIZE = "loomtune.vectorize"
UNROLL = "loomtune.unroll"
