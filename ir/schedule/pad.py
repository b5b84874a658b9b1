"""pad_einsum: grow a sum-of-products block's axes to multiples, with zero padding.

    for i, j, k in grid(12, 40, 18):            A_pad[i, k] = A[i, k] if k < 18 else 0   (12 x 20)
      C[i, j] += A[i, k] * B[k, j]      ->      B_pad[k, j] = B[k, j] if k < 18 and j < 40 else 0
                                                for i, j, k in grid(12, 48, 20): C_pad[i, j] += A_pad[i, k] * B_pad[k, j]
    pad_einsum("C", [1, 16, 4])                 C[i, j] = C_pad[i, j]                    (12 x 40)

(TVM's pad_einsum.) A tensor intrinsic computes whole tiles — 16 columns and
4 reduction steps for vnni — so a shape that is not a multiple of the tile
is padded: the inputs are copied into zero-padded buffers (zeros add nothing
to a sum of products), the block computes the padded domain into a padded
output, and a copy writes back the part that exists. Shapes that are
multiples need none of this, and a factor of 1 pads nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ir.build import NameSupply, point_regions
from ir.compute import reduce_identity
from ir.expr import Binary, Buffer, Const, Expr, IterVar, Load, Var, logical_and, select
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
from ir.schedule.blockize import loop_chain
from ir.schedule.state import ScheduleError, find_block, fresh_names, loops_above


def pad_einsum(program: Program, block: str, padding: Sequence[int]) -> tuple[Program, None]:
    """Pad each iteration variable of `block` to a multiple of its factor in `padding`."""
    r = find_block(program, block)
    blk = r.block
    where = f'block "{block}"'
    if len(padding) != len(blk.iter_vars) or any(
        isinstance(p, bool) or not isinstance(p, int) or p < 1 for p in padding
    ):
        raise ScheduleError(
            f"{where}: padding needs one positive factor per iteration variable "
            f"({len(blk.iter_vars)}), got {list(padding)}"
        )
    top = _check_einsum(program, r, where)
    extents = [int(iv.extent.value) for iv in blk.iter_vars]  # type: ignore[attr-defined]
    padded = {iv.var: -(-e // p) * p for iv, e, p in zip(blk.iter_vars, extents, padding) if e % p}
    if not padded:
        return program, None
    names = fresh_names(program)
    store = blk.body
    assert isinstance(store, BufferStore)
    renames: dict[str, Buffer] = {}
    before: list[Stmt] = []
    for buf, idx in _loads(store, padded, where):
        new = _padded_buffer(buf, idx, padded, names)
        renames[buf.name] = new
        before.append(_copy_in(buf, new, names))
    out = store.buffer
    after: list[Stmt] = []
    if any(isinstance(i, Var) and i in padded for i in store.indices):
        new = _padded_buffer(out, store.indices, padded, names)
        renames[out.name] = new
        after.append(_copy_out(out, new, names))

    def rebuffer(n: Node) -> Node:
        if isinstance(n, Buffer) and n.name in renames:
            return renames[n.name]
        return map_children(n, rebuffer)

    new_ivs = tuple(
        replace(iv, extent=Const(padded[iv.var], "int64")) if iv.var in padded else iv
        for iv in blk.iter_vars
    )
    new_blk = replace(rebuffer(blk), iter_vars=new_ivs)  # type: ignore[arg-type]
    nest: Stmt = BlockRealize(r.values, TRUE, new_blk)
    for lp, iv in reversed(list(zip(loops_above(program, block), new_ivs))):
        nest = replace(lp, extent=iv.extent, body=nest)
    stmts = list(program.body.stmts) if isinstance(program.body, SeqStmt) else [program.body]
    at = next(i for i, s in enumerate(stmts) if s is top)
    stmts[at : at + 1] = [*before, nest, *after]
    allocs = (*program.allocs, *renames.values())
    return replace(program, body=seq(*stmts), allocs=allocs), None


def _check_einsum(program: Program, r: BlockRealize, where: str) -> For:
    """A naive nest holding only this block, whose update is `Y = Y + ...` from zero."""
    loops = loops_above(program, r.block.name)
    stmts = program.body.stmts if isinstance(program.body, SeqStmt) else (program.body,)
    if (
        not loops
        or not any(s is loops[0] for s in stmts)
        or loop_chain(loops[0]) != (loops, r)
        or [lp.var for lp in loops] != list(r.values)
        or r.predicate != TRUE
    ):
        raise ScheduleError(f"{where}: pad_einsum needs the block's own naive loop nest")
    blk = r.block
    store, init = blk.body, blk.init
    if (
        not isinstance(store, BufferStore)
        or not isinstance(init, BufferStore)
        or init.value != reduce_identity("sum", init.buffer.dtype)
        or not isinstance(store.value, Binary)
        or store.value.op != "add"
        or store.value.a != Load(store.buffer, store.indices)
    ):
        raise ScheduleError(f"{where}: pad_einsum needs a sum (an init of zero, then Y = Y + ...)")
    if any(not isinstance(iv.extent, Const) for iv in blk.iter_vars):
        raise ScheduleError(f"{where}: pad_einsum needs constant extents")
    return loops[0]


def _loads(
    store: BufferStore, padded: dict[Var, int], where: str
) -> list[tuple[Buffer, tuple[Expr, ...]]]:
    """The inputs to pad: loads indexed by a padded axis, each index a plain axis there."""
    seen: dict[str, tuple[Buffer, tuple[Expr, ...]]] = {}
    for n in walk(store.value.b):  # type: ignore[attr-defined]
        if not isinstance(n, Load):
            continue
        touches = [any(isinstance(v, Var) and v in padded for v in walk(i)) for i in n.indices]
        if not any(touches):
            continue
        if any(t and not (isinstance(i, Var) and i in padded) for i, t in zip(n.indices, touches)):
            raise ScheduleError(
                f"{where}: reads {n.buffer.name} at an index computed from a padded axis; "
                "only plain axes can be padded"
            )
        known = seen.setdefault(n.buffer.name, (n.buffer, n.indices))
        if known[1] != n.indices:
            raise ScheduleError(f"{where}: reads {n.buffer.name} at two different indices")
    return list(seen.values())


def _padded_buffer(
    buf: Buffer, idx: tuple[Expr, ...], padded: dict[Var, int], names: NameSupply
) -> Buffer:
    shape = tuple(
        Const(padded[i], "int64") if isinstance(i, Var) and i in padded else s
        for i, s in zip(idx, buf.shape)
    )
    return Buffer(names.fresh(f"{buf.name}_pad"), shape, buf.dtype)


def _nest(
    name: str, target: Buffer, value_of: object, names: NameSupply, shape: tuple[int, ...]
) -> For:
    """A naive nest over `shape` around block `name`: target[v] = value_of(v)."""
    loop_vars = [Var(names.fresh(f"ax{d}")) for d in range(len(shape))]
    ivs = [
        IterVar(Var(names.fresh(f"v{lv.name}")), Const(s, "int64"))
        for lv, s in zip(loop_vars, shape)
    ]
    idx = tuple(iv.var for iv in ivs)
    value = value_of(idx)  # type: ignore[operator]
    block = Block(
        name,
        tuple(ivs),
        point_regions([n for n in walk(value) if isinstance(n, Load)]),
        (BufferRegion(target, tuple(Range(i, Const(1, "int64")) for i in idx)),),
        BufferStore(target, value, idx),
    )
    nest: Stmt = BlockRealize(tuple(loop_vars), TRUE, block)
    for lv, s in reversed(list(zip(loop_vars, shape))):
        nest = For(lv, Const(s, "int64"), "serial", nest)
    assert isinstance(nest, For)
    return nest


def _copy_in(src: Buffer, dst: Buffer, names: NameSupply) -> For:
    """dst[v] = src[v] where v is inside src, else zero."""
    small, big = src.concrete_shape(), dst.concrete_shape()

    def value(idx: tuple[Expr, ...]) -> Expr:
        inside = [i < s for i, s, b in zip(idx, small, big) if s != b]
        return select(logical_and(*inside), Load(src, idx), reduce_identity("sum", src.dtype))

    return _nest(dst.name, dst, value, names, big)


def _copy_out(dst: Buffer, src: Buffer, names: NameSupply) -> For:
    """dst[v] = src[v] over dst (the part of the padded result that exists)."""
    crop = names.fresh(f"{dst.name}_crop")
    return _nest(crop, dst, lambda idx: Load(src, idx), names, dst.concrete_shape())
