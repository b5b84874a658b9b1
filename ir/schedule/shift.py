"""Column tiles shifted so that a misaligned input's tile rows start on a cache line.

A kernel that streams an input unpacked reads, per column tile, one slice of each of its
rows. When the input starts 16 bytes past a 64-byte line, a 48-float slice spans four
lines instead of three (docs/decisions.md, "the streamed weight's gap is line traffic").
Shifting the tiles by the input's offset in elements — the first tile starts `s` columns
before the data, one more tile ends past it, both guarded — starts every slice on a line
again; partitioning (`ir.lower.partition`) peels the guarded edges, so the tiles between
carry no guard. Codegen compiles one variant per offset it is called with and dispatches
on the input's address (`codegen.kernel`).

    for j_0 in range(64):                      for j_0 in range(65):
      for j_1 in vectorized(48):        ->       for j_1 in vectorized(48):
        vj = j_0 * 48 + j_1                        vj = j_0 * 48 + j_1 - 4
                                                   where(0 <= vj < 3072)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ir import dtype as dt
from ir.arith import linear_in
from ir.errors import LoomtuneError
from ir.expr import Binary, Const, Expr, Load, Var, binary, logical_and
from ir.node import Node, map_children, walk
from ir.program import TRUE, BlockRealize, For, Program, Stmt
from ir.schedule.state import all_blocks, find_loop, loops_above, replace_loop
from ir.visit import substitute

LINE_BYTES = 64
MIN_TILES = 32
"""Fewest column tiles a shift is compiled for: the shift adds a tile, and what a tile costs
besides its columns (re-reading the other operand, edge vectors) made 4- and 8-tile
convolutions slower than the lines saved (docs/decisions.md, "Shifted tiles")."""
SHIFTED = "loomtune.shifted"
"""Program attribute: the columns its tiles were shifted by (a shifted program is not
shifted again)."""


class ShiftRefused(LoomtuneError):
    """The tiles of a program cannot be shifted (a loop fused or bound other than linearly)."""


@dataclass(frozen=True)
class Streamed:
    """An input read unpacked along the vectorized axis, and the tile loop to shift for it."""

    param: int
    """Position of the input among the program's parameters (call order)."""
    loop: str
    """The outermost loop over the input's column tiles (at least `MIN_TILES` of them)."""
    columns: int
    """Columns per iteration of `loop`."""
    itemsize: int

    def shift_for(self, address: int) -> int:
        """Columns to shift by for an input at `address`: its offset in the line, in elements
        (0 where it is not element-aligned: shifting could not help)."""
        offset = address % LINE_BYTES
        return 0 if offset % self.itemsize else offset // self.itemsize


def streamed_input(program: Program) -> Streamed | None:
    """The largest input a reduction block reads straight from the caller's array,
    contiguously along its vectorized innermost loop, in tiles whose rows all start alike in
    a line; None when there is none (packed operands, no tiles, rows of odd length)."""
    if program.attr(SHIFTED) is not None:
        return None
    best: tuple[int, Streamed] | None = None
    params = {b.name: i for i, b in enumerate(program.inputs)}
    for r in all_blocks(program):
        loops = loops_above(program, r.block.name)
        if not r.block.is_reduction or not loops or loops[-1].kind != "vectorized":
            continue  # a copy (a pack, a write-back) streams its input once: no tiles re-read
        mapping: dict[Var, Expr] = {iv.var: v for iv, v in zip(r.block.iter_vars, r.values)}
        for ld in (n for n in walk(r.block.body) if isinstance(n, Load)):
            found = _streamed(ld, mapping, loops, params)
            if found is not None:
                size = int(np.prod(ld.buffer.concrete_shape()))
                if best is None or size > best[0]:
                    best = (size, found)
    return None if best is None else best[1]


def _streamed(
    ld: Load, mapping: dict[Var, Expr], loops: list[For], params: dict[str, int]
) -> Streamed | None:
    buf = ld.buffer
    if buf.name not in params or len(ld.indices) < 1:
        return None
    itemsize = dt.to_numpy(buf.dtype).itemsize
    shape = buf.concrete_shape()
    if LINE_BYTES % itemsize or (len(shape) > 1 and shape[-1] * itemsize % LINE_BYTES):
        return None
    column = substitute(ld.indices[-1], mapping)
    if any(linear_in(substitute(i, mapping), loops[-1].var)[0] != 0 for i in ld.indices[:-1]):
        return None  # the vectorized loop walks another axis too (or not linearly)
    if linear_in(column, loops[-1].var)[0] != 1:
        return None
    for lp in loops[:-1]:
        stride, _ = linear_in(column, lp.var)
        if stride is None:
            return None
        if stride and isinstance(lp.extent, Const) and int(lp.extent.value) > 1:
            if stride * itemsize % LINE_BYTES or lp.kind == "parallel":
                return None  # tiles off the lines; or one more tile would unbalance threads
            if int(lp.extent.value) < MIN_TILES:
                return None
            return Streamed(params[buf.name], lp.var.name, stride, itemsize)
    return None


def shift_tiles(program: Program, streamed: Streamed, shift: int) -> Program:
    """`program` with the tiles of `streamed.loop` starting `shift` columns earlier: every
    block under the loop binds its column `shift` lower and is guarded to the axis, and the
    loop runs as many more iterations as the shift needs. Raises ShiftRefused."""
    if shift == 0:
        return program
    loop = find_loop(program, streamed.loop)
    c = streamed.columns
    if not 0 < shift < c or not isinstance(loop.extent, Const):
        raise ShiftRefused(f"loop {loop.var.name}: cannot shift {c}-column tiles by {shift}")

    def shifted(r: BlockRealize) -> BlockRealize:
        values, guards = [], []
        for iv, v in zip(r.block.iter_vars, r.values):
            stride, _ = linear_in(v, loop.var)
            if stride == 0:
                values.append(v)
                continue
            if stride != c or iv.kind != "spatial":
                raise ShiftRefused(
                    f'block "{r.block.name}": {iv.var.name} is bound to loop {loop.var.name} '
                    f"other than as its {c}-column tiles"
                )
            moved = v - shift
            values.append(moved)
            guards += [binary("ge", moved, 0), binary("lt", moved, iv.extent)]
        if not guards:
            if r.block.is_reduction:
                raise ShiftRefused(
                    f'block "{r.block.name}" reduces under loop {loop.var.name} but ignores it'
                )
            return r  # a copy that ignores the tiles: the extra tile runs it once more, alike
        predicate = _shift_predicate(r.predicate, loop.var, c, shift)
        terms = guards if predicate == TRUE else [predicate, *guards]
        return replace(r, values=tuple(values), predicate=logical_and(*terms))

    def visit(n: Node) -> Node:
        if isinstance(n, BlockRealize):
            return shifted(n)  # blocks are the loop tree's leaves: nested ones keep theirs
        return map_children(n, visit) if isinstance(n, Stmt) else n

    def widened(lp: For) -> For:
        extra = -(-shift // c)
        extent = Const(int(lp.extent.value) + extra, "int64")  # type: ignore[attr-defined]
        return replace(lp, extent=extent, body=visit(lp.body))

    shifted_program = replace_loop(program, loop.var.name, widened)
    return replace(shifted_program, attrs=(*program.attrs, (SHIFTED, shift)))


def _shift_predicate(e: Expr, var: Var, columns: int, shift: int) -> Expr:
    """A predicate's comparisons of linear forms in `var` moved with the columns."""
    if isinstance(e, Binary) and e.op == "and":
        return logical_and(
            _shift_predicate(e.a, var, columns, shift), _shift_predicate(e.b, var, columns, shift)
        )
    if isinstance(e, Binary) and e.op in ("lt", "le", "gt", "ge", "eq", "ne"):
        return Binary(e.op, _moved(e.a, var, columns, shift), _moved(e.b, var, columns, shift))
    if any(n == var for n in walk(e)):
        raise ShiftRefused(f"predicate {e} uses loop {var.name} other than in comparisons")
    return e


def _moved(e: Expr, var: Var, columns: int, shift: int) -> Expr:
    stride, _ = linear_in(e, var)
    if stride == 0:
        return e
    if stride is None or stride % columns:
        raise ShiftRefused(f"{e}: loop {var.name} appears other than as whole tiles")
    return e - (stride // columns) * shift
