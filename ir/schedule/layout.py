"""Layout: pack a buffer a block reads into another layout, computed inside the kernel.

The point is GEMM's B operand: read along k for a fixed column panel, B[k, n] is
strided by n; packed as Bp[n // 32, k, n % 32] each panel is contiguous, so the
inner loop streams it (DESIGN.md's kernel-quality gate).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ir.arith import bound
from ir.build import point_regions
from ir.errors import IRError
from ir.evaluate import eval_expr
from ir.expr import Binary, Buffer, Const, Expr, IterVar, Load, Var, as_index, minimum, render
from ir.lower.simplify import simplify_expr
from ir.node import Node, map_children, walk
from ir.program import (
    TRUE,
    Block,
    BlockRealize,
    BufferRegion,
    BufferStore,
    For,
    Program,
    Range,
    SeqStmt,
    seq,
)
from ir.schedule.analysis import writers
from ir.schedule.state import ScheduleError, find_block, fresh_names, replace_realize, root_index
from ir.visit import substitute

_MAX_CHECKED_POINTS = 1 << 24


@dataclass(frozen=True, slots=True, eq=True)
class IndexMap(Node):
    """(src...) -> (dst...): where element src of a buffer goes in the new layout."""

    src: tuple[Var, ...]
    dst: tuple[Expr, ...]

    @staticmethod
    def from_callable(ndim: int, fn: Callable[..., Sequence[Expr | int]]) -> IndexMap:
        src = tuple(Var(f"x{d}") for d in range(ndim))
        dst = tuple(as_index(e) for e in fn(*src))
        return IndexMap(src, dst)

    def apply(self, indices: Sequence[Expr]) -> tuple[Expr, ...]:
        mapping = dict(zip(self.src, indices))
        return tuple(substitute(e, mapping) for e in self.dst)  # type: ignore[misc]


def panel_map(factor: int, ndim: int = 2) -> IndexMap:
    """B[k, n] -> Bp[n // factor, k, n % factor]: column panels of width `factor`.

    For `ndim` > 2 the last axis is split the same way and its panel index goes
    first: W[a, b, c, n] -> Wp[n // factor, a, b, c, n % factor].
    """
    if factor < 1 or ndim < 1:
        raise ScheduleError(f"panel_map: panel width {factor} and rank {ndim} must be positive")
    return IndexMap.from_callable(ndim, lambda *x: (x[-1] // factor, *x[:-1], x[-1] % factor))


def transform_layout(
    program: Program,
    block: str,
    buffer: str,
    index_map: IndexMap | Callable[..., Sequence[Expr | int]],
    inverse: IndexMap | Callable[..., Sequence[Expr | int]] | None = None,
) -> tuple[Program, str]:
    """Make `block` read `buffer` through a packed copy laid out by `index_map`.

        for k, n: with block("C"): ... B[vk, vj] ...
      transform_layout("C", "B", lambda k, n: (n // 32, k, n % 32)) ->
        B_packed = alloc(float32[N/32, K, 32])
        for ax0, ax1: with block("B_packed"): B_packed[vax1 // 32, vax0, vax1 % 32] = B[vax0, vax1]
        ... with block("C"): ... B_packed[vj // 32, vk, vj % 32] ...

    The map must send the buffer's elements to distinct places (checked over the
    whole domain) with non-negative indices; the packed copy is written once per
    call by its own block, before the first block that reads `buffer`.

    With `inverse` (packed indices -> source indices) the copy iterates over the
    packed layout instead: its stores are contiguous (the inner loops of a tile
    layout such as vnni's [N/16][K/4][16][4] write 64 consecutive bytes, which
    LLVM turns into a few vector loads and shuffles instead of 64 scattered byte
    stores). The packed layout must then have no holes and `inverse` must undo
    `index_map` (checked on a sample of points).
    """
    r, src_buf, shape = _source(program, block, buffer)
    imap = (
        index_map
        if isinstance(index_map, IndexMap)
        else _from_callable(block, len(shape), index_map)
    )
    if len(imap.src) != len(shape):
        raise ScheduleError(
            f'block "{block}": index map takes {len(imap.src)} indices but {buffer} has {len(shape)} dimensions'
        )
    new_shape = _packed_shape(block, buffer, imap, shape)
    _check_injective(block, buffer, imap, shape)

    names = fresh_names(program)
    packed = Buffer(
        names.fresh(f"{buffer}_packed"), tuple(Const(s, "int64") for s in new_shape), src_buf.dtype
    )
    # the packing block, in its own nest over the source domain (or the packed one)
    domain = shape if inverse is None else tuple(new_shape)
    if inverse is not None:
        if not isinstance(inverse, IndexMap):
            inverse = _from_callable(block, len(imap.dst), inverse)
        _check_inverse(block, buffer, imap, inverse, shape, new_shape)
    loop_vars = [Var(names.fresh(f"ax{d}")) for d in range(len(domain))]
    iter_vars = [
        IterVar(Var(names.fresh(f"v{lv.name}")), Const(s, "int64"))
        for lv, s in zip(loop_vars, domain)
    ]
    if inverse is None:
        src_idx = tuple(iv.var for iv in iter_vars)
        dst_idx = tuple(simplify_expr(e) for e in imap.apply(src_idx))
    else:
        dst_idx = tuple(iv.var for iv in iter_vars)
        src_idx = tuple(simplify_expr(e) for e in inverse.apply(dst_idx))
    nest = _copy_nest(packed, src_buf, src_idx, dst_idx, loop_vars, iter_vars)
    return _install(program, r, buffer, imap, packed, nest), packed.name


def pack_panels(program: Program, block: str, buffer: str, width: int) -> tuple[Program, str]:
    """`transform_layout` by `panel_map(width)`, the copy iterating over the packed layout.

        for ax0, ax1, ax2 in grid(N/w, K, w):
          with block("B_packed"): B_packed[v0, v1, v2] = B[v1, v0 * w + v2]

    Written at its own iteration variables, the copy is a block `compute_at` can
    move: under the consumer's column-tile loop it packs only the panels that tile
    reads, while they are hot (dense 128x768->3072 reads 9.4 MB of W; packed whole
    up front it goes to memory and back once more). Its last loop is one panel
    row, contiguous in both buffers, so it vectorizes. Where `width` does not
    divide the last extent, the last panel's padding repeats the last column
    (clamped: no read out of bounds; nobody reads the padding).
    """
    r, src_buf, shape = _source(program, block, buffer)
    imap = panel_map(width, len(shape))
    n = shape[-1]
    new_shape = (-(-n // width), *shape[:-1], width)
    names = fresh_names(program)
    packed = Buffer(
        names.fresh(f"{buffer}_packed"), tuple(Const(s, "int64") for s in new_shape), src_buf.dtype
    )
    loop_vars = [Var(names.fresh(f"ax{d}")) for d in range(len(new_shape))]
    iter_vars = [
        IterVar(Var(names.fresh(f"v{lv.name}")), Const(s, "int64"))
        for lv, s in zip(loop_vars, new_shape)
    ]
    dst_idx = tuple(iv.var for iv in iter_vars)
    column: Expr = simplify_expr(dst_idx[0] * width + dst_idx[-1])
    if n % width:
        column = minimum(column, Const(n - 1, "int64"))
    src_idx = (*dst_idx[1:-1], column)
    nest = _copy_nest(packed, src_buf, src_idx, dst_idx, loop_vars, iter_vars)
    return _install(program, r, buffer, imap, packed, nest), packed.name


def _source(
    program: Program, block: str, buffer: str
) -> tuple[BlockRealize, Buffer, tuple[int, ...]]:
    """The block and the buffer it reads that is to be packed (which it must not write)."""
    r = find_block(program, block)
    reads = [rd for rd in r.block.reads if rd.buffer.name == buffer]
    if not reads:
        raise ScheduleError(f'block "{block}": does not read a buffer named {buffer}')
    if any(w.buffer.name == buffer for w in r.block.writes):
        raise ScheduleError(
            f'block "{block}": writes {buffer}; only a buffer it only reads can be packed'
        )
    return r, reads[0].buffer, reads[0].buffer.concrete_shape()


def _copy_nest(
    packed: Buffer,
    src_buf: Buffer,
    src_idx: tuple[Expr, ...],
    dst_idx: tuple[Expr, ...],
    loop_vars: Sequence[Var],
    iter_vars: Sequence[IterVar],
) -> For:
    """One loop per iteration variable around the block `packed[dst_idx] = src[src_idx]`."""
    store = BufferStore(packed, Load(src_buf, src_idx), dst_idx)
    pack = Block(
        packed.name,
        tuple(iter_vars),
        point_regions([Load(src_buf, src_idx)]),
        (BufferRegion(packed, tuple(Range(i, Const(1, "int64")) for i in dst_idx)),),
        store,
    )
    nest: For | BlockRealize = BlockRealize(tuple(loop_vars), TRUE, pack)
    for lv, iv in reversed(list(zip(loop_vars, iter_vars))):
        nest = For(lv, iv.extent, "serial", nest)
    assert isinstance(nest, For)
    return nest


def read_through(
    program: Program,
    block: str,
    buffer: str,
    packed: str,
    index_map: IndexMap | Callable[..., Sequence[Expr | int]],
) -> Program:
    """Make `block` read `buffer` from `packed`, a copy of it another block already packs
    through `index_map` (`transform_layout`'s), so one copy serves two readers.

        W_packed[..] = W[..]  (packing)                 W_packed[..] = W[..]
        wsum[j] += W[k, j]                        ->    wsum[j] += W_packed[map(k, j)]

    dense_int8's column sums of W then read the layout its product reads, where one
    instruction sums a packed row (`colsum_int8x4`). The packing block must copy
    `buffer` whole and plainly (checked on a sample against `index_map`); `block` moves
    to just after the statement holding the copy, in their innermost common sequence,
    where nothing it jumps over touches what it reads or writes.
    """
    _, _, shape = _source(program, block, buffer)
    imap = (
        index_map
        if isinstance(index_map, IndexMap)
        else _from_callable(block, len(shape), index_map)
    )
    copies = writers(program, packed)
    if len(copies) != 1:
        raise ScheduleError(f'block "{block}": {packed} is not written by exactly one block')
    copy = copies[0]
    store = copy.block.body
    if not (
        isinstance(store, BufferStore)
        and isinstance(store.value, Load)
        and store.value.buffer.name == buffer
    ):
        raise ScheduleError(
            f'block "{block}": block "{copy.block.name}" does not copy {buffer} into {packed} '
            "element for element"
        )
    _check_copy(block, imap, copy.block, store, shape)
    program = _move_after(program, copy.block.name, block)
    return _redirect(program, find_block(program, block), buffer, imap, store.buffer)


def _check_copy(
    block: str, imap: IndexMap, copy: Block, store: BufferStore, shape: tuple[int, ...]
) -> None:
    """The copy writes each element of the source once, where `imap` sends it (sampled)."""
    domain = [int(iv.extent.value) for iv in copy.iter_vars]  # type: ignore[attr-defined]
    if math.prod(domain) != math.prod(shape) or math.prod(
        store.buffer.concrete_shape()
    ) != math.prod(shape):
        raise ScheduleError(
            f'block "{block}": block "{copy.name}" does not copy every element once'
        )
    points = math.prod(domain)
    flat = np.unique(
        np.concatenate([np.arange(0, points, max(1, points // 4096)), [points - 1]])
    ).astype(np.int64)
    env = {
        iv.var: np.asarray(x, dtype=np.int64)
        for iv, x in zip(copy.iter_vars, np.unravel_index(flat, domain))
    }
    mask = np.ones(flat.shape, dtype=bool)

    def values(exprs: Sequence[Expr], at: dict) -> list[np.ndarray]:
        return [np.broadcast_to(eval_expr(e, at, {}, mask), flat.shape) for e in exprs]

    src = values(store.value.indices, env)  # type: ignore[attr-defined]
    dst = values(store.indices, env)
    mapped = values(imap.dst, {v: x for v, x in zip(imap.src, src)})
    if len(mapped) != len(dst) or any(not np.array_equal(a, b) for a, b in zip(mapped, dst)):
        raise ScheduleError(
            f'block "{block}": block "{copy.name}" does not pack by the index map given'
        )


def _buffers(stmt: Node, kind: str) -> set[str]:
    """The buffers the blocks in `stmt` read or write (`kind`: "reads" / "writes")."""
    return {
        region.buffer.name
        for n in walk(stmt)
        if isinstance(n, BlockRealize)
        for region in getattr(n.block, kind)
    }


def _holds(stmt: Node, block: str) -> bool:
    return any(isinstance(n, BlockRealize) and n.block.name == block for n in walk(stmt))


def _move_after(program: Program, first: str, block: str) -> Program:
    """Move the statement holding `block` to just after the one holding `first`, in their
    innermost common sequence (nothing moves if it is there already)."""

    def place(n: Node) -> Node:
        if not isinstance(n, SeqStmt):
            return map_children(n, place) if _holds(n, block) and _holds(n, first) else n
        i = next((k for k, s in enumerate(n.stmts) if _holds(s, first)), None)
        j = next((k for k, s in enumerate(n.stmts) if _holds(s, block)), None)
        if i is None or j is None:
            return n
        if i == j:
            return replace(n, stmts=tuple(place(s) if k == i else s for k, s in enumerate(n.stmts)))
        if j > i:
            return n
        moved, between = n.stmts[j], n.stmts[j + 1 : i + 1]
        touched = set().union(*(_buffers(s, "reads") | _buffers(s, "writes") for s in between))
        written = set().union(*(_buffers(s, "writes") for s in between))
        if _buffers(moved, "writes") & touched or _buffers(moved, "reads") & written:
            raise ScheduleError(
                f'block "{block}": cannot move it after block "{first}": a statement between '
                "them uses what it reads or writes"
            )
        stmts = (*n.stmts[:j], *between, moved, *n.stmts[i + 1 :])
        return replace(n, stmts=stmts)

    return replace(program, body=place(program.body))


def _redirect(
    program: Program, r: BlockRealize, buffer: str, imap: IndexMap, packed: Buffer
) -> Program:
    """The block's reads of `buffer` redirected to `packed` through `imap`."""
    block = r.block.name

    def redirect(n: Node) -> Node:
        if isinstance(n, Load) and n.buffer.name == buffer:
            return Load(packed, tuple(simplify_expr(e) for e in imap.apply(n.indices)))
        return map_children(n, redirect)

    new_block = r.block.__class__(
        name=r.block.name,
        iter_vars=r.block.iter_vars,
        reads=tuple(
            BufferRegion(
                packed,
                tuple(
                    Range(i, Const(1, "int64")) for i in imap.apply(tuple(x.min for x in rd.region))
                ),
            )
            if rd.buffer.name == buffer
            else rd
            for rd in r.block.reads
        ),
        writes=r.block.writes,
        body=redirect(r.block.body),  # type: ignore[arg-type]
        init=r.block.init,
        alloc_buffers=r.block.alloc_buffers,
        annotations=r.block.annotations,
    )
    return replace_realize(program, block, lambda x: BlockRealize(x.values, x.predicate, new_block))


def _install(
    program: Program, r: BlockRealize, buffer: str, imap: IndexMap, packed: Buffer, nest: For
) -> Program:
    """Redirect the block's reads of `buffer` to `packed` (through `imap`) and place the copy's
    nest before the first root statement reading it (after every writer of it, if it is an
    intermediate)."""
    block = r.block.name
    program = _redirect(program, r, buffer, imap, packed)
    stmts = list(program.body.stmts) if isinstance(program.body, SeqStmt) else [program.body]
    at = root_index(program, block)
    for w in writers(program, buffer):
        if root_index(program, w.block.name) >= at:
            raise ScheduleError(
                f'block "{block}": {buffer} is written after it is read; cannot pack it here'
            )
    stmts.insert(at, nest)  # type: ignore[arg-type]
    return replace(program, body=seq(*stmts), allocs=(*program.allocs, packed))


def _from_callable(block: str, ndim: int, fn: Callable[..., Sequence[Expr | int]]) -> IndexMap:
    try:
        return IndexMap.from_callable(ndim, fn)
    except (IRError, TypeError) as e:
        raise ScheduleError(f'block "{block}": invalid index map: {e}') from None


def _packed_shape(block: str, buffer: str, imap: IndexMap, shape: tuple[int, ...]) -> list[int]:
    env = {v: (0, s - 1) for v, s in zip(imap.src, shape)}
    out = []
    for e in imap.dst:
        if any(isinstance(v, Var) and v not in env for v in walk(e)):
            raise ScheduleError(
                f'block "{block}": index map output {render(e)} uses an unknown variable'
            )
        rng = bound(simplify_expr(e, env), env)
        if rng is None:
            raise ScheduleError(
                f'block "{block}": cannot bound index map output {render(e)} for {buffer}'
            )
        if rng[0] < 0:
            raise ScheduleError(f'block "{block}": index map output {render(e)} can be negative')
        out.append(rng[1] + 1)
    return out


def _provably_injective(imap: IndexMap) -> bool:
    """True when every source index can be read back from the outputs.

    That holds when each source variable is an output itself, or appears as
    both `x // c` and `x % c` with the same constant c > 0 (x = c·(x // c) + x % c)
    — the panel maps of packing. A cheap proof for the maps the tuner makes
    hundreds of times; anything else is enumerated by `_check_injective`.
    """
    plain: set[Var] = set()
    parts: dict[tuple[Var, int], set[str]] = {}
    for e in imap.dst:
        if isinstance(e, Var):
            plain.add(e)
        elif (
            isinstance(e, Binary)
            and e.op in ("floordiv", "floormod")
            and isinstance(e.a, Var)
            and isinstance(e.b, Const)
            and int(e.b.value) > 0
        ):
            parts.setdefault((e.a, int(e.b.value)), set()).add(e.op)
    recovered = plain | {v for (v, _), ops in parts.items() if ops == {"floordiv", "floormod"}}
    return set(imap.src) <= recovered


def _check_injective(block: str, buffer: str, imap: IndexMap, shape: tuple[int, ...]) -> None:
    if _provably_injective(imap):
        return
    points = math.prod(shape)
    if points > _MAX_CHECKED_POINTS:
        raise ScheduleError(
            f'block "{block}": {buffer} has {points} elements, too many to check the index map is one-to-one'
        )
    grids = np.meshgrid(*(np.arange(s, dtype=np.int64) for s in shape), indexing="ij")
    env = {v: g for v, g in zip(imap.src, grids)}
    mask = np.ones(shape, dtype=bool)
    cols = [np.broadcast_to(eval_expr(e, env, {}, mask), shape).ravel() for e in imap.dst]
    # Each output index tuple as one row-major number over the outputs' ranges
    # (non-negative, checked above): one-to-one iff no number repeats. A linear
    # pass (bincount), far cheaper than sorting the tuples (np.unique over rows).
    linear = np.zeros(points, dtype=np.int64)
    span = 1
    for col in reversed(cols):
        extent = int(col.max()) + 1 if col.size else 1
        linear += col.astype(np.int64) * span
        span *= extent
    if span <= 8 * points + 1024:
        repeated = points > 0 and int(np.bincount(linear, minlength=1).max()) > 1
    else:
        repeated = len(np.unique(linear)) != points
    if repeated:
        raise ScheduleError(
            f'block "{block}": the index map sends two elements of {buffer} to the same place'
        )


def _check_inverse(
    block: str,
    buffer: str,
    imap: IndexMap,
    inverse: IndexMap,
    shape: tuple[int, ...],
    new_shape: list[int],
) -> None:
    """`inverse` undoes `imap` (on the corners and a strided sample of the domain) and the
    packed layout has exactly the source's elements (no holes to leave unwritten)."""
    if len(inverse.src) != len(new_shape) or len(inverse.dst) != len(shape):
        raise ScheduleError(
            f'block "{block}": the inverse map must take {len(new_shape)} packed indices '
            f"and give {len(shape)} indices of {buffer}"
        )
    if math.prod(new_shape) != math.prod(shape):
        raise ScheduleError(
            f'block "{block}": the packed layout of {buffer} has {math.prod(new_shape)} places '
            f"for {math.prod(shape)} elements; iterate over the source (no inverse)"
        )
    points = math.prod(shape)
    flat = np.unique(
        np.concatenate([np.arange(0, points, max(1, points // 4096)), [points - 1]])
    ).astype(np.int64)
    src = np.unravel_index(flat, shape)
    env = {v: np.asarray(x, dtype=np.int64) for v, x in zip(imap.src, src)}
    mask = np.ones(flat.shape, dtype=bool)
    dst = [np.broadcast_to(eval_expr(e, env, {}, mask), flat.shape) for e in imap.dst]
    back_env = {v: np.asarray(x, dtype=np.int64) for v, x in zip(inverse.src, dst)}
    back = [np.broadcast_to(eval_expr(e, back_env, {}, mask), flat.shape) for e in inverse.dst]
    if any(not np.array_equal(b, x) for b, x in zip(back, src)):
        raise ScheduleError(
            f'block "{block}": the inverse map does not undo the index map of {buffer}'
        )
