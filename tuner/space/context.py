"""What rules, postprocessors and mutators know about the space they work in."""

from __future__ import annotations

from dataclasses import dataclass

from ir.program import Program
from ir.target import Target


@dataclass(frozen=True)
class SpaceContext:
    """The naive program a space belongs to and the target it schedules for."""

    program: Program
    target: Target

    @property
    def threads(self) -> int:
        return self.target.num_threads

    @property
    def lanes(self) -> int:
        """float32 lanes of one vector register (8 with AVX2, 16 with AVX-512)."""
        return max(1, self.target.vector_bits // 32)

    @property
    def max_vector_extent(self) -> int:
        """The widest vectorized loop worth emitting: 4 registers' worth (codegen's own cap)."""
        return 4 * self.lanes
