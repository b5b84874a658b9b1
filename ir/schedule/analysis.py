"""What primitives need to know about a program: bindings, producers, regions."""

from __future__ import annotations

from collections.abc import Mapping

from ir.arith import bound, build_linear, linear_form
from ir.expr import Const, Expr, Load, Var
from ir.lower.simplify import simplify_expr
from ir.node import walk
from ir.program import BlockRealize, BufferStore, For, Program
from ir.schedule.state import all_blocks


def bindings(r: BlockRealize) -> dict[Var, Expr]:
    return {iv.var: v for iv, v in zip(r.block.iter_vars, r.values)}


def mentions(e: Expr, var: Var) -> bool:
    return any(n == var for n in walk(e) if isinstance(n, Var))


def binds_reduce(r: BlockRealize, loop_var: Var) -> bool:
    """Whether the loop feeds a reduction iteration variable of this block."""
    return any(
        iv.kind == "reduce" and mentions(v, loop_var) for iv, v in zip(r.block.iter_vars, r.values)
    )


def writers(program: Program, buffer: str) -> list[BlockRealize]:
    return [r for r in all_blocks(program) if any(w.buffer.name == buffer for w in r.block.writes)]


def readers(program: Program, buffer: str) -> list[BlockRealize]:
    out = []
    for r in all_blocks(program):
        body_loads = [n for n in walk(r.block.body) if isinstance(n, Load)]
        if any(ld.buffer.name == buffer for ld in body_loads) and not any(
            w.buffer.name == buffer for w in r.block.writes
        ):
            out.append(r)
    return out


def output_names(program: Program) -> set[str]:
    return {b.name for b in program.outputs}


def loop_ranges(loops: list[For]) -> dict[Var, tuple[int, int]]:
    out = {}
    for lp in loops:
        if isinstance(lp.extent, Const):
            out[lp.var] = (0, int(lp.extent.value) - 1)
    return out


def relaxed_region(
    indices: tuple[Expr, ...],
    relax: Mapping[Var, tuple[int, int]],
    full: tuple[int, ...],
) -> list[tuple[Expr, int]]:
    """For each index: (min, extent) over all values of the `relax` variables.

    Variables not in `relax` stay symbolic in `min`; the extent must come out as a
    constant. A dimension that cannot be analysed covers the whole buffer (correct,
    only less compact). Regions are clipped to the buffer.
    """
    region: list[tuple[Expr, int]] = []
    for idx, size in zip(indices, full):
        region.append(_dim_region(simplify_expr(idx, relax), relax, size))
    return region


def _dim_region(idx: Expr, relax: Mapping[Var, tuple[int, int]], size: int) -> tuple[Expr, int]:
    lin = linear_form(idx)
    if lin is None:
        return Const(0, "int64"), size
    terms, const = lin
    fixed: dict[Expr, int] = {}
    lo = hi = 0
    relaxed_atoms = 0
    for atom, coeff in terms.items():
        if isinstance(atom, Var) and atom in relax:
            a, b = relax[atom]
            lo += min(coeff * a, coeff * b)
            hi += max(coeff * a, coeff * b)
            relaxed_atoms += 1
        elif any(isinstance(v, Var) and v in relax for v in walk(atom)):
            rng = bound(atom, relax)
            if rng is None or any(isinstance(v, Var) and v not in relax for v in walk(atom)):
                return Const(0, "int64"), size
            a, b = rng
            lo += min(coeff * a, coeff * b)
            hi += max(coeff * a, coeff * b)
        else:
            fixed[atom] = coeff
    extent = hi - lo + 1
    if not fixed:
        start = max(0, const + lo)
        stop = min(size, const + hi + 1)
        return Const(start, "int64"), max(stop - start, 1)
    if extent >= size:
        return Const(0, "int64"), size
    return build_linear(fixed, const + lo, "int64"), extent


def store_of(r: BlockRealize) -> BufferStore | None:
    body = r.block.body
    return body if isinstance(body, BufferStore) else None
