"""The postprocessor interface and its registry.

A postprocessor runs after the rules, on the whole program: it turns the
rules' annotations into loop kinds (or decomposes reductions) by recording
primitives on the same `TracedSchedule`, so the trace stays complete, or it
rejects the candidate by raising `SpaceRejected`. It is deterministic: the
same program gives the same instructions (mutation reruns postprocessors on a
replayed rule part and relies on it).
"""

from __future__ import annotations

from typing import ClassVar

from tuner.space.context import SpaceContext
from tuner.space.registry import Registry
from tuner.trace.traced_schedule import TracedSchedule


class Postproc:
    name: ClassVar[str] = ""

    def apply(self, sch: TracedSchedule, ctx: SpaceContext) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<postproc {self.name}>"


POSTPROCS: Registry[Postproc] = Registry("postprocessor")
