"""compute_at and reverse_compute_at: move a block under a loop of a block it feeds or is fed by.

Each is a pure function `(program, block, loop) -> program` that checks its own
legality and raises ScheduleError naming the block or loop; the regions, order
and predicate checks they rest on are in :mod:`ir.schedule.region`.
"""

from __future__ import annotations

from dataclasses import replace

from ir.expr import Var
from ir.node import walk
from ir.program import (
    Program,
    seq,
)
from ir.schedule.analysis import (
    bindings,
    loop_ranges,
    readers,
    writers,
)
from ir.schedule.region import (
    block_loads,
    check_const_extents,
    check_domain_predicate,
    check_inputs_finished,
    check_loop_kind,
    check_parallel_disjoint,
    check_writes_finish,
    concrete_shape,
    const_ranges,
    consumer_region,
    covers_buffer,
    exact_box,
    inner_loops,
    is_realize_of,
    is_under,
    loop_path,
    new_nest,
    read_buffers,
    statement_positions,
    write_dims,
)
from ir.schedule.state import (
    ScheduleError,
    blocks_under,
    find_block,
    remove_stmt,
    replace_loop,
)

# ---------------------------------------------------------------------------
# compute_at


def compute_at(program: Program, block: str, loop: str) -> Program:
    """Move a producer under `loop`, computing there what its consumers read in one iteration.

        for i in range(4):                          for i_1 in range(4):
          for r in range(8):                          for ax0 in range(1):
            with block("x_max"):                        for ax1 in range(8):
              vi = spatial(4, i)                          with block("x_max"):
              vr = reduce(8, r) ...        ->               vi = spatial(4, i_1 + ax0)
        for i_1 in range(4):                                vr = reduce(8, ax1) ...
          for j in range(8):                          for j in range(8):
            with block("x_exp"):                        with block("x_exp"):
              vi_1 = spatial(4, i_1) ...                  vi_1 = spatial(4, i_1) ...
              ... x_max[vi_1] ...                         ... x_max[vi_1] ...

    The region is the union of the consumers' reads with the loops inside `loop`
    relaxed; one new loop per spatial iteration variable spans it (bound to
    min + loop, guarded where it may leave the domain), one per reduction variable
    spans its full extent (the init is kept, so a reduction producer stays exact).
    Refused unless: the block is the only writer of its one output buffer, written
    at distinct spatial iteration variables; every consumer lies under `loop` and
    after the block; the inputs of the block are finished before `loop`; the loops
    inside `loop` have constant extents; `loop` is serial or parallel, and parallel
    loops around the new location give each iteration its own part of the buffer;
    a program output is still written in full.
    """
    what = f'compute_at of block "{block}" at loop {loop}'
    r = find_block(program, block)
    path = loop_path(program, loop)
    check_loop_kind(path, loop, block)
    outs = {w.buffer.name for w in r.block.writes}
    if len(outs) != 1:
        raise ScheduleError(
            f'{what}: block "{block}" writes {len(outs)} buffers; compute_at needs exactly one'
        )
    buf = r.block.writes[0].buffer
    if [w.block.name for w in writers(program, buf.name)] != [block]:
        raise ScheduleError(f"{what}: {buf.name} is also written by another block")
    check_const_extents(r, what)
    dims = write_dims(r, buf, what, all_iters=False)
    check_domain_predicate(r, what)
    if is_under(program, block, loop) and [b.block.name for b in blocks_under(path[-1])] == [block]:
        raise ScheduleError(f'{what}: loop {loop} is in the nest of block "{block}" itself')

    consumers = readers(program, buf.name)
    if not consumers:
        raise ScheduleError(f'{what}: block "{block}" has no consumer (nothing reads {buf.name})')
    pos = statement_positions(program)
    for c in consumers:
        if not is_under(program, c.block.name, loop):
            raise ScheduleError(
                f'{what}: loop {loop} does not enclose block "{c.block.name}", which reads {buf.name}'
            )
        if pos[("block", c.block.name)] < pos[("block", block)]:
            raise ScheduleError(
                f'{what}: block "{block}" is not before its consumer "{c.block.name}"'
            )
    inputs = [b for b in read_buffers(r.block) if b != buf.name]
    is_output = buf.name in {b.name for b in program.outputs}
    # Over-approximated regions compute elements nobody reads yet: harmless, unless they are final.
    check_inputs_finished(program, inputs, ("loop", loop), path, what, strict=is_output)

    region = consumer_region(program, consumers, buf, loop, what)
    outer = {f.var for f in path}
    for mn, _ in region:
        stray = sorted(v.name for v in walk(mn) if isinstance(v, Var) and v not in outer)
        if stray:
            raise ScheduleError(
                f"{what}: the region of {buf.name} read in one iteration is not constant "
                f"(it depends on {', '.join(stray)})"
            )
    shape = concrete_shape(buf, what)
    if buf.name in {b.name for b in program.outputs} and not covers_buffer(
        region, path, shape, what
    ):
        raise ScheduleError(
            f"{what}: {buf.name} is a program output and the consumers under loop {loop} do not read all of it"
        )

    spans = {dims[d]: region[d] for d in range(len(dims))}
    nest, values, new_ranges = new_nest(program, r, spans, path)
    check_parallel_disjoint(r, values, new_ranges, path, what)
    out = remove_stmt(program, is_realize_of(block))
    return replace_loop(out, loop, lambda f: replace(f, body=seq(nest, f.body)))


# ---------------------------------------------------------------------------
# reverse_compute_at


def reverse_compute_at(program: Program, block: str, loop: str) -> Program:
    """Move a consumer under its producer's `loop`, consuming what one iteration produced.

        for i in range(4):                          for i in range(4):
          for j in range(5):                          for j in range(5):
            for r in range(3):                          for r in range(3):
              with block("XW"): ...                       with block("XW"): ...
        for i_1 in range(4):                 ->       for ax0 in range(1):
          for j_1 in range(5):                          for ax1 in range(5):
            with block("Y"):                              with block("Y"):
              vi_1 = spatial(4, i_1)                        vi_1 = spatial(4, i + ax0)
              vj_1 = spatial(5, j_1) ...                    vj_1 = spatial(5, ax1) ...

    The consumer goes at the end of `loop`'s body. Its iteration variables that
    index the producer's buffer span exactly the box the producer writes in one
    iteration (the loops inside `loop` relaxed); the others span their full extent.
    Refused unless: exactly one block under `loop` writes what the consumer reads,
    at distinct spatial iteration variables, and is its buffer's only writer; the
    consumer reads that buffer at its own distinct spatial iteration variables
    only; no reduction of the producer spans `loop`; the box is exact (no strided
    or tied dimensions); the consumer's other inputs are finished before `loop` and
    its outputs are read only after it; `loop` is serial or parallel, with
    disjoint writes across parallel iterations.
    """
    what = f'reverse_compute_at of block "{block}" at loop {loop}'
    c = find_block(program, block)
    path = loop_path(program, loop)
    check_loop_kind(path, loop, block)
    check_const_extents(c, what)
    reads = read_buffers(c.block)
    producers = [
        b
        for b in blocks_under(path[-1])
        if b.block.name != block and any(w.buffer.name in reads for w in b.block.writes)
    ]
    if len(producers) != 1:
        found = ", ".join(f'"{b.block.name}"' for b in producers) or "none"
        raise ScheduleError(
            f'{what}: loop {loop} must hold exactly one producer of block "{block}" (found {found})'
        )
    p = producers[0]
    bufs = [w.buffer for w in p.block.writes if w.buffer.name in reads]
    if len(bufs) != 1:
        raise ScheduleError(
            f'{what}: block "{p.block.name}" writes several buffers block "{block}" reads'
        )
    buf = bufs[0]
    if [w.block.name for w in writers(program, buf.name)] != [p.block.name]:
        raise ScheduleError(f"{what}: {buf.name} is also written by another block")
    check_const_extents(p, what)
    p_dims = write_dims(p, buf, what, all_iters=False)
    check_domain_predicate(p, what)
    check_domain_predicate(c, what)

    # The consumer reads the buffer at its own distinct spatial iteration variables.
    loads = {ld.indices for ld in block_loads(c.block, buf.name)}
    ivars = [iv.var for iv in c.block.iter_vars]
    idx = next(iter(loads))
    c_dims = [ivars.index(i) if i in ivars else -1 for i in idx]
    if (
        len(loads) != 1
        or -1 in c_dims
        or len(set(c_dims)) != len(c_dims)
        or any(c.block.iter_vars[k].kind != "spatial" for k in c_dims)
    ):
        raise ScheduleError(
            f'{what}: block "{block}" must read {buf.name} at one index, each dimension one of its '
            "own distinct spatial iteration variables"
        )
    for d, k in enumerate(c_dims):
        if int(c.block.iter_vars[k].extent.value) > int(p.block.iter_vars[p_dims[d]].extent.value):  # type: ignore[attr-defined]
            raise ScheduleError(
                f'{what}: block "{block}" reads {buf.name} beyond what block "{p.block.name}" writes'
            )

    # Order: the consumer comes after the producer; its inputs are ready, its outputs not yet read.
    pos = statement_positions(program)
    if pos[("block", block)] < pos[("block", p.block.name)]:
        raise ScheduleError(f'{what}: block "{block}" is not after its producer "{p.block.name}"')
    check_writes_finish(program, p, loop, what)
    others = [b for b in reads if b != buf.name]
    check_inputs_finished(program, others, ("loop", loop), path, what, strict=True)
    for w in c.block.writes:
        if [x.block.name for x in writers(program, w.buffer.name)] != [block]:
            raise ScheduleError(f"{what}: {w.buffer.name} is also written by another block")
        for rd in readers(program, w.buffer.name):
            if pos[("block", rd.block.name)] < pos[("block", block)] or is_under(
                program, rd.block.name, loop
            ):
                raise ScheduleError(
                    f'{what}: block "{rd.block.name}" reads {w.buffer.name} and would run before block "{block}"'
                )

    # The box the producer writes in one iteration of `loop`.
    inner = const_ranges(inner_loops(program, p.block.name, loop), what)
    env = {**loop_ranges(path), **inner}
    p_binds = bindings(p)
    exprs = [p_binds[p.block.iter_vars[k].var] for k in p_dims]
    box = exact_box(exprs, inner, env)
    if box is None:
        raise ScheduleError(
            f'{what}: the part of {buf.name} that block "{p.block.name}" writes in one iteration is not a box'
        )
    outer = {f.var for f in path}
    for mn, _ in box:
        if any(isinstance(v, Var) and v not in outer for v in walk(mn)):
            raise ScheduleError(
                f"{what}: the region of {buf.name} written in one iteration is not constant"
            )

    spans = {c_dims[d]: box[d] for d in range(len(c_dims))}
    nest, values, new_ranges = new_nest(program, c, spans, path)
    check_parallel_disjoint(c, values, new_ranges, path, what)
    out = remove_stmt(program, is_realize_of(block))
    return replace_loop(out, loop, lambda f: replace(f, body=seq(f.body, nest)))
