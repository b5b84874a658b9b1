"""Reduction primitives: decompose_reduction and rfactor.

`decompose_reduction` hoists a reduction's init out of its reduction loops (so
the update loop runs without an `if first iteration` test and the init can be
vectorized on its own); `rfactor` turns part of a reduction into a data-parallel
axis of a partial-result buffer, reduced again by a write-back block (so a
reduction loop can be parallelized or vectorized).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ir.arith import linear_form
from ir.build import NameSupply, combine, point_regions
from ir.compute import reduce_identity
from ir.evaluate import eval_expr
from ir.expr import Binary, Buffer, Const, Expr, IterVar, Load, Var, render
from ir.lower.simplify import simplify_expr
from ir.node import Node, walk
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
from ir.schedule.analysis import loop_ranges, mentions, readers, writers
from ir.schedule.cache import (
    insert_root,
    new_domain,
    point_region,
    program_buffer,
    wrap_nest,
    write_domain,
)
from ir.schedule.state import (
    ScheduleError,
    blocks_under,
    find_block,
    find_loop,
    fresh_names,
    loops_above,
    replace_loop,
    replace_realize,
    rewrite,
    root_index,
)
from ir.visit import substitute

_MAX_CHECKED_POINTS = 1 << 22

# The update forms rfactor recognises: B[idx] = op(B[idx], value), op -> combiner.
_COMBINERS = {"add": "sum", "max": "max", "min": "min"}


def _feeds(lp: For, values: Sequence[Expr]) -> bool:
    return any(mentions(v, lp.var) for v in values)


def _conjuncts(pred: Expr) -> list[Expr]:
    if pred == TRUE:
        return []
    if isinstance(pred, Binary) and pred.op == "and":
        return _conjuncts(pred.a) + _conjuncts(pred.b)
    return [pred]


def _and_all(terms: Sequence[Expr]) -> Expr:
    out: Expr = TRUE
    for t in terms:
        out = t if out == TRUE else Binary("and", out, t)
    return out


def _loop_vars_in(e: Node, loops: Sequence[For]) -> set[Var]:
    wanted = {lp.var for lp in loops}
    return {n for n in walk(e) if isinstance(n, Var) and n in wanted}


def _flatten_seqs(program: Program) -> Program:
    """Nested sequences (from inserting next to a loop in a sequence) become one."""
    return rewrite(
        program,
        lambda n: (
            seq(*n.stmts)
            if isinstance(n, SeqStmt) and any(isinstance(s, SeqStmt) for s in n.stmts)
            else None
        ),
    )


# ---------------------------------------------------------------------------
# decompose_reduction


def decompose_reduction(program: Program, block: str, loop: str) -> tuple[Program, str]:
    """Move a reduction block's init into its own block, placed just before `loop`.

        for i, j:
          for r:
            with block("C"): init: C[vi, vj] = 0.0; C[vi, vj] = C[vi, vj] + A[vi, vr] * B[vr, vj]
      decompose_reduction("C", j) ->
        for i:
          for j_init: with block("C_init"): C[vi_init, vj_init] = 0.0
          for j, r: with block("C"): C[vi, vj] = C[vi, vj] + A[vi, vr] * B[vr, vj]

    The init nest repeats the loops at and below `loop` that feed spatial axes
    only (reduction loops are not repeated). No loop outside `loop` may feed a
    reduction axis: the init would then run again in the middle of the reduction.
    Nor may the loops inside `loop` repeat an element's reduction (a loop feeding
    no axis, or overlapping tiles after compute_at): each repetition starts from
    the init, which is then no longer there. Returns the init block's name.
    """
    r = find_block(program, block)
    blk = r.block
    if blk.init is None:
        raise ScheduleError(f'block "{block}": has no init to decompose')
    loops = loops_above(program, block)
    pos = next((i for i, lp in enumerate(loops) if lp.var.name == loop), None)
    if pos is None:
        find_loop(program, loop)  # names a missing loop as such
        raise ScheduleError(f'loop {loop}: is not an ancestor of block "{block}"')
    spatial_vals = [v for iv, v in zip(blk.iter_vars, r.values) if iv.kind == "spatial"]
    reduce_vals = [v for iv, v in zip(blk.iter_vars, r.values) if iv.kind == "reduce"]
    for lp in loops[:pos]:
        if _feeds(lp, reduce_vals):
            raise ScheduleError(
                f'loop {lp.var.name}: outside loop {loop} but feeds a reduction axis of block "{block}"; '
                "the init would run more than once per output element"
            )
    inner_spatial: list[For] = []
    inner_reduce: list[For] = []
    inner_other: list[For] = []
    for lp in loops[pos:]:
        s, rd = _feeds(lp, spatial_vals), _feeds(lp, reduce_vals)
        if s and rd:
            raise ScheduleError(
                f'loop {lp.var.name}: feeds both spatial and reduction axes of block "{block}"; '
                "cannot separate the init from it"
            )
        if not (s or rd or lp.extent == Const(1, lp.extent.dtype)):
            # The whole reduction repeats in each of its iterations (recomputation
            # after compute_at); the init must too, so it cannot go above it.
            raise ScheduleError(
                f'loop {lp.var.name}: feeds no axis of block "{block}" and repeats its reduction; '
                f"the init cannot be hoisted above it (decompose at a loop inside {lp.var.name})"
            )
        (inner_spatial if s else inner_reduce if rd else inner_other).append(lp)
    _check_single_visit(blk, spatial_vals, loops[:pos], inner_spatial, loop)
    _check_no_other_access(blk, loops[pos], loop)

    # The init's guard: the block's guard at the first step of the reduction
    # (reduction loops at 0), which is when the block's own init used to run;
    # conditions that then always hold (those of a split reduction loop) go.
    ranges = loop_ranges(loops)
    kept: list[Expr] = []
    for term in _conjuncts(r.predicate):
        zeros = {lp.var: Const(0, lp.var.dtype) for lp in (*inner_reduce, *inner_other)}
        at_start = simplify_expr(substitute(term, zeros), ranges)  # type: ignore[arg-type]
        if at_start != Const(True, "bool"):
            kept.append(at_start)
    reduce_ivs = {iv.var for iv in blk.iter_vars if iv.kind == "reduce"}
    if any(isinstance(n, Var) and n in reduce_ivs for n in walk(blk.init)) or any(
        isinstance(n, Var) and n in reduce_ivs for w in blk.writes for n in walk(w)
    ):
        raise ScheduleError(
            f'block "{block}": its init or written region depends on a reduction axis'
        )

    names = fresh_names(program)
    init_name = names.fresh(f"{block}_init")
    loop_map: dict[Var, Expr] = {
        lp.var: Var(names.fresh(f"{lp.var.name}_init")) for lp in inner_spatial
    }
    iv_map: dict[Var, Expr] = {}
    init_ivs: list[IterVar] = []
    for iv in blk.iter_vars:
        if iv.kind == "spatial":
            new = IterVar(Var(names.fresh(f"{iv.var.name}_init")), iv.extent, "spatial")
            iv_map[iv.var] = new.var
            init_ivs.append(new)
    init_stmt: Stmt = substitute(blk.init, iv_map, into_buffers=False)  # type: ignore[assignment]
    init_block = Block(
        init_name,
        tuple(init_ivs),
        point_regions([n for n in walk(init_stmt) if isinstance(n, Load)]),
        tuple(substitute(w, iv_map, into_buffers=False) for w in blk.writes),  # type: ignore[misc]
        init_stmt,
    )
    realize = BlockRealize(
        tuple(substitute(v, loop_map) for v in spatial_vals),  # type: ignore[misc]
        substitute(_and_all(kept), loop_map),  # type: ignore[arg-type]
        init_block,
    )
    nest: Stmt = realize
    for lp in reversed(inner_spatial):
        nest = For(loop_map[lp.var], substitute(lp.extent, loop_map), lp.kind, nest, lp.annotations)  # type: ignore[arg-type]

    program = replace_realize(program, block, lambda x: replace(x, block=replace(blk, init=None)))
    program = replace_loop(program, loop, lambda f: seq(nest, f))
    return _flatten_seqs(program), init_name


def _check_single_visit(
    blk: Block, spatial_vals: Sequence[Expr], outer: Sequence[For], inner: Sequence[For], loop: str
) -> None:
    """Inside `loop`, the spatial loops must reach each output element only once.

    The init then runs once before each element's whole reduction, as it did when
    it sat in the block. Loops that reach an element twice (an overlapping tile
    after compute_at) recompute its reduction from scratch each time; a hoisted
    init would let the second pass add onto the first. Linear bindings in the
    mixed-radix form splits make are accepted at once; otherwise the loops are
    enumerated: the inner ones alone when the bindings are linear (the outer
    loops only shift them), else every loop the bindings mention.
    """
    inner = [lp for lp in inner if lp.extent != Const(1, lp.extent.dtype)]
    if not inner:
        return
    if any(not isinstance(lp.extent, Const) for lp in (*outer, *inner)):
        raise ScheduleError(f"loop {loop}: a loop around the block has a non-constant extent")
    forms = [linear_form(simplify_expr(v)) for v in spatial_vals]
    linear = all(f is not None and all(isinstance(a, Var) for a in f[0]) for f in forms)
    if linear and _mixed_radix(forms, inner):  # type: ignore[arg-type]
        return
    domain = list(inner) if linear else [*(lp for lp in outer if _feeds(lp, spatial_vals)), *inner]
    shape = tuple(int(lp.extent.value) for lp in domain)  # type: ignore[attr-defined]
    points = math.prod(shape)
    if points > _MAX_CHECKED_POINTS:
        raise ScheduleError(
            f'loop {loop}: too many iterations ({points}) to check that block "{blk.name}" '
            "reaches each element once inside it"
        )
    grids = np.meshgrid(*(np.arange(n, dtype=np.int64) for n in shape), indexing="ij")
    env = {lp.var: g for lp, g in zip(domain, grids)}
    others = {
        n: Const(0, n.dtype)
        for v in spatial_vals
        for n in walk(v)
        if isinstance(n, Var) and n not in env
    }
    mask = np.ones(shape, dtype=bool)
    cols = [
        np.broadcast_to(eval_expr(substitute(v, others), env, {}, mask), shape).ravel()  # type: ignore[arg-type]
        for v in spatial_vals
    ]
    if not linear:
        cols += [g.ravel() for lp, g in zip(domain, grids) if lp not in inner]
    if not _all_distinct(cols, points):
        raise ScheduleError(
            f'loop {loop}: the loops inside it reach some element of block "{blk.name}" more than once '
            "(recomputation); the init cannot be hoisted above them"
        )


def _mixed_radix(forms: Sequence[tuple[dict[Expr, int], int]], inner: Sequence[For]) -> bool:
    """Sufficient for a one-to-one map: each inner loop feeds one axis, and within an
    axis each loop's stride exceeds the span of all smaller-stride loops together."""
    extent = {lp.var: int(lp.extent.value) for lp in inner}  # type: ignore[attr-defined]
    seen: set[Expr] = set()
    for terms, _ in forms:
        mine = sorted(
            ((abs(c), extent[a]) for a, c in terms.items() if a in extent), key=lambda t: t[0]
        )
        seen.update(a for a in terms if a in extent)
        span = 0
        for stride, n in mine:
            if stride <= span:
                return False
            span += stride * (n - 1)
    used = sum(1 for terms, _ in forms for a in terms if a in extent)
    return used == len(seen) == len(extent)


def _all_distinct(cols: list[np.ndarray], points: int) -> bool:
    """Whether the rows of `cols` are pairwise different (one int64 key per row when it fits)."""
    if not cols:
        return points <= 1
    key = np.zeros(points, dtype=np.int64)
    radix = 1
    for c in cols:
        lo, hi = int(c.min()), int(c.max())
        radix *= hi - lo + 1
        if radix >= 1 << 62:
            return len(np.unique(np.stack(cols, axis=1), axis=0)) == points
        key = key * (hi - lo + 1) + (c - lo)
    if radix <= 8 * points + 64:  # dense keys: count them
        return int(np.bincount(key, minlength=1).max()) <= 1
    key.sort()
    return not bool((key[1:] == key[:-1]).any())


def _check_no_other_access(blk: Block, lp: For, loop: str) -> None:
    """The init now runs before the whole of `loop`: nothing else there may see that early."""
    under = blocks_under(lp)
    at = next(i for i, x in enumerate(under) if x.block.name == blk.name)
    written = {w.buffer.name for w in blk.writes}
    for i, other in enumerate(under):
        if other.block.name == blk.name:
            continue
        writes = written & {w.buffer.name for w in other.block.writes}
        reads = written & {n.buffer.name for n in walk(other.block) if isinstance(n, Load)}
        if writes or (reads and i < at):
            buf = sorted(writes or reads)[0]
            raise ScheduleError(
                f'loop {loop}: block "{other.block.name}" inside it also accesses {buf}, which the init '
                f'of block "{blk.name}" would now write before it'
            )


def _linear_in_vars(e: Expr) -> bool:
    lin = linear_form(e)
    return lin is not None and all(isinstance(atom, Var) for atom in lin[0])


# ---------------------------------------------------------------------------
# rfactor


def rfactor(program: Program, loop: str, factor_axis: int) -> tuple[Program, str]:
    """Make a reduction loop a spatial axis of partial results, reduced by a write-back.

        for i, r_0, r_1:
          with block("Y"): vr = reduce(r_0 * 8 + r_1); init: Y[vi] = 0.0; Y[vi] = Y[vi] + X[vi, vr]
      rfactor(r_1, 0) ->
        Y_rf = alloc(float32[8, M])
        for i, r_0, r_1:
          with block("Y_rf"): vi = spatial(i); vr_1 = spatial(8, r_1); vr_0 = reduce(r_0)
            init: Y_rf[vr_1, vi] = 0.0
            Y_rf[vr_1, vi] = Y_rf[vr_1, vi] + X[vi, vr_0 * 8 + vr_1]
        for ax0, ax1:
          with block("Y"): vax0 = spatial(M, ax0); vax1 = reduce(8, ax1)
            init: Y[vax0] = 0.0
            Y[vax0] = Y[vax0] + Y_rf[vax1, vax0]

    The block under `loop` must be the only one and update `B[idx] = B[idx] op v`
    with op a sum, max or min; `loop` must feed reduction axes only. The partial
    buffer has the loop's extent as an extra dimension at `factor_axis` among the
    output's dimensions. Returns the rfactor block's name.
    """
    f = _check_rfactor(program, loop, factor_axis)
    names = fresh_names(program)
    buf = f.buf
    rf_buf = Buffer(
        names.fresh(f"{f.out.name}_rf"),
        (*buf.shape[:factor_axis], f.lp.extent, *buf.shape[factor_axis:]),
        buf.dtype,
    )
    rf_name = rf_buf.name if f.name == f.out.name else names.fresh(f"{f.name}_rf")
    rf_realize = _rfactor_realize(f, names, rf_buf, rf_name, factor_axis)
    wb_loops, wb = _write_back(f, names, rf_buf, factor_axis)
    program = replace_realize(program, f.name, lambda _: rf_realize)
    return insert_root(program, f.here + 1, wrap_nest(wb, wb_loops), [rf_buf]), rf_name


@dataclass(frozen=True)
class _Rfactor:
    """What rfactor learnt while checking its legality, for building the two blocks."""

    lp: For
    r: BlockRealize
    spatial_vals: list[Expr]
    red_loops: list[For]
    op: str
    out: Buffer
    idx: tuple[Expr, ...]
    value: Expr
    init_value: Expr
    buf: Buffer
    here: int
    wb_domain: list[IterVar]

    @property
    def name(self) -> str:
        return self.r.block.name


def _check_rfactor(program: Program, loop: str, factor_axis: int) -> _Rfactor:
    """The checks of rfactor, in its order; refuses with ScheduleError."""
    lp = find_loop(program, loop)
    under = blocks_under(lp)
    if len(under) != 1:
        raise ScheduleError(
            f"loop {loop}: has {len(under)} blocks under it; rfactor needs exactly one"
        )
    r = under[0]
    blk = r.block
    name = blk.name
    if not blk.is_reduction:
        raise ScheduleError(f'loop {loop}: block "{name}" under it is not a reduction')
    if not isinstance(lp.extent, Const):
        raise ScheduleError(f"loop {loop}: extent is not a constant")
    spatial_vals = [v for iv, v in zip(blk.iter_vars, r.values) if iv.kind == "spatial"]
    reduce_vals = [v for iv, v in zip(blk.iter_vars, r.values) if iv.kind == "reduce"]
    if _feeds(lp, spatial_vals):
        raise ScheduleError(
            f'loop {loop}: feeds a spatial axis of block "{name}"; only a reduction loop can be factored'
        )
    if not _feeds(lp, reduce_vals):
        raise ScheduleError(f'loop {loop}: feeds no reduction axis of block "{name}"')
    loops = loops_above(program, name)
    red_loops = [x for x in loops if _feeds(x, reduce_vals)]
    for x in red_loops:
        if _feeds(x, spatial_vals):
            raise ScheduleError(
                f'loop {x.var.name}: feeds both spatial and reduction axes of block "{name}"; cannot rfactor'
            )
    loop_vars = {x.var for x in loops}
    if any(isinstance(n, Var) and n not in loop_vars for v in reduce_vals for n in walk(v)):
        raise ScheduleError(
            f'block "{name}": a reduction axis is bound to something other than its loops'
        )
    op, out, idx, value, init_value = _recognise(blk)
    if (
        isinstance(factor_axis, bool)
        or not isinstance(factor_axis, int)
        or not 0 <= factor_axis <= len(idx)
    ):
        raise ScheduleError(
            f"loop {loop}: factor_axis {factor_axis!r} out of range; {out.name} has {len(idx)} dimensions, "
            f"so it must be in [0, {len(idx)}]"
        )
    _check_guard_starts(r, red_loops, lp)
    buf = program_buffer(program, out.name)
    if buf is None:
        raise ScheduleError(
            f'block "{name}": writes {out.name}, local to a block; cannot rfactor it'
        )
    here = root_index(program, name)
    for other in [*writers(program, out.name), *readers(program, out.name)]:
        if other.block.name != name and root_index(program, other.block.name) == here:
            raise ScheduleError(
                f'block "{name}": block "{other.block.name}" accesses {out.name} in the same top-level nest; '
                "it would see the result before the write-back"
            )
    wb_domain = write_domain(blk, idx, out.name)
    if any(isinstance(n, Var) and n not in {iv.var for iv in wb_domain} for n in walk(init_value)):
        raise ScheduleError(
            f'block "{name}": its init value depends on more than the written index'
        )
    return _Rfactor(
        lp, r, spatial_vals, red_loops, op, out, idx, value, init_value, buf, here, wb_domain
    )


def _rfactor_realize(
    f: _Rfactor, names: NameSupply, rf_buf: Buffer, rf_name: str, factor_axis: int
) -> BlockRealize:
    """The rfactor block: `loop` becomes a spatial axis, the other reduction loops get one
    reduction axis each, the old axes are expressions of them."""
    lp, r, blk, loop = f.lp, f.r, f.r.block, f.lp.var.name
    idx, red_loops, spatial_vals, out, value = f.idx, f.red_loops, f.spatial_vals, f.out, f.value
    combiner = _COMBINERS[f.op]
    identity = reduce_identity(combiner, f.buf.dtype)
    rf_iv = IterVar(Var(names.fresh(f"v{loop}")), lp.extent, "spatial")
    other_red = [x for x in red_loops if x.var != lp.var]
    red_ivs = [IterVar(Var(names.fresh(f"v{x.var.name}")), x.extent, "reduce") for x in other_red]
    loop_to_iv: dict[Var, Expr] = {
        lp.var: rf_iv.var,
        **{x.var: iv.var for x, iv in zip(other_red, red_ivs)},
    }
    axis_map: dict[Var, Expr] = {
        iv.var: substitute(v, loop_to_iv)  # type: ignore[misc]
        for iv, v in zip(blk.iter_vars, r.values)
        if iv.kind == "reduce"
    }
    rf_idx = (*idx[:factor_axis], rf_iv.var, *idx[factor_axis:])
    new_value: Expr = substitute(value, axis_map, into_buffers=False)  # type: ignore[assignment]
    rf_block = Block(
        rf_name,
        (*(iv for iv in blk.iter_vars if iv.kind == "spatial"), rf_iv, *red_ivs),
        tuple(
            substitute(rd, axis_map, into_buffers=False)  # type: ignore[misc]
            for rd in blk.reads
            if rd.buffer.name != out.name
        ),
        (point_region(rf_buf, rf_idx),),
        BufferStore(rf_buf, combine(combiner, Load(rf_buf, rf_idx), new_value), rf_idx),
        BufferStore(rf_buf, identity, rf_idx),
        blk.alloc_buffers,
        blk.annotations,
    )
    return BlockRealize((*spatial_vals, lp.var, *(x.var for x in other_red)), r.predicate, rf_block)


def _write_back(
    f: _Rfactor, names: NameSupply, rf_buf: Buffer, factor_axis: int
) -> tuple[list[For], Block]:
    """The write-back block (the original name), reducing the new dimension, and its loops."""
    combiner, out, idx, name = _COMBINERS[f.op], f.out, f.idx, f.name
    wb_loops, wb_ivs = new_domain(
        names, [*((iv.extent, "spatial") for iv in f.wb_domain), (f.lp.extent, "reduce")]
    )
    wb_map: dict[Var, Expr] = {old.var: new.var for old, new in zip(f.wb_domain, wb_ivs)}
    wb_idx = tuple(substitute(i, wb_map) for i in idx)
    wb_rf_idx = (*wb_idx[:factor_axis], wb_ivs[-1].var, *wb_idx[factor_axis:])
    wb_init_value: Expr = substitute(f.init_value, wb_map, into_buffers=False)  # type: ignore[assignment]
    partial = Load(rf_buf, wb_rf_idx)  # type: ignore[arg-type]
    wb = Block(
        name,
        tuple(wb_ivs),
        (
            point_region(rf_buf, wb_rf_idx),  # type: ignore[arg-type]
            *point_regions([n for n in walk(wb_init_value) if isinstance(n, Load)]),
        ),
        (point_region(out, wb_idx),),  # type: ignore[arg-type]
        BufferStore(out, combine(combiner, Load(out, wb_idx), partial), wb_idx),  # type: ignore[arg-type]
        BufferStore(out, wb_init_value, wb_idx),  # type: ignore[arg-type]
    )
    return wb_loops, wb


def _recognise(blk: Block) -> tuple[str, Buffer, tuple[Expr, ...], Expr, Expr]:
    """(op, buffer, index, value, init value) of `B[idx] = op(B[idx], value)`, or refuse."""
    body, init = blk.body, blk.init
    what = f'block "{blk.name}"'
    if not isinstance(body, BufferStore):
        raise ScheduleError(
            f"{what}: its body is not a single store; rfactor needs B[i] = B[i] + value (or max/min)"
        )
    out, idx = body.buffer, body.indices
    v = body.value
    if not (isinstance(v, Binary) and v.op in _COMBINERS):
        raise ScheduleError(
            f"{what}: update {render(v)} is not a sum, max or min combination; cannot rfactor"
        )
    acc = Load(out, idx)
    if v.a == acc:
        value = v.b
    elif v.b == acc:
        value = v.a
    else:
        raise ScheduleError(
            f"{what}: update {render(v)} does not combine {render(acc)} with a value; cannot rfactor"
        )
    if any(isinstance(n, Load) and n.buffer.name == out.name for n in walk(value)):
        raise ScheduleError(f"{what}: the reduced value reads {out.name} itself; cannot rfactor")
    if not isinstance(init, BufferStore) or init.buffer.name != out.name or init.indices != idx:
        raise ScheduleError(
            f"{what}: has no init storing to {render(acc)} (decomposed already?); cannot rfactor"
        )
    if any(isinstance(n, Load) and n.buffer.name == out.name for n in walk(init.value)):
        raise ScheduleError(f"{what}: its init reads {out.name}; cannot rfactor")
    if len(blk.writes) != 1 or blk.writes[0] != BufferRegion(
        out, tuple(Range(i, Const(1, "int64")) for i in idx)
    ):
        raise ScheduleError(f"{what}: writes more than {render(acc)}; cannot rfactor")
    return v.op, out, idx, value, init.value


def _check_guard_starts(r: BlockRealize, red_loops: list[For], lp: For) -> None:
    """Every partial result must be initialised: its first reduction step must pass the guard.

    The rfactor block's init runs when the other reduction loops are all 0; for
    each value of `lp` that iteration must not be cut by the block's predicate
    (an over-sized split can leave whole partial rows without any element).
    """
    extent = int(lp.extent.value)  # type: ignore[attr-defined]
    for term in _conjuncts(r.predicate):
        on_reduce = _loop_vars_in(term, red_loops)
        if not on_reduce:
            continue
        others = {n for n in walk(term) if isinstance(n, Var)} - on_reduce
        zeros = {x.var: Const(0, x.var.dtype) for x in red_loops if x.var != lp.var}
        holds = simplify_expr(substitute(term, zeros), {lp.var: (0, extent - 1)})  # type: ignore[arg-type]
        if others or holds != Const(True, "bool"):
            raise ScheduleError(
                f'loop {lp.var.name}: the guard {render(term)} of block "{r.block.name}" would leave some '
                "partial results without a first step (uninitialised); use a tighter split"
            )
