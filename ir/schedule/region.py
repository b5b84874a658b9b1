"""What the compute-location primitives ask of a program: where, which region, is it legal.

Shared by compute_at/reverse_compute_at (:mod:`ir.schedule.compute_at`) and
compute_inline/reverse_compute_inline (:mod:`ir.schedule.inline`):

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

from ir.arith import bound, linear_form
from ir.expr import Binary, Buffer, Const, Expr, Load, Var, logical_and
from ir.lower.simplify import simplify_expr
from ir.node import Node, walk
from ir.program import (
    TRUE,
    Allocate,
    Block,
    BlockRealize,
    For,
    IfThenElse,
    Program,
    SeqStmt,
    Stmt,
)
from ir.schedule.analysis import (
    bindings,
    binds_reduce,
    loop_ranges,
    relaxed_region,
    store_of,
    writers,
)
from ir.schedule.state import (
    ScheduleError,
    fresh_names,
    loops_above,
    path_to,
)
from ir.visit import substitute

Region = list[tuple[Expr, int]]  # per dimension: (min, extent)


def _int(value: int) -> Const:
    return Const(value, "int64")


# ---------------------------------------------------------------------------
# Where things are


def statement_positions(program: Program) -> dict[tuple[str, str], int]:
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


def loop_path(program: Program, loop: str) -> list[For]:
    """`loop` and the loops enclosing it, outermost first."""
    path = path_to(program.body, lambda n: isinstance(n, For) and n.var.name == loop)
    if path is None:
        raise ScheduleError(f"loop {loop}: no such loop in {program.name}")
    return [s for s in path if isinstance(s, For)]


def is_under(program: Program, block: str, loop: str) -> bool:
    return any(f.var.name == loop for f in loops_above(program, block))


def inner_loops(program: Program, block: str, loop: str) -> list[For]:
    """The loops between `loop` (exclusive) and `block`; `loop` must enclose the block."""
    above = loops_above(program, block)
    names = [f.var.name for f in above]
    return above[names.index(loop) + 1 :]


def const_ranges(loops: Sequence[For], what: str) -> dict[Var, tuple[int, int]]:
    for f in loops:
        if not isinstance(f.extent, Const):
            raise ScheduleError(
                f"{what}: loop {f.var.name} has a non-constant extent; its region is not constant"
            )
    return loop_ranges(list(loops))


def loads_of(node: Node, buffer: str) -> list[Load]:
    return [n for n in walk(node) if isinstance(n, Load) and n.buffer.name == buffer]


def block_loads(block: Block, buffer: str) -> list[Load]:
    loads = loads_of(block.body, buffer)
    if block.init is not None:
        loads += loads_of(block.init, buffer)
    return loads


def read_buffers(block: Block) -> list[str]:
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


def is_realize_of(name: str):
    return lambda n: isinstance(n, BlockRealize) and n.block.name == name


# ---------------------------------------------------------------------------
# Checks shared by the primitives


def check_domain_predicate(r: BlockRealize, what: str) -> None:
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


def check_inputs_finished(
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
    pos = statement_positions(program)
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
    inner = inner_loops(program, r.block.name, f.var.name)
    if any(not isinstance(x.extent, Const) for x in inner):
        return False
    relax = loop_ranges(inner)
    binds = bindings(r)
    for w in r.block.writes:
        shape = concrete_shape(w.buffer, what)
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


def write_dims(r: BlockRealize, buffer: Buffer, what: str, *, all_iters: bool) -> list[int]:
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


def check_writes_finish(program: Program, r: BlockRealize, loop: str, what: str) -> None:
    """The values a block writes must be final once read: no reduction may span the loop."""
    for f in loop_path(program, loop):
        if binds_reduce(r, f.var):
            raise ScheduleError(
                f'{what}: loop {f.var.name} feeds a reduction axis of block "{r.block.name}"; '
                f"its values are not final within one iteration of loop {loop}"
            )


def check_loop_kind(path: Sequence[For], loop: str, block: str) -> None:
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


def check_parallel_disjoint(
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
        relax = {**new_ranges, **const_ranges(path[q + 1 :], what)}
        for w in r.block.writes:
            shape = concrete_shape(w.buffer, what)
            idx = tuple(simplify_expr(substitute(rng.min, binds)) for rng in w.region)  # type: ignore[misc]
            if not _disjoint(relaxed_region(idx, relax, shape), f.var):
                raise ScheduleError(
                    f"{what}: iterations of parallel loop {f.var.name} would write overlapping parts of "
                    f'{w.buffer.name} (block "{r.block.name}"); compute it at a loop where they are disjoint'
                )


def concrete_shape(buffer: Buffer, what: str) -> tuple[int, ...]:
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


def exact_box(
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


def consumer_region(
    program: Program, consumers: Sequence[BlockRealize], buffer: Buffer, loop: str, what: str
) -> Region:
    """What the consumers read of `buffer` in one iteration of `loop` (loops inside it relaxed)."""
    shape = concrete_shape(buffer, what)
    region: Region | None = None
    for c in consumers:
        inner = inner_loops(program, c.block.name, loop)
        relax = const_ranges(inner, what)
        binds = bindings(c)
        for ld in block_loads(c.block, buffer.name):
            idx = tuple(simplify_expr(substitute(i, binds)) for i in ld.indices)  # type: ignore[misc]
            part = relaxed_region(idx, relax, shape)
            region = part if region is None else _union(region, part, shape)
    assert region is not None
    return region


def covers_buffer(region: Region, path: Sequence[For], shape: tuple[int, ...], what: str) -> bool:
    """Whether the region, over all iterations of the loops in `path`, covers the whole buffer."""
    ranges = const_ranges(path, what)
    box = exact_box([mn for mn, _ in region], ranges, ranges, [ext for _, ext in region])
    if box is None:
        return False
    for (base, span), size in zip(box, shape):
        if not isinstance(base, Const) or int(base.value) > 0 or int(base.value) + span < size:
            return False
    return True


# ---------------------------------------------------------------------------
# New loops for a moved block


def new_nest(
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


def check_const_extents(r: BlockRealize, what: str) -> None:
    for iv in r.block.iter_vars:
        if not isinstance(iv.extent, Const):
            raise ScheduleError(
                f'{what}: block "{r.block.name}" has iteration variable {iv.var.name} of non-constant extent'
            )
