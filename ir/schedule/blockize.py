"""blockize: the loops below a loop become one block with its own iteration domain.

    for i, j0:                              for i, j0:
      for j1 in range(16):                    with block("C_o"):  vi_o = spatial(64, i)
        for k in range(4):           ->                           vj_o = spatial(64, j0 * 16)
          with block("C"):                                        vk_o = reduce(4, 0)
            vi, vj, vk = i, j0*16+j1, k         for j1, k:
            ...                                   with block("C"): vi, vj, vk = vi_o, vj_o + j1, vk_o + k

(TensorIR's blockize.) Each iteration variable of the inner block is bound to
an outer part (the new block's iteration variable: the base the inner loops
start from) plus a linear combination of the inner loops. The new block reads
and writes the regions the inner loops touch, so the schedule sees the inner
computation as one unit — the unit `tensorize` replaces by an instruction. A
reduction's init moves to the new block, over the inner loops that feed only
spatial axes (the inner block then only updates). The inner block is opaque:
primitives see the new block, not what is inside.
"""

from __future__ import annotations

import math
from dataclasses import replace

from ir.arith import build_linear, linear_form
from ir.build import NameSupply
from ir.expr import Const, Expr, IterVar, Var
from ir.lower.simplify import simplify_expr
from ir.node import walk
from ir.program import TRUE, Block, BlockRealize, BufferRegion, For, Program, Range, Stmt
from ir.schedule.analysis import mentions, relaxed_region
from ir.schedule.state import ScheduleError, find_loop, fresh_names, replace_loop
from ir.visit import substitute


def loop_chain(top: For) -> tuple[list[For], BlockRealize] | None:
    """The perfectly nested loops from `top` down to the one block they hold, or None."""
    chain = [top]
    while isinstance(chain[-1].body, For):
        chain.append(chain[-1].body)
    body = chain[-1].body
    return (chain, body) if isinstance(body, BlockRealize) else None


def _split_binding(value: Expr, inner: set[Var], iv: IterVar, block: str) -> tuple[Expr, Expr, int]:
    """`value` as (outer, inner, g) with value = outer * g + inner: the inner part a sum of
    inner loop variables, g the largest factor of the outer part (so `vj = j0 * 16 + j1`
    gives the tile index j0 and 16, and the block's accesses keep that divisibility)."""
    lin = linear_form(simplify_expr(value))
    if lin is None:
        if any(isinstance(n, Var) and n in inner for n in walk(value)):
            raise ScheduleError(
                f'block "{block}": the binding of {iv.var.name} is not a linear function of the loops below'
            )
        return value, Const(0, "int64"), 1
    terms, const = lin
    outer_terms: dict[Expr, int] = {}
    inner_terms: dict[Expr, int] = {}
    for atom, c in terms.items():
        uses = {n for n in walk(atom) if isinstance(n, Var)} & inner
        if not uses:
            outer_terms[atom] = c
        elif isinstance(atom, Var):
            inner_terms[atom] = c
        else:
            raise ScheduleError(
                f'block "{block}": the binding of {iv.var.name} mixes loop '
                f"{sorted(v.name for v in uses)[0]} into a non-linear term; cannot blockize there"
            )
    g = math.gcd(const, *outer_terms.values())
    outer = (
        build_linear({a: c // g for a, c in outer_terms.items()}, const // g, "int64")
        if g
        else Const(0, "int64")
    )
    return outer, build_linear(inner_terms, 0, "int64"), max(g, 1)


def blockize(program: Program, loop: str) -> tuple[Program, str]:
    """Make the loops at and below `loop` (perfectly nested, over one block) one block.

    Returns the new outer block's name. Refused when the loops hold more than one
    statement, an extent is not a constant, the block's predicate depends on a loop
    below, or a binding is not linear in the loops below.
    """
    top = find_loop(program, loop)
    found = loop_chain(top)
    if found is None:
        raise ScheduleError(f"loop {loop}: the loops below must nest perfectly over one block")
    chain, r = found
    block = r.block
    if any(not isinstance(lp.extent, Const) for lp in chain):
        raise ScheduleError(f"loop {loop}: the loops below need constant extents to blockize")
    inner = {lp.var for lp in chain}
    if any(isinstance(n, Var) and n in inner for n in walk(r.predicate)):
        raise ScheduleError(
            f'block "{block.name}": its predicate depends on a loop below {loop} '
            "(an imperfect split); pad the loop or blockize below the split"
        )
    names = fresh_names(program)
    outer_ivs: list[IterVar] = []
    outer_vals: list[Expr] = []
    inner_vals: list[Expr] = []
    iv_map: dict[Var, Expr] = {}
    inner_parts: dict[Var, Expr] = {}
    for iv, value in zip(block.iter_vars, r.values):
        outer_part, inner_part, g = _split_binding(value, inner, iv, block.name)
        if outer_part == Const(0, "int64"):  # wholly inside: the outer variable is 0
            extent: Expr = Const(1, "int64")
        elif g == 1:
            extent = iv.extent
        else:
            extent = Const(-(-int(iv.extent.value) // g), "int64")  # type: ignore[attr-defined]
        vo = IterVar(Var(names.fresh(f"{iv.var.name}_o")), extent, iv.kind)
        outer_ivs.append(vo)
        outer_vals.append(outer_part)
        inner_vals.append(simplify_expr(vo.var * g + inner_part))
        iv_map[iv.var] = inner_vals[-1]
        inner_parts[iv.var] = inner_part
    ranges = {lp.var: (0, int(lp.extent.value) - 1) for lp in chain}  # type: ignore[attr-defined]

    def region(rg: BufferRegion) -> BufferRegion:
        mins = tuple(substitute(x.min, iv_map) for x in rg.region)
        relaxed = relaxed_region(mins, ranges, rg.buffer.concrete_shape())  # type: ignore[arg-type]
        return BufferRegion(
            rg.buffer,
            tuple(
                Range(mn, Const(ext + int(x.extent.value) - 1, "int64"))  # type: ignore[attr-defined]
                for (mn, ext), x in zip(relaxed, rg.region)
            ),
        )

    init = _outer_init(block, r, chain, iv_map, inner_parts, names) if block.init else None
    inner_block = replace(block, init=None)
    body: Stmt = BlockRealize(tuple(inner_vals), TRUE, inner_block)
    for lp in reversed(chain):
        body = replace(lp, body=body)
    outer = Block(
        names.fresh(f"{block.name}_o"),
        tuple(outer_ivs),
        tuple(region(x) for x in block.reads),
        tuple(region(x) for x in block.writes),
        body,
        init=init,
    )
    realize = BlockRealize(tuple(outer_vals), r.predicate, outer)
    return replace_loop(program, loop, lambda _: realize), outer.name


def _outer_init(
    block: Block,
    r: BlockRealize,
    chain: list[For],
    iv_map: dict[Var, Expr],
    inner_parts: dict[Var, Expr],
    names: NameSupply,
) -> Stmt:
    """The init over the inner loops that feed spatial axes only (renamed: names are unique)."""
    assert block.init is not None
    reduce_ivs = [iv.var for iv in block.iter_vars if iv.kind == "reduce"]
    if any(isinstance(n, Var) and n in reduce_ivs for n in walk(block.init)):
        raise ScheduleError(f'block "{block.name}": its init depends on a reduction axis')
    loops: list[For] = []
    for lp in chain:
        feeds = {iv.kind for iv in block.iter_vars if mentions(inner_parts[iv.var], lp.var)}
        if feeds == {"spatial", "reduce"}:
            raise ScheduleError(
                f'loop {lp.var.name}: feeds both spatial and reduction axes of block "{block.name}"; '
                "cannot separate the init from it"
            )
        if feeds == {"spatial"}:
            loops.append(lp)
    renamed = {lp.var: Var(names.fresh(f"{lp.var.name}_init")) for lp in loops}
    spatial_map = {v: substitute(e, renamed) for v, e in iv_map.items() if v not in reduce_ivs}
    stmt: Stmt = substitute(block.init, spatial_map, into_buffers=False)  # type: ignore[assignment]
    for lp in reversed(loops):
        stmt = For(renamed[lp.var], lp.extent, lp.kind, stmt)  # type: ignore[arg-type]
    return stmt
