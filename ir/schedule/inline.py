"""compute_inline and reverse_compute_inline: fold an element-wise block into its neighbour.

Each is a pure function `(program, block) -> program` that checks its own
legality and raises ScheduleError naming the block; the order and predicate
checks they share with compute_at are in :mod:`ir.schedule.region`.
"""

from __future__ import annotations

from dataclasses import replace

from ir.expr import Expr, Load, Var
from ir.node import Node
from ir.program import (
    Block,
    BlockRealize,
    BufferRegion,
    BufferStore,
    IntrinsicCall,
    Program,
    Range,
)
from ir.schedule.analysis import (
    readers,
    store_of,
    writers,
)
from ir.schedule.region import (
    block_loads,
    check_domain_predicate,
    check_inputs_finished,
    is_realize_of,
    loads_of,
    read_buffers,
    statement_positions,
    write_dims,
)
from ir.schedule.state import (
    ScheduleError,
    all_blocks,
    find_block,
    loops_above,
    remove_stmt,
)
from ir.visit import post_order_rewrite, substitute

# ---------------------------------------------------------------------------
# compute_inline


def _elementwise_store(program: Program, r: BlockRealize, what: str) -> BufferStore:
    """The single store of an element-wise block writing an intermediate buffer, its only writer."""
    b = r.block
    if b.init is not None or b.is_reduction:
        raise ScheduleError(
            f'{what}: block "{b.name}" is a reduction; only element-wise blocks can be inlined'
        )
    store = store_of(r)
    if store is None or len(b.writes) != 1:
        raise ScheduleError(f'{what}: block "{b.name}" must be a single buffer store')
    buf = store.buffer
    if buf.name not in {a.name for a in program.allocs}:
        raise ScheduleError(
            f'{what}: block "{b.name}" writes {buf.name}, a parameter of the program, not an intermediate'
        )
    if [w.block.name for w in writers(program, buf.name)] != [b.name]:
        raise ScheduleError(f"{what}: {buf.name} is also written by another block")
    if loads_of(store.value, buf.name):
        raise ScheduleError(f'{what}: block "{b.name}" reads its own buffer {buf.name}')
    write_dims(r, buf, what, all_iters=True)
    check_domain_predicate(r, what)
    return store


def compute_inline(program: Program, block: str) -> Program:
    """Substitute an element-wise block's expression into every load of its buffer.

        with block("pad"):                              (pad removed, and its buffer)
          pad[vy, vx] = select(vy >= 1 ..., X[vy - 1, vx - 1], 0.0)
        with block("Y"):                       ->       with block("Y"):
          ... pad[vi + vrh, vj + vrw] ...                 ... select(vi + vrh >= 1 ..., X[vi + vrh - 1, ...], 0.0) ...

    Refused unless the block has no init and no reduction variable, is one store to
    an intermediate buffer (not a program parameter) at distinct iteration
    variables covering the buffer, is that buffer's only writer, does not read its
    own buffer, comes before its consumers, and its inputs are finished before it
    (so they hold the same values wherever the expression moves).
    """
    what = f'compute_inline of block "{block}"'
    r = find_block(program, block)
    store = _elementwise_store(program, r, what)
    buf = store.buffer
    for other in all_blocks(program):
        body = other.block.body
        if isinstance(body, IntrinsicCall) and any(a.buffer.name == buf.name for a in body.args):
            raise ScheduleError(
                f'{what}: block "{other.block.name}" reads {buf.name} through tensor intrinsic '
                f"{body.name}, which takes memory, not an expression"
            )
    pos = statement_positions(program)
    consumers = readers(program, buf.name)
    for c in consumers:
        if pos[("block", c.block.name)] < pos[("block", block)]:
            raise ScheduleError(
                f'{what}: block "{block}" is not before its consumer "{c.block.name}"'
            )
    # The expression is evaluated later, in the consumers: its inputs must be final by then.
    inputs = [b for b in read_buffers(r.block) if b != buf.name]
    check_inputs_finished(
        program, inputs, ("block", block), loops_above(program, block), what, strict=False
    )

    ivars = [iv.var for iv in r.block.iter_vars]

    def value_at(indices: tuple[Expr, ...]) -> Expr:
        mapping = dict(zip(store.indices, indices))
        return substitute(store.value, mapping, into_buffers=False)  # type: ignore[return-value]

    def regions_at(indices: tuple[Expr, ...]) -> list[BufferRegion]:
        mapping = dict(zip(store.indices, indices))
        return [
            BufferRegion(
                rd.buffer,
                tuple(
                    Range(substitute(x.min, mapping), substitute(x.extent, mapping))
                    for x in rd.region
                ),  # type: ignore[arg-type]
            )
            for rd in r.block.reads
        ]

    assert all(v in ivars for v in store.indices)
    new_blocks: dict[str, Block] = {}
    for c in consumers:
        cb = c.block
        uses: list[tuple[Expr, ...]] = []
        for ld in block_loads(cb, buf.name):
            if ld.indices not in uses:
                uses.append(ld.indices)

        def inline(n: Node) -> Node | None:
            if isinstance(n, Load) and n.buffer.name == buf.name:
                return value_at(n.indices)
            return None

        body = post_order_rewrite(cb.body, inline)
        init = post_order_rewrite(cb.init, inline) if cb.init is not None else None
        replacement = [x for u in uses for x in regions_at(u)]
        reads: list[BufferRegion] = []
        for rd in cb.reads:
            items = replacement if rd.buffer.name == buf.name else [rd]
            reads.extend(x for x in items if x not in reads)
        reads.extend(x for x in replacement if x not in reads)
        new_blocks[cb.name] = replace(cb, body=body, init=init, reads=tuple(reads))  # type: ignore[arg-type]

    out = remove_stmt(program, is_realize_of(block))

    def swap(n: Node) -> Node | None:
        if isinstance(n, BlockRealize) and n.block.name in new_blocks:
            return replace(n, block=new_blocks[n.block.name])
        return None

    out = replace(out, body=post_order_rewrite(out.body, swap))
    return replace(out, allocs=tuple(a for a in out.allocs if a.name != buf.name))


# ---------------------------------------------------------------------------
# reverse_compute_inline


def reverse_compute_inline(program: Program, block: str) -> Program:
    """Fold an element-wise consumer into its producer's store.

        with block("B"):                                with block("B"):
          vi = spatial(4, i) ...                          vi = spatial(4, i) ...
          B[vi] = A[vi] * 2.0                  ->         C[vi] = A[vi] * 2.0 + 1.0
        with block("C"):                                (C's nest removed, and buffer B)
          vi_1 = spatial(4, i_1) ...
          C[vi_1] = B[vi_1] + 1.0

    The producer is the intermediate the consumer reads that is written last. Refused
    unless: the consumer is one store with no reduction, reads the buffer once, at its
    own distinct iteration variables (all of them), and is its only reader; the producer is an element-wise single store, the buffer's only
    writer, writing an intermediate buffer at distinct iteration variables of the
    same extents; the consumer's other inputs are finished before the producer and
    its output is written by it alone and read only after it.
    """
    what = f'reverse_compute_inline of block "{block}"'
    c = find_block(program, block)
    cb = c.block
    if cb.init is not None or cb.is_reduction:
        raise ScheduleError(
            f'{what}: block "{block}" is a reduction; only element-wise consumers can be inlined'
        )
    cstore = store_of(c)
    if cstore is None or len(cb.writes) != 1:
        raise ScheduleError(f'{what}: block "{block}" must be a single buffer store')
    allocs = {a.name for a in program.allocs}
    candidates = [b for b in read_buffers(cb) if b in allocs and writers(program, b)]
    if not candidates:
        raise ScheduleError(f'{what}: block "{block}" reads no intermediate buffer')
    # The producer is the intermediate written last; any other must be final before it
    # (dense_int8's requantization reads its product and W's column sums, summed first).
    pos = statement_positions(program)
    name = max(
        candidates, key=lambda b: max(pos[("block", w.block.name)] for w in writers(program, b))
    )
    ws = writers(program, name)
    if len(ws) != 1:
        raise ScheduleError(f"{what}: {name} is written by several blocks")
    p = ws[0]
    if [x.block.name for x in readers(program, name)] != [block]:
        raise ScheduleError(f'{what}: {name} is also read by blocks other than "{block}"')
    pstore = _elementwise_store(program, p, what)
    buf = pstore.buffer
    p_dims = write_dims(p, buf, what, all_iters=True)

    loads = block_loads(cb, name)
    ivars = [iv.var for iv in cb.iter_vars]
    c_dims = [ivars.index(i) if i in ivars else -1 for i in loads[0].indices]
    if len(loads) != 1 or sorted(c_dims) != list(range(len(ivars))):
        raise ScheduleError(
            f'{what}: block "{block}" must read {name} exactly once, at all of its own distinct iteration variables'
        )
    for d, k in enumerate(c_dims):
        if cb.iter_vars[k].extent != p.block.iter_vars[p_dims[d]].extent:
            raise ScheduleError(
                f'{what}: block "{block}" and block "{p.block.name}" iterate over different extents'
            )
    check_domain_predicate(c, what)

    out_buf = cstore.buffer
    if pos[("block", block)] < pos[("block", p.block.name)]:
        raise ScheduleError(f'{what}: block "{block}" is not after its producer "{p.block.name}"')
    if [x.block.name for x in writers(program, out_buf.name)] != [block]:
        raise ScheduleError(f"{what}: {out_buf.name} is also written by another block")
    if out_buf.name in read_buffers(p.block):
        raise ScheduleError(
            f'{what}: block "{p.block.name}" reads {out_buf.name}, which block "{block}" writes'
        )
    for rd in readers(program, out_buf.name):
        if pos[("block", rd.block.name)] < pos[("block", block)]:
            raise ScheduleError(
                f'{what}: block "{rd.block.name}" reads {out_buf.name} before block "{block}"'
            )
    # The consumer's other inputs are read earlier, in the producer: they must be final by then.
    others = [b for b in read_buffers(cb) if b != name]
    check_inputs_finished(
        program,
        others,
        ("block", p.block.name),
        loops_above(program, p.block.name),
        what,
        strict=True,
    )

    # Consumer iteration variable at buffer dimension d -> the producer's index there.
    mapping: dict[Var, Expr] = {ivars[k]: pstore.indices[d] for d, k in enumerate(c_dims)}

    def fold(n: Node) -> Node | None:
        if isinstance(n, Load) and n.buffer.name == name:
            return pstore.value
        return None

    value = post_order_rewrite(substitute(cstore.value, mapping, into_buffers=False), fold)
    indices = tuple(substitute(i, mapping) for i in cstore.indices)
    writes = tuple(substitute(w, mapping, into_buffers=False) for w in cb.writes)
    reads = list(p.block.reads)
    for rd in cb.reads:
        if rd.buffer.name == name:
            continue
        moved = substitute(rd, mapping, into_buffers=False)
        if moved not in reads:
            reads.append(moved)  # type: ignore[arg-type]
    new_block = replace(
        p.block,
        body=BufferStore(out_buf, value, indices),  # type: ignore[arg-type]
        writes=writes,
        reads=tuple(reads),
    )
    out = remove_stmt(program, is_realize_of(block))
    out = replace(
        out,
        body=post_order_rewrite(
            out.body,
            lambda n: replace(n, block=new_block) if is_realize_of(p.block.name)(n) else None,
        ),
    )
    return replace(out, allocs=tuple(a for a in out.allocs if a.name != name))
