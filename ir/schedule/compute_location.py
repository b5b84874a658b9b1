"""Compute-location primitives: compute_at, reverse_compute_at, compute_inline, reverse_compute_inline.

Each moves a block relative to the blocks it feeds or is fed by; each is a pure
function `(program, ...) -> program` that checks its own legality and raises
ScheduleError naming the block or loop. The analyses they share:

- regions: the part of a buffer that a block touches in one iteration of a loop,
  from its indices with the loops inside that loop relaxed over their ranges;
- order: a block moved earlier must find its inputs finished, a block moved later
  must not be read before it runs; both are checked on the statement order;
- predicates: the only predicates these primitives accept on a block they move
  (and the only ones they create) bound an iteration variable's binding to its
  domain, so dropping or re-deriving them is exact.

New loops are named ax0, ax1, ... (fresh names) and loops of extent 1 are kept,
so the loops a trace sees do not depend on the sizes of the regions; lowering
removes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ir.arith import bound, linear_form
from ir.expr import Binary, Buffer, Const, Expr, Load, Var, logical_and
from ir.lower.simplify import simplify_expr
from ir.node import Node, walk
from ir.program import (
    TRUE,
    Allocate,
    Block,
    BlockRealize,
    BufferRegion,
    BufferStore,
    For,
    IfThenElse,
    Program,
    Range,
    SeqStmt,
    Stmt,
    seq,
)
from ir.schedule.analysis import (
    bindings,
    binds_reduce,
    loop_ranges,
    readers,
    relaxed_region,
    store_of,
    writers,
)
from ir.schedule.state import (
    ScheduleError,
    blocks_under,
    find_block,
    fresh_names,
    loops_above,
    path_to,
    remove_stmt,
    replace_loop,
)
from ir.visit import post_order_rewrite, substitute

Region = list[tuple[Expr, int]]  # per dimension: (min, extent)


def _int(value: int) -> Const:
    return Const(value, "int64")


# ---------------------------------------------------------------------------
# Where things are


def _positions(program: Program) -> dict[tuple[str, str], int]:
    """Pre-order position of every loop ("loop", name) and block ("block", name)."""
    pos: dict[tuple[str, str], int] = {}

    def visit(s: Stmt) -> None:
        if isinstance(s, For):
            pos[("loop", s.var.name)] = len(pos)
            visit(s.body)
        elif isinstance(s, SeqStmt):
            for x in s.stmts:
                visit(x)
        elif isinstance(s, BlockRealize):
            pos[("block", s.block.name)] = len(pos)
        elif isinstance(s, IfThenElse):
            visit(s.then_case)
            if s.else_case is not None:
                visit(s.else_case)
        elif isinstance(s, Allocate):
            visit(s.body)

    visit(program.body)
    return pos


def _loop_path(program: Program, loop: str) -> list[For]:
    """`loop` and the loops enclosing it, outermost first."""
    path = path_to(program.body, lambda n: isinstance(n, For) and n.var.name == loop)
    if path is None:
        raise ScheduleError(f"loop {loop}: no such loop in {program.name}")
    return [s for s in path if isinstance(s, For)]


def _is_under(program: Program, block: str, loop: str) -> bool:
    return any(f.var.name == loop for f in loops_above(program, block))


def _inner_loops(program: Program, block: str, loop: str) -> list[For]:
    """The loops between `loop` (exclusive) and `block`; `loop` must enclose the block."""
    above = loops_above(program, block)
    names = [f.var.name for f in above]
    return above[names.index(loop) + 1 :]


def _const_ranges(loops: Sequence[For], what: str) -> dict[Var, tuple[int, int]]:
    for f in loops:
        if not isinstance(f.extent, Const):
            raise ScheduleError(
                f"{what}: loop {f.var.name} has a non-constant extent; its region is not constant"
            )
    return loop_ranges(list(loops))


def _loaded(node: Node, buffer: str) -> list[Load]:
    return [n for n in walk(node) if isinstance(n, Load) and n.buffer.name == buffer]


def _block_loads(block: Block, buffer: str) -> list[Load]:
    loads = _loaded(block.body, buffer)
    if block.init is not None:
        loads += _loaded(block.init, buffer)
    return loads


def _read_buffers(block: Block) -> list[str]:
    """Buffers the block loads (body and init), in first-use order, its own outputs excluded."""
    written = {w.buffer.name for w in block.writes}
    out: list[str] = []
    for part in (block.init, block.body):
        if part is None:
            continue
        for n in walk(part):
            if isinstance(n, Load) and n.buffer.name not in written and n.buffer.name not in out:
                out.append(n.buffer.name)
    return out


def _is_realize(name: str):
    return lambda n: isinstance(n, BlockRealize) and n.block.name == name


# ---------------------------------------------------------------------------
# Checks shared by the primitives


def _check_domain_predicate(r: BlockRealize, what: str) -> None:
    """Refuse a predicate that does more than keep iteration variables inside their domain.

    Splits guard `i_0 * 8 + i_1 < 37` where a binding is `i_0 * 8 + i_1` and its
    extent 37; such a guard can be dropped or re-derived when a block moves. Any
    other predicate would change which instances run, so moving the block is refused.
    """
    if r.predicate == TRUE:
        return
    binds = [(simplify_expr(v), iv.extent) for iv, v in zip(r.block.iter_vars, r.values)]
    for term in _conjuncts(r.predicate):
        if not _is_domain_bound(term, binds):
            raise ScheduleError(
                f'{what}: block "{r.block.name}" has a predicate that is not a bound of its domain; cannot move it'
            )


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, Binary) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _is_domain_bound(term: Expr, binds: list[tuple[Expr, Expr]]) -> bool:
    if not isinstance(term, Binary) or term.op not in ("lt", "le", "gt", "ge"):
        return False
    flip = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
    a, b, op = term.a, term.b, term.op
    if isinstance(a, Const) and not isinstance(b, Const):
        a, b, op = b, a, flip[op]
    if not isinstance(b, Const):
        return False
    c = int(b.value)
    lhs = simplify_expr(a)
    for value, extent in binds:
        if value != lhs or not isinstance(extent, Const):
            continue
        n = int(extent.value)
        if (
            (op == "lt" and c >= n)
            or (op == "le" and c >= n - 1)
            or (op == "ge" and c <= 0)
            or (op == "gt" and c < 0)
        ):
            return True
    return False


def _check_inputs_finished(
    program: Program,
    buffers: Sequence[str],
    before: tuple[str, str],
    shared: Sequence[For],
    what: str,
    *,
    strict: bool,
) -> None:
    """Every element of `buffers` the moved computation reads must be final where it now runs.

    A writer qualifies when it comes earlier in program order than `before` (a
    ("loop" | "block", name) position) and either lies outside every loop in
    `shared` (the loops around the new location: it has finished before they
    start), or, unless `strict`, writes each element in a single iteration of each
    shared loop around it, completely (no reduction spans that loop), so an element
    is final once written. `strict` is for moves whose reads may go earlier than a
    later iteration of a shared loop that the old reader waited for.
    """
    pos = _positions(program)
    start = pos[before]
    for name in buffers:
        for w in writers(program, name):
            w_loops = {f.var.name for f in loops_above(program, w.block.name)}
            common = [f for f in shared if f.var.name in w_loops]
            ok = pos[("block", w.block.name)] < start and not (strict and common)
            for f in common if ok else ():
                ok = not binds_reduce(w, f.var) and _writes_disjoint_across(program, w, f, what)
                if not ok:
                    break
            if not ok:
                raise ScheduleError(
                    f'{what}: it reads {name}, written by block "{w.block.name}", which is not finished '
                    "before the new location"
                )


def _writes_disjoint_across(program: Program, r: BlockRealize, f: For, what: str) -> bool:
    """Whether different iterations of loop `f` make block `r` write different elements."""
    inner = _inner_loops(program, r.block.name, f.var.name)
    if any(not isinstance(x.extent, Const) for x in inner):
        return False
    relax = loop_ranges(inner)
    binds = bindings(r)
    for w in r.block.writes:
        shape = _concrete_shape(w.buffer, what)
        idx = tuple(simplify_expr(substitute(rng.min, binds)) for rng in w.region)  # type: ignore[misc]
        if not _disjoint(relaxed_region(idx, relax, shape), f.var):
            return False
    return True


def _disjoint(region: Region, var: Var) -> bool:
    """Whether the region moves, in some dimension, by at least its extent per step of `var`."""
    for mn, ext in region:
        lin = linear_form(mn)
        if lin is not None and abs(lin[0].get(var, 0)) >= ext:
            return True
    return False


def _write_dims(r: BlockRealize, buffer: Buffer, what: str, *, all_iters: bool) -> list[int]:
    """For each dimension of `buffer`, the index of the iteration variable the block writes it with.

    The block must write `buffer` at distinct spatial iteration variables covering
    every spatial one (every one when `all_iters`), each over exactly that dimension
    (so the block's instances and the buffer's elements correspond one to one).
    """
    b = r.block
    regions = [w for w in b.writes if w.buffer.name == buffer.name]
    ivars = [iv.var for iv in b.iter_vars]
    dims: list[int] = []
    if len(regions) == 1 and all(
        isinstance(rg.extent, Const) and rg.extent.value == 1 for rg in regions[0].region
    ):
        for rng in regions[0].region:
            if rng.min not in ivars:
                dims = []
                break
            dims.append(ivars.index(rng.min))
    want = [k for k, iv in enumerate(b.iter_vars) if all_iters or iv.kind == "spatial"]
    ok = (
        len(dims) == len(buffer.shape)
        and sorted(dims) == want
        and all(b.iter_vars[k].kind == "spatial" for k in dims)
        and all(b.iter_vars[k].extent == buffer.shape[d] for d, k in enumerate(dims))
    )
    store = store_of(r)
    if ok and store is not None and store.buffer.name == buffer.name:
        ok = tuple(store.indices) == tuple(ivars[k] for k in dims)
    if not ok:
        raise ScheduleError(
            f'{what}: block "{b.name}" must write {buffer.name} at distinct spatial iteration variables, '
            "one per dimension over its full extent"
        )
    return dims


def _check_writes_finish(program: Program, r: BlockRealize, loop: str, what: str) -> None:
    """The values a block writes must be final once read: no reduction may span the loop."""
    for f in _loop_path(program, loop):
        if binds_reduce(r, f.var):
            raise ScheduleError(
                f'{what}: loop {f.var.name} feeds a reduction axis of block "{r.block.name}"; '
                f"its values are not final within one iteration of loop {loop}"
            )


def _check_kind(path: Sequence[For], loop: str, block: str) -> None:
    lp = path[-1]
    if lp.kind not in ("serial", "parallel"):
        raise ScheduleError(
            f'loop {loop}: is {lp.kind}; block "{block}" can only move under a serial or parallel loop'
        )
    for f in path:
        if f.kind == "vectorized":
            raise ScheduleError(
                f'loop {loop}: is inside vectorized loop {f.var.name}; cannot move block "{block}" there'
            )


def _check_parallel_disjoint(
    r: BlockRealize,
    values: Sequence[Expr],
    new_ranges: Mapping[Var, tuple[int, int]],
    path: Sequence[For],
    what: str,
) -> None:
    """Under a parallel loop, different iterations must write different elements.

    The block (with its new bindings and loops) writes, in one iteration of each
    parallel loop Q around the location, a region relaxed over everything inside Q;
    the regions of two iterations of Q are disjoint when, in some dimension, the
    region moves by at least its extent from one iteration to the next.
    """
    binds = {iv.var: v for iv, v in zip(r.block.iter_vars, values)}
    for q, f in enumerate(path):
        if f.kind != "parallel":
            continue
        relax = {**new_ranges, **_const_ranges(path[q + 1 :], what)}
        for w in r.block.writes:
            shape = _concrete_shape(w.buffer, what)
            idx = tuple(simplify_expr(substitute(rng.min, binds)) for rng in w.region)  # type: ignore[misc]
            if not _disjoint(relaxed_region(idx, relax, shape), f.var):
                raise ScheduleError(
                    f"{what}: iterations of parallel loop {f.var.name} would write overlapping parts of "
                    f'{w.buffer.name} (block "{r.block.name}"); compute it at a loop where they are disjoint'
                )


def _concrete_shape(buffer: Buffer, what: str) -> tuple[int, ...]:
    if not all(isinstance(s, Const) for s in buffer.shape):
        raise ScheduleError(f"{what}: buffer {buffer.name} has a symbolic shape; bind it first")
    return tuple(int(s.value) for s in buffer.shape)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------
# Regions


def _union(a: Region, b: Region, shape: tuple[int, ...]) -> Region:
    """A region covering both (per dimension; the whole dimension when no constant offset relates them)."""
    out: Region = []
    for (ma, ea), (mb, eb), size in zip(a, b, shape):
        if ma == mb:
            out.append((ma, max(ea, eb)))
            continue
        d = simplify_expr(mb - ma)
        if not isinstance(d, Const):
            out.append((_int(0), size))
            continue
        lo, hi = min(0, int(d.value)), max(ea, int(d.value) + eb)
        out.append((simplify_expr(ma + lo) if lo else ma, hi - lo))
    return [_clip(m, e, n) for (m, e), n in zip(out, shape)]


def _clip(mn: Expr, ext: int, size: int) -> tuple[Expr, int]:
    if isinstance(mn, Const):
        start, stop = max(0, int(mn.value)), min(size, int(mn.value) + ext)
        return _int(start), max(stop - start, 1)
    if ext >= size:
        return _int(0), size
    return mn, ext


def _exact_box(
    exprs: Sequence[Expr],
    relax: Mapping[Var, tuple[int, int]],
    env: Mapping[Var, tuple[int, int]],
    units: Sequence[int] | None = None,
) -> Region | None:
    """The exact union of `[e, e + unit)` over the `relax` loops, per expression, when it is a box.

    Each expression must be `base + sum(c_k * l_k)` with `base` free of relaxed
    loops and positive strides that leave no gap (mixed radix: 8*i0 + i1 with
    i1 < 8 and unit 1), and no relaxed loop may appear in two expressions (that
    would tie dimensions together, like f // 5 and f % 5). Returns (base, span)
    per expression, or None.
    """
    used: set[Var] = set()
    out: Region = []
    for d, e in enumerate(exprs):
        lin = linear_form(simplify_expr(e, env))
        if lin is None:
            return None
        terms, const = lin
        fixed: dict[Expr, int] = {}
        steps: list[tuple[int, int]] = []
        for atom, c in terms.items():
            if isinstance(atom, Var) and atom in relax:
                lo, hi = relax[atom]
                if hi == lo:
                    const += c * lo
                    continue
                if lo != 0 or c <= 0 or atom in used:
                    return None
                used.add(atom)
                steps.append((c, hi + 1))
            elif any(isinstance(v, Var) and v in relax for v in walk(atom)):
                return None
            else:
                fixed[atom] = c
        span = 1 if units is None else units[d]
        for c, n in sorted(steps):
            if c > span:
                return None
            span = c * (n - 1) + span
        out.append((simplify_expr(_rebuild(fixed, const)), span))
    return out


def _rebuild(terms: Mapping[Expr, int], const: int) -> Expr:
    e: Expr = _int(const)
    for atom, c in terms.items():
        e = e + (atom if c == 1 else atom * c)
    return e


def _consumer_region(
    program: Program, consumers: Sequence[BlockRealize], buffer: Buffer, loop: str, what: str
) -> Region:
    """What the consumers read of `buffer` in one iteration of `loop` (loops inside it relaxed)."""
    shape = _concrete_shape(buffer, what)
    region: Region | None = None
    for c in consumers:
        inner = _inner_loops(program, c.block.name, loop)
        relax = _const_ranges(inner, what)
        binds = bindings(c)
        for ld in _block_loads(c.block, buffer.name):
            idx = tuple(simplify_expr(substitute(i, binds)) for i in ld.indices)  # type: ignore[misc]
            part = relaxed_region(idx, relax, shape)
            region = part if region is None else _union(region, part, shape)
    assert region is not None
    return region


def _covers(region: Region, path: Sequence[For], shape: tuple[int, ...], what: str) -> bool:
    """Whether the region, over all iterations of the loops in `path`, covers the whole buffer."""
    ranges = _const_ranges(path, what)
    box = _exact_box([mn for mn, _ in region], ranges, ranges, [ext for _, ext in region])
    if box is None:
        return False
    for (base, span), size in zip(box, shape):
        if not isinstance(base, Const) or int(base.value) > 0 or int(base.value) + span < size:
            return False
    return True


# ---------------------------------------------------------------------------
# New loops for a moved block


def _new_nest(
    program: Program,
    r: BlockRealize,
    spans: Mapping[int, tuple[Expr, int]],
    path: Sequence[For],
) -> tuple[Stmt, tuple[Expr, ...], dict[Var, tuple[int, int]]]:
    """Fresh loops ax0, ax1, ... for a moved block: iteration variable k covers `spans[k]`
    (min + ax over the span, guarded when that may leave the domain) or its full extent."""
    names = fresh_names(program)
    env = loop_ranges(list(path))
    loops: list[tuple[Var, int]] = []
    values: list[Expr] = []
    conds: list[Expr] = []
    for k, iv in enumerate(r.block.iter_vars):
        extent = int(iv.extent.value)  # type: ignore[attr-defined]
        ax = Var(names.fresh(f"ax{k}"))
        if k in spans:
            mn, span = spans[k]
            value = ax if mn == _int(0) else (ax + mn if isinstance(mn, Const) else mn + ax)
            rng = bound(mn, env)
            if rng is None or rng[0] < 0:
                conds.append(value >= 0)
            if rng is None or rng[1] + span > extent:
                conds.append(value < extent)
        else:
            span, value = extent, ax
        loops.append((ax, span))
        values.append(value)
    pred = logical_and(*conds) if conds else TRUE
    stmt: Stmt = BlockRealize(tuple(values), pred, r.block)
    for ax, span in reversed(loops):
        stmt = For(ax, _int(span), "serial", stmt)
    return stmt, tuple(values), {ax: (0, span - 1) for ax, span in loops}


def _check_const_extents(r: BlockRealize, what: str) -> None:
    for iv in r.block.iter_vars:
        if not isinstance(iv.extent, Const):
            raise ScheduleError(
                f'{what}: block "{r.block.name}" has iteration variable {iv.var.name} of non-constant extent'
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
    path = _loop_path(program, loop)
    _check_kind(path, loop, block)
    outs = {w.buffer.name for w in r.block.writes}
    if len(outs) != 1:
        raise ScheduleError(
            f'{what}: block "{block}" writes {len(outs)} buffers; compute_at needs exactly one'
        )
    buf = r.block.writes[0].buffer
    if [w.block.name for w in writers(program, buf.name)] != [block]:
        raise ScheduleError(f"{what}: {buf.name} is also written by another block")
    _check_const_extents(r, what)
    dims = _write_dims(r, buf, what, all_iters=False)
    _check_domain_predicate(r, what)
    if _is_under(program, block, loop) and [b.block.name for b in blocks_under(path[-1])] == [
        block
    ]:
        raise ScheduleError(f'{what}: loop {loop} is in the nest of block "{block}" itself')

    consumers = readers(program, buf.name)
    if not consumers:
        raise ScheduleError(f'{what}: block "{block}" has no consumer (nothing reads {buf.name})')
    pos = _positions(program)
    for c in consumers:
        if not _is_under(program, c.block.name, loop):
            raise ScheduleError(
                f'{what}: loop {loop} does not enclose block "{c.block.name}", which reads {buf.name}'
            )
        if pos[("block", c.block.name)] < pos[("block", block)]:
            raise ScheduleError(
                f'{what}: block "{block}" is not before its consumer "{c.block.name}"'
            )
    inputs = [b for b in _read_buffers(r.block) if b != buf.name]
    is_output = buf.name in {b.name for b in program.outputs}
    # Over-approximated regions compute elements nobody reads yet: harmless, unless they are final.
    _check_inputs_finished(program, inputs, ("loop", loop), path, what, strict=is_output)

    region = _consumer_region(program, consumers, buf, loop, what)
    outer = {f.var for f in path}
    for mn, _ in region:
        stray = sorted(v.name for v in walk(mn) if isinstance(v, Var) and v not in outer)
        if stray:
            raise ScheduleError(
                f"{what}: the region of {buf.name} read in one iteration is not constant "
                f"(it depends on {', '.join(stray)})"
            )
    shape = _concrete_shape(buf, what)
    if buf.name in {b.name for b in program.outputs} and not _covers(region, path, shape, what):
        raise ScheduleError(
            f"{what}: {buf.name} is a program output and the consumers under loop {loop} do not read all of it"
        )

    spans = {dims[d]: region[d] for d in range(len(dims))}
    nest, values, new_ranges = _new_nest(program, r, spans, path)
    _check_parallel_disjoint(r, values, new_ranges, path, what)
    out = remove_stmt(program, _is_realize(block))
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
    path = _loop_path(program, loop)
    _check_kind(path, loop, block)
    _check_const_extents(c, what)
    reads = _read_buffers(c.block)
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
    _check_const_extents(p, what)
    p_dims = _write_dims(p, buf, what, all_iters=False)
    _check_domain_predicate(p, what)
    _check_domain_predicate(c, what)

    # The consumer reads the buffer at its own distinct spatial iteration variables.
    loads = {ld.indices for ld in _block_loads(c.block, buf.name)}
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
    pos = _positions(program)
    if pos[("block", block)] < pos[("block", p.block.name)]:
        raise ScheduleError(f'{what}: block "{block}" is not after its producer "{p.block.name}"')
    _check_writes_finish(program, p, loop, what)
    others = [b for b in reads if b != buf.name]
    _check_inputs_finished(program, others, ("loop", loop), path, what, strict=True)
    for w in c.block.writes:
        if [x.block.name for x in writers(program, w.buffer.name)] != [block]:
            raise ScheduleError(f"{what}: {w.buffer.name} is also written by another block")
        for rd in readers(program, w.buffer.name):
            if pos[("block", rd.block.name)] < pos[("block", block)] or _is_under(
                program, rd.block.name, loop
            ):
                raise ScheduleError(
                    f'{what}: block "{rd.block.name}" reads {w.buffer.name} and would run before block "{block}"'
                )

    # The box the producer writes in one iteration of `loop`.
    inner = _const_ranges(_inner_loops(program, p.block.name, loop), what)
    env = {**loop_ranges(path), **inner}
    p_binds = bindings(p)
    exprs = [p_binds[p.block.iter_vars[k].var] for k in p_dims]
    box = _exact_box(exprs, inner, env)
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
    nest, values, new_ranges = _new_nest(program, c, spans, path)
    _check_parallel_disjoint(c, values, new_ranges, path, what)
    out = remove_stmt(program, _is_realize(block))
    return replace_loop(out, loop, lambda f: replace(f, body=seq(f.body, nest)))


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
    if _loaded(store.value, buf.name):
        raise ScheduleError(f'{what}: block "{b.name}" reads its own buffer {buf.name}')
    _write_dims(r, buf, what, all_iters=True)
    _check_domain_predicate(r, what)
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
    pos = _positions(program)
    consumers = readers(program, buf.name)
    for c in consumers:
        if pos[("block", c.block.name)] < pos[("block", block)]:
            raise ScheduleError(
                f'{what}: block "{block}" is not before its consumer "{c.block.name}"'
            )
    # The expression is evaluated later, in the consumers: its inputs must be final by then.
    inputs = [b for b in _read_buffers(r.block) if b != buf.name]
    _check_inputs_finished(
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
        for ld in _block_loads(cb, buf.name):
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

    out = remove_stmt(program, _is_realize(block))

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

    Refused unless: the consumer is one store with no reduction, reads the buffer
    once, at its own distinct iteration variables (all of them), and is its only
    reader; the producer is an element-wise single store, the buffer's only
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
    candidates = [b for b in _read_buffers(cb) if b in allocs and writers(program, b)]
    if len(candidates) != 1:
        found = ", ".join(candidates) or "none"
        raise ScheduleError(
            f'{what}: block "{block}" must read exactly one intermediate buffer (reads {found})'
        )
    name = candidates[0]
    ws = writers(program, name)
    if len(ws) != 1:
        raise ScheduleError(f"{what}: {name} is written by several blocks")
    p = ws[0]
    if [x.block.name for x in readers(program, name)] != [block]:
        raise ScheduleError(f'{what}: {name} is also read by blocks other than "{block}"')
    pstore = _elementwise_store(program, p, what)
    buf = pstore.buffer
    p_dims = _write_dims(p, buf, what, all_iters=True)

    loads = _block_loads(cb, name)
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
    _check_domain_predicate(c, what)

    out_buf = cstore.buffer
    pos = _positions(program)
    if pos[("block", block)] < pos[("block", p.block.name)]:
        raise ScheduleError(f'{what}: block "{block}" is not after its producer "{p.block.name}"')
    if [x.block.name for x in writers(program, out_buf.name)] != [block]:
        raise ScheduleError(f"{what}: {out_buf.name} is also written by another block")
    if out_buf.name in _read_buffers(p.block):
        raise ScheduleError(
            f'{what}: block "{p.block.name}" reads {out_buf.name}, which block "{block}" writes'
        )
    for rd in readers(program, out_buf.name):
        if pos[("block", rd.block.name)] < pos[("block", block)]:
            raise ScheduleError(
                f'{what}: block "{rd.block.name}" reads {out_buf.name} before block "{block}"'
            )
    # The consumer's other inputs are read earlier, in the producer: they must be final by then.
    others = [b for b in _read_buffers(cb) if b != name]
    _check_inputs_finished(
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
    out = remove_stmt(program, _is_realize(block))
    out = replace(
        out,
        body=post_order_rewrite(
            out.body,
            lambda n: replace(n, block=new_block) if _is_realize(p.block.name)(n) else None,
        ),
    )
    return replace(out, allocs=tuple(a for a in out.allocs if a.name != name))
