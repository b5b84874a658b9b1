"""Forced decisions: what a re-derivation answers the rules' sampling calls with.

A schedule made with `forced=` re-derives an earlier trace: the rules run again
and each sampling call takes the next forced decision (repaired where it no
longer fits) instead of its own, for as long as the calls come in the order and
with the signatures (`signature`) the forced ones were recorded with. At the
first call that differs (a changed structural choice added or removed sampling
calls) forcing stops and the rest is sampled. A decision forced with a subject
is not taken in order but by the call that names the same subject
(`TracedSchedule.sample_categorical(subject=...)`): one per top-level nest,
whose number a re-derivation may change.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable
from typing import Any

from tuner.trace.instruction import Instruction

Signature = tuple[Any, ...]
"""What a sampling call must match to take a forced decision: its kind and the size of its choice."""

Forced = tuple[Signature, Any] | tuple[Signature, Any, Hashable]
"""A forced decision: (signature, decision), or with a subject, taken by the call naming it."""


def signature(inst: Instruction) -> Signature:
    """The signature of a recorded sampling instruction (what forced decisions are matched by)."""
    if inst.kind == "sample_perfect_tile":
        return (inst.kind, inst.attr("n"))
    if inst.kind == "sample_categorical":
        return (inst.kind, len(inst.attr("candidates")))
    if inst.kind == "sample_loop":
        return (inst.kind, len(inst.inputs[0]))
    return (inst.kind,)


class ForcedDecisions:
    """The forced decisions not yet taken: in order, and by subject."""

    def __init__(self, forced: Iterable[Forced] = ()) -> None:
        self._in_order: deque[tuple[Signature, Any]] = deque()
        self._by_subject: dict[tuple[Signature, Hashable], Any] = {}
        for f in forced:
            if len(f) == 3 and f[2] is not None:
                self._by_subject.setdefault((f[0], f[2]), f[1])
            else:
                self._in_order.append((f[0], f[1]))

    def take(
        self, sig: Signature, decision: Any, subject: Hashable | None = None
    ) -> tuple[Any, bool]:
        """The forced decision for this call, or `decision`; and whether it was forced."""
        if subject is not None:
            key = (sig, subject)
            if key in self._by_subject:
                return self._by_subject.pop(key), True
            return decision, False
        if self._in_order:
            if self._in_order[0][0] == sig:
                return self._in_order.popleft()[1], True
            self._in_order.clear()  # the derivation took another path: sample the rest
        return decision, False
