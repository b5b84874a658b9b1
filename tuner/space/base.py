"""The contract between a design space and the search strategies that sample it.

A design space belongs to one program (a task's naive loop nest). It produces
*complete* traces: replaying one with `Trace.apply` on that program gives the
scheduled program that is compiled and measured, with no further step, so the
trace stored in the database is exactly what `loomtune apply` runs.
"""

from __future__ import annotations

import random
from typing import Protocol, runtime_checkable

from ir.errors import LoomtuneError
from ir.program import Program
from tuner.trace.trace import Trace


class SpaceRejected(LoomtuneError):
    """A sampled or mutated candidate is illegal; it is dropped without measuring it."""


@runtime_checkable
class DesignSpace(Protocol):
    """Samples and mutates complete traces of one program."""

    program: Program

    def sample(self, rng: random.Random) -> Trace:
        """A fresh random candidate; raises `SpaceRejected` when it is illegal."""

    def mutate(self, trace: Trace, rng: random.Random) -> Trace | None:
        """A neighbour of `trace` with some decisions changed, or None when none can change."""


# A space may also offer `scheduled_program(trace) -> Program | None`: the program a
# trace it just produced replays to (a cache). The search uses it when present to
# score candidates without replaying them again.
