"""One arena for a model's activations: offsets by liveness, greedy by size.

Each stored value lives from the step that writes it to the last step that reads it
(inclusive at both ends, so a kernel never writes over its own inputs). Largest first,
each value takes the lowest 64-byte-aligned offset that no value alive at the same
time occupies — the greedy-by-size heuristic of TFLite's and TVM's memory planners.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ALIGNMENT = 64


@dataclass(frozen=True)
class Lifetime:
    """A value to place: its size in bytes and the steps it is alive (inclusive)."""

    value: str
    nbytes: int
    first: int
    last: int


@dataclass(frozen=True)
class Slot:
    value: str
    offset: int
    nbytes: int
    first: int
    last: int

    def overlaps(self, other: Slot | Lifetime) -> bool:
        return self.first <= other.last and other.first <= self.last


def _aligned(n: int, alignment: int) -> int:
    return -(-max(n, 1) // alignment) * alignment


def plan_arena(
    lifetimes: Sequence[Lifetime], alignment: int = ALIGNMENT
) -> tuple[dict[str, Slot], int]:
    """Offsets for every value and the arena's size in bytes (a multiple of `alignment`)."""
    placed: list[Slot] = []
    order = sorted(lifetimes, key=lambda t: (-t.nbytes, t.first, t.value))
    for t in order:
        size = _aligned(t.nbytes, alignment)
        busy = sorted((s.offset, _aligned(s.nbytes, alignment)) for s in placed if s.overlaps(t))
        offset = 0
        for start, length in busy:
            if offset + size <= start:
                break
            offset = max(offset, start + length)
        placed.append(Slot(t.value, offset, t.nbytes, t.first, t.last))
    total = max((s.offset + _aligned(s.nbytes, alignment) for s in placed), default=0)
    return {s.value: s for s in placed}, total
