"""`Schedule`: the primitives over block and loop handles, applied to a program.

    sch = Schedule(task.program)
    i, j, k = sch.get_loops(sch.get_block("C"))
    i0, i1 = sch.split(i, [None, 8])
    sch.parallel(i0)
    kernel = compile_program(sch.program)

Every primitive is legal-or-refused: a refusal raises ScheduleError naming the
block or loop and the reason, and leaves the schedule unchanged (the program is
immutable; a primitive only replaces it when it succeeds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ir.program import Program
from ir.schedule import loops as L
from ir.schedule.state import BlockRV, LoopRV, ScheduleError, block_name, find_block, loop_name

T = TypeVar("T")


class Schedule:
    def __init__(self, program: Program) -> None:
        self.program = program

    def _apply(self, fn: Callable[..., tuple[Program, T]], *args: Any) -> T:
        program, result = fn(self.program, *args)
        self.program = program
        return result

    def _apply_program(self, fn: Callable[..., Program], *args: Any) -> None:
        self.program = fn(self.program, *args)

    # -- handles -----------------------------------------------------------

    def get_block(self, name: str) -> BlockRV:
        find_block(self.program, name)
        return BlockRV(name)

    def get_loops(self, block: BlockRV | str) -> list[LoopRV]:
        return [LoopRV(n) for n in L.get_loops(self.program, block_name(block))]

    def get_child_blocks(self, loop: LoopRV | str | None = None) -> list[BlockRV]:
        name = None if loop is None else loop_name(loop)
        return [BlockRV(n) for n in L.get_child_blocks(self.program, name)]

    # -- loops -------------------------------------------------------------

    def split(self, loop: LoopRV | str, factors: Sequence[int | None]) -> list[LoopRV]:
        names = self._apply(L.split, loop_name(loop), list(factors))
        return [LoopRV(n) for n in names]

    def fuse(self, *loops: LoopRV | str) -> LoopRV:
        return LoopRV(self._apply(L.fuse, [loop_name(x) for x in loops]))

    def reorder(self, *loops: LoopRV | str) -> None:
        self._apply_program(L.reorder, [loop_name(x) for x in loops])

    def parallel(self, loop: LoopRV | str) -> None:
        self._apply_program(L.parallel, loop_name(loop))

    def vectorize(self, loop: LoopRV | str) -> None:
        self._apply_program(L.vectorize, loop_name(loop))

    def unroll(self, loop: LoopRV | str) -> None:
        self._apply_program(L.unroll, loop_name(loop))

    def annotate(self, target: LoopRV | BlockRV | str, key: str, value: Any) -> None:
        is_block = isinstance(target, BlockRV)
        name = target.name if isinstance(target, LoopRV | BlockRV) else target
        self.program = L.annotate(self.program, name, key, value, is_block=is_block)

    # -- compute location -------------------------------------------------------

    def compute_at(self, block: BlockRV | str, loop: LoopRV | str) -> None:
        from ir.schedule.compute_at import compute_at

        self._apply_program(compute_at, block_name(block), loop_name(loop))

    def reverse_compute_at(self, block: BlockRV | str, loop: LoopRV | str) -> None:
        from ir.schedule.compute_at import reverse_compute_at

        self._apply_program(reverse_compute_at, block_name(block), loop_name(loop))

    def compute_inline(self, block: BlockRV | str) -> None:
        from ir.schedule.inline import compute_inline

        self._apply_program(compute_inline, block_name(block))

    def reverse_compute_inline(self, block: BlockRV | str) -> None:
        from ir.schedule.inline import reverse_compute_inline

        self._apply_program(reverse_compute_inline, block_name(block))

    # -- caches -----------------------------------------------------------------

    def cache_read(self, block: BlockRV | str, read_index: int, scope: str = "global") -> BlockRV:
        from ir.schedule import cache

        return BlockRV(self._apply(cache.cache_read, block_name(block), read_index, scope))

    def cache_write(
        self, block: BlockRV | str, write_index: int = 0, scope: str = "local"
    ) -> BlockRV:
        from ir.schedule import cache

        return BlockRV(self._apply(cache.cache_write, block_name(block), write_index, scope))

    def accumulate_at(self, block: BlockRV | str, loop: LoopRV | str) -> BlockRV:
        from ir.schedule import cache

        return BlockRV(self._apply(cache.accumulate_at, block_name(block), loop_name(loop)))

    # -- reductions ---------------------------------------------------------------

    def decompose_reduction(self, block: BlockRV | str, loop: LoopRV | str) -> BlockRV:
        from ir.schedule import reduction

        return BlockRV(
            self._apply(reduction.decompose_reduction, block_name(block), loop_name(loop))
        )

    def rfactor(self, loop: LoopRV | str, factor_axis: int = 0) -> BlockRV:
        from ir.schedule import reduction

        return BlockRV(self._apply(reduction.rfactor, loop_name(loop), factor_axis))

    # -- layout -------------------------------------------------------------------

    def transform_layout(
        self, block: BlockRV | str, buffer: str, index_map: Any, inverse: Any = None
    ) -> BlockRV:
        """Pack `buffer` (read by `block`) into the layout `index_map` gives; returns the packing
        block (which iterates over the packed layout when `inverse`, packed -> source, is given)."""
        from ir.schedule import layout

        return BlockRV(
            self._apply(layout.transform_layout, block_name(block), buffer, index_map, inverse)
        )

    def read_through(self, block: BlockRV | str, buffer: str, packed: str, index_map: Any) -> None:
        """Make `block` read `buffer` from `packed`, the copy another block packs through
        `index_map` (`layout.read_through`)."""
        from ir.schedule import layout

        self._apply_program(layout.read_through, block_name(block), buffer, packed, index_map)

    def pack_panels(self, block: BlockRV | str, buffer: str, width: int) -> BlockRV:
        """Pack `buffer` into column panels of `width` (`layout.pack_panels`); returns the packing block."""
        from ir.schedule import layout

        return BlockRV(self._apply(layout.pack_panels, block_name(block), buffer, width))

    # -- tensor intrinsics ----------------------------------------------------------

    def blockize(self, loop: LoopRV | str) -> BlockRV:
        """The loops at and below `loop` become one block (`blockize.blockize`); returns it."""
        from ir.schedule.blockize import blockize

        return BlockRV(self._apply(blockize, loop_name(loop)))

    def pad_einsum(self, block: BlockRV | str, padding: Sequence[int]) -> None:
        """Pad a sum-of-products block's axes to multiples of `padding` (`pad.pad_einsum`)."""
        from ir.schedule.pad import pad_einsum

        self._apply(pad_einsum, block_name(block), [int(p) for p in padding])

    def tensorize(
        self,
        target: BlockRV | LoopRV | str,
        intrinsic: str,
        features: Sequence[str] | None = None,
    ) -> BlockRV:
        """Replace a blockized block's loops (or the loops at a loop) by `intrinsic`.

        A plain string names a block. `features` (the target's) are checked when given.
        Returns the tensorized block.
        """
        from ir.schedule.tensorize import tensorize

        is_block = not isinstance(target, LoopRV)
        name = target.name if isinstance(target, BlockRV | LoopRV) else target
        return BlockRV(
            self._apply(
                lambda p: tensorize(p, name, intrinsic, is_block=is_block, features=features)
            )
        )


__all__ = ["BlockRV", "LoopRV", "Schedule", "ScheduleError"]
