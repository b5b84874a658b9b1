"""Cache stages: copy a buffer into a new one a block reads, or write through a new one.

`cache_read` gives a block its own copy of an input (the start of a packed or
local tile once compute_at moves the copy into a loop); `cache_write` makes a
block accumulate into a fresh buffer that a write-back block copies out (the
local accumulator tile of a GEMM, once reverse_compute_at moves the write-back
into the tile loop and lowering compacts the buffer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ir.build import NameSupply
from ir.expr import Buffer, Const, Expr, IterVar, Load, Var
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
    Stmt,
    seq,
)
from ir.schedule.analysis import bindings, loop_ranges, readers, writers
from ir.schedule.region import (
    check_const_extents,
    check_loop_kind,
    const_ranges,
    exact_box,
    inner_loops,
    loads_of,
    loop_path,
    new_nest,
)
from ir.schedule.state import (
    ScheduleError,
    blocks_under,
    find_block,
    fresh_names,
    replace_loop,
    replace_realize,
    root_index,
)
from ir.visit import substitute

SCOPES = ("global", "local")


# ---------------------------------------------------------------------------
# Helpers shared with reduction.py


def point_region(buffer: Buffer, indices: Sequence[Expr]) -> BufferRegion:
    """The one-element region `buffer[indices]`."""
    return BufferRegion(buffer, tuple(Range(i, Const(1, "int64")) for i in indices))


def copy_block(
    name: str, ivs: Sequence[IterVar], src: Buffer, dst: Buffer, idx: Sequence[Expr]
) -> Block:
    """A block copying `src[idx]` to `dst[idx]` (a cache's fill or write-back)."""
    idx = tuple(idx)
    return Block(
        name,
        tuple(ivs),
        (point_region(src, idx),),
        (point_region(dst, idx),),
        BufferStore(dst, Load(src, idx), idx),
    )


def root_stmts(program: Program) -> list[Stmt]:
    body = program.body
    return list(body.stmts) if isinstance(body, SeqStmt) else [body]


def insert_root(
    program: Program, at: int, stmt: Stmt, new_allocs: Sequence[Buffer] = ()
) -> Program:
    """`stmt` becomes the at-th top-level statement; `new_allocs` join the program's allocs."""
    stmts = root_stmts(program)
    stmts.insert(at, stmt)
    return replace(program, body=seq(*stmts), allocs=(*program.allocs, *new_allocs))


def new_domain(
    names: NameSupply, extents: Sequence[tuple[Expr, str]]
) -> tuple[list[Var], list[IterVar]]:
    """Fresh loops ax0, ax1, ... and iteration variables vax0, ... over `extents` (extent, kind)."""
    loops = [Var(names.fresh(f"ax{d}")) for d in range(len(extents))]
    ivs = [
        IterVar(Var(names.fresh(f"v{lp.name}")), ext, kind)
        for lp, (ext, kind) in zip(loops, extents)
    ]
    return loops, ivs


def wrap_nest(block: Block, loops: Sequence[Var]) -> For:
    """A naive nest: one serial loop per iteration variable, each bound to its loop."""
    stmt: Stmt = BlockRealize(tuple(loops), TRUE, block)
    for lp, iv in reversed(list(zip(loops, block.iter_vars))):
        stmt = For(lp, iv.extent, "serial", stmt)
    assert isinstance(stmt, For)
    return stmt


def redirect_loads(node: Node, old: str, new: Buffer) -> Node:
    """Every load of buffer `old` reads `new` instead (same indices)."""

    def visit(n: Node) -> Node:
        if isinstance(n, Load) and n.buffer.name == old:
            return Load(new, tuple(visit(i) for i in n.indices))  # type: ignore[misc]
        return map_children(n, visit)

    return visit(node)


def redirect_stores(node: Node, old: str, new: Buffer) -> Node:
    """Every store to `old` (and every load of it) goes to `new` instead."""

    def visit(n: Node) -> Node:
        if isinstance(n, BufferStore) and n.buffer.name == old:
            return BufferStore(new, visit(n.value), tuple(visit(i) for i in n.indices))  # type: ignore[arg-type,misc]
        if isinstance(n, Load) and n.buffer.name == old:
            return Load(new, tuple(visit(i) for i in n.indices))  # type: ignore[misc]
        return map_children(n, visit)

    return visit(node)


def program_buffer(program: Program, name: str) -> Buffer | None:
    """The parameter or call-wide intermediate called `name` (None for a block-local one)."""
    for b in (*program.params, *program.allocs):
        if b.name == name:
            return b
    return None


def _check_scope(block: str, scope: str) -> None:
    if scope not in SCOPES:
        raise ScheduleError(
            f'block "{block}": unknown storage scope {scope!r}; expected one of {", ".join(SCOPES)}'
        )


# ---------------------------------------------------------------------------
# cache_read


def cache_read(program: Program, block: str, read_index: int, scope: str) -> tuple[Program, str]:
    """Make `block` read its read_index-th buffer through a fresh copy in `scope`.

        for i, j, r: with block("C"): ... A[vi, vr] ...
      cache_read("C", 0, "global") ->
        A_global = alloc(float32[M, K])
        for ax0, ax1: with block("A_global"): A_global[vax0, vax1] = A[vax0, vax1]
        for i, j, r: with block("C"): ... A_global[vi, vr] ...

    The copy covers the whole buffer, in its own nest placed before the first
    top-level nest that reads the buffer (so after every producer of it); only
    `block` reads the copy. Returns the copy block's name (that of the new buffer).
    """
    r = find_block(program, block)
    reads = r.block.reads
    if (
        isinstance(read_index, bool)
        or not isinstance(read_index, int)
        or not 0 <= read_index < len(reads)
    ):
        raise ScheduleError(
            f'block "{block}": read index {read_index!r} out of range; it reads {len(reads)} regions'
        )
    _check_scope(block, scope)
    name = reads[read_index].buffer.name
    if any(w.buffer.name == name for w in r.block.writes):
        raise ScheduleError(
            f'block "{block}": writes {name} itself; only a buffer it only reads can be cached'
        )
    src = program_buffer(program, name)
    if src is None:
        raise ScheduleError(
            f'block "{block}": {name} is local to a block; cannot cache it at the top level'
        )

    # Where the copy goes: after the last top-level nest writing the buffer, before
    # the first one reading it from then on (which holds `block` or comes before it).
    last_write = max(
        (root_index(program, w.block.name) for w in writers(program, src.name)), default=-1
    )
    here = root_index(program, block)
    if here <= last_write:
        raise ScheduleError(
            f'block "{block}": {src.name} is written in the same top-level nest or later; '
            "cannot copy it before the block"
        )
    at = min(
        i
        for i in (root_index(program, x.block.name) for x in readers(program, src.name))
        if i > last_write
    )

    names = fresh_names(program)
    cache = Buffer(names.fresh(f"{src.name}_{scope}"), src.shape, src.dtype, scope)
    loops, ivs = new_domain(names, [(s, "spatial") for s in src.shape])
    idx = tuple(iv.var for iv in ivs)
    copy = copy_block(cache.name, ivs, src, cache, idx)

    new_block = replace(
        r.block,
        reads=tuple(
            replace(rd, buffer=cache) if rd.buffer.name == src.name else rd for rd in reads
        ),
        body=redirect_loads(r.block.body, src.name, cache),
        init=None if r.block.init is None else redirect_loads(r.block.init, src.name, cache),
    )
    program = replace_realize(program, block, lambda x: replace(x, block=new_block))
    return insert_root(program, at, wrap_nest(copy, loops), [cache]), copy.name


# ---------------------------------------------------------------------------
# cache_write


def cache_write(program: Program, block: str, write_index: int, scope: str) -> tuple[Program, str]:
    """Make `block` write a fresh buffer in `scope`, copied out by a new write-back block.

        for i, j, r: with block("C"): init: C[vi, vj] = 0.0; C[vi, vj] = C[vi, vj] + ...
      cache_write("C", 0, "local") ->
        C_local = alloc(float32[M, N], scope='local')
        for i, j, r: with block("C"): init: C_local[vi, vj] = 0.0; C_local[vi, vj] = C_local[vi, vj] + ...
        for ax0, ax1: with block("C_local"): C[vax0, vax1] = C_local[vax0, vax1]

    The write-back nest, placed right after the block's top-level nest, runs over
    the block's spatial iteration domain, so it copies exactly the elements the
    block writes. Returns the write-back block's name (that of the new buffer);
    `reverse_compute_at` can then move it into a tile loop.
    """
    r = find_block(program, block)
    writes = r.block.writes
    if (
        isinstance(write_index, bool)
        or not isinstance(write_index, int)
        or not 0 <= write_index < len(writes)
    ):
        raise ScheduleError(
            f'block "{block}": write index {write_index!r} out of range; it writes {len(writes)} regions'
        )
    _check_scope(block, scope)
    if len({w.buffer.name for w in writes}) > 1 or len(writes) > 1:
        raise ScheduleError(
            f'block "{block}": writes several buffers (or regions); cannot cache one of them'
        )
    region = writes[0]
    dst = program_buffer(program, region.buffer.name)
    if dst is None:
        raise ScheduleError(
            f'block "{block}": {region.buffer.name} is local to a block; cannot cache it'
        )
    others = [w.block.name for w in writers(program, dst.name) if w.block.name != block]
    if others:
        raise ScheduleError(
            f'block "{block}": {dst.name} is also written by block "{others[0]}"; cannot cache its writes'
        )
    here = root_index(program, block)
    for rd in readers(program, dst.name):
        if root_index(program, rd.block.name) == here:
            raise ScheduleError(
                f'block "{block}": block "{rd.block.name}" reads {dst.name} in the same top-level nest; '
                "it would read it before the write-back"
            )
    store = r.block.body
    if not isinstance(store, BufferStore) or store.buffer.name != dst.name:
        raise ScheduleError(f'block "{block}": its body is not a single store to {dst.name}')
    spatial = write_domain(r.block, store.indices, dst.name)

    names = fresh_names(program)
    cache = Buffer(names.fresh(f"{dst.name}_{scope}"), dst.shape, dst.dtype, scope)
    loops, ivs = new_domain(names, [(iv.extent, "spatial") for iv in spatial])
    mapping = {old.var: new.var for old, new in zip(spatial, ivs)}
    idx = tuple(substitute(i, mapping) for i in store.indices)
    writeback = copy_block(cache.name, ivs, cache, dst, idx)  # type: ignore[arg-type]

    new_block = replace(
        r.block,
        writes=(replace(region, buffer=cache),),
        reads=tuple(
            replace(rd, buffer=cache) if rd.buffer.name == dst.name else rd for rd in r.block.reads
        ),
        body=redirect_stores(r.block.body, dst.name, cache),
        init=None if r.block.init is None else redirect_stores(r.block.init, dst.name, cache),
    )
    program = replace_realize(program, block, lambda x: replace(x, block=new_block))
    return insert_root(program, here + 1, wrap_nest(writeback, loops), [cache]), writeback.name


def write_domain(block: Block, indices: tuple[Expr, ...], buffer: str) -> list[IterVar]:
    """The spatial iteration variables the written indices depend on, in block order.

    Every point of their domain is reached by the block (bindings cover it, guards
    only cut what lies outside), so a nest over it touches exactly what the block writes.
    """
    used = {n for i in indices for n in walk(i) if isinstance(n, Var)}
    kinds = {iv.var: iv.kind for iv in block.iter_vars}
    for v in sorted(used, key=lambda v: v.name):
        if kinds.get(v) == "reduce":
            raise ScheduleError(
                f'block "{block.name}": writes {buffer} at an index that depends on reduction axis {v.name}'
            )
        if v not in kinds:
            raise ScheduleError(
                f'block "{block.name}": writes {buffer} at an index that depends on {v.name}'
            )
    return [iv for iv in block.iter_vars if iv.var in used]


# ---------------------------------------------------------------------------
# accumulate_at


def accumulate_at(program: Program, block: str, loop: str) -> tuple[Program, str]:
    """Make `block` update its output through a local tile inside `loop`: loaded, updated, stored.

        for k0, i2:                                  for k0, i2:
          for k1, i3:                                  for ax0: C_local[..] = C[..]       (fill)
            with block("C"):                  ->       for k1, i3:
              C[vi] = C[vi] + A[vi, vk] * ...            with block("C"): C_local[vi] = C_local[vi] + ...
                                                       for ax0: C[..] = C_local[..]       (write-back)

    Unlike `cache_write`, whose write-back must wait until the reduction is done,
    this is legal inside a reduction loop: each iteration of `loop` starts from
    what C holds and leaves its sums there, so a K-blocked matmul keeps its
    register tile for one k-block and adds it back (the micro-kernel of
    OpenBLAS's K-outer blocking). Lowering compacts the local buffer to the box
    one iteration touches. Refused unless: the block is the only block under
    `loop`; it has no init (decompose the reduction first: the init would write
    the tile, not C); its body is one store to a buffer of the program that it
    reads only at the stored index; what one iteration of `loop` stores is a box.
    Returns the write-back block's name (that of the local buffer).
    """
    what = f'accumulate_at of block "{block}" at loop {loop}'
    r = find_block(program, block)
    path = loop_path(program, loop)
    check_loop_kind(path, loop, block)
    check_const_extents(r, what)
    under = [b.block.name for b in blocks_under(path[-1])]
    if block not in under:
        raise ScheduleError(f'{what}: loop {loop} does not enclose block "{block}"')
    if under != [block]:
        other = next(n for n in under if n != block)
        raise ScheduleError(
            f'{what}: loop {loop} also holds block "{other}"; only the updated block may be under it'
        )
    if r.block.init is not None:
        raise ScheduleError(
            f'{what}: block "{block}" has an init; decompose the reduction first '
            "(the init would write the local tile, not the output)"
        )
    store = r.block.body
    if not isinstance(store, BufferStore) or len(r.block.writes) != 1:
        raise ScheduleError(f'{what}: block "{block}" is not a single store')
    dst = program_buffer(program, store.buffer.name)
    if dst is None:
        raise ScheduleError(f"{what}: {store.buffer.name} is local to a block")
    if any(ld.indices != store.indices for ld in loads_of(store, dst.name)):
        raise ScheduleError(
            f'{what}: block "{block}" reads {dst.name} at another index than it stores'
        )

    binds = bindings(r)
    inner = const_ranges(inner_loops(program, block, loop), what)
    env = {**loop_ranges(path), **inner}
    exprs = [substitute(i, binds) for i in store.indices]
    box = exact_box(exprs, inner, env)  # type: ignore[arg-type]
    outer = {f.var for f in path}
    if box is None or any(isinstance(v, Var) and v not in outer for mn, _ in box for v in walk(mn)):
        raise ScheduleError(
            f"{what}: the part of {dst.name} that one iteration of loop {loop} updates is not a box"
        )

    names = fresh_names(program)
    local = Buffer(names.fresh(f"{dst.name}_local"), dst.shape, dst.dtype, "local")
    fill_name = names.fresh(f"{local.name}_fill")
    new_block = replace(
        r.block,
        writes=(replace(r.block.writes[0], buffer=local),),
        reads=tuple(
            replace(rd, buffer=local) if rd.buffer.name == dst.name else rd for rd in r.block.reads
        ),
        body=redirect_stores(store, dst.name, local),
    )
    program = replace_realize(program, block, lambda x: replace(x, block=new_block))
    program = replace(program, allocs=(*program.allocs, local))
    spans = dict(enumerate(box))
    for name, src, out in ((fill_name, dst, local), (local.name, local, dst)):
        _, ivs = new_domain(
            fresh_names(program), [(Const(n, "int64"), "spatial") for n in dst.concrete_shape()]
        )
        idx = tuple(iv.var for iv in ivs)
        blk = copy_block(name, ivs, src, out, idx)
        nest, _, _ = new_nest(program, BlockRealize(idx, TRUE, blk), spans, path)
        first = out is local
        program = replace_loop(
            program,
            loop,
            lambda f, nest=nest, first=first: replace(
                f, body=seq(nest, f.body) if first else seq(f.body, nest)
            ),
        )
    return program, local.name
