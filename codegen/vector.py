"""Vectorized loops: the vector width, and when a loop may be vectorized at all.

A `vectorized` loop of extent N runs as N // W chunks of W lanes, then the
N % W remainder as narrower vectors of a power of two lanes each (largest
first, at least 2), then scalar code for a last lane. W is the loop's
`vector_width` annotation, else `default_lanes`: N itself when N is a power of
two that fits the cap (4 registers' worth: LLVM splits wide vectors into
native registers, which also unrolls the loop body); for an N of whole
registers that is not a power of two (48 = three AVX-512 registers) the widest
power-of-two number of registers that divides it; for an N wider than a
register but not whole registers, the widest power of two below it (40 lanes:
32, then a remainder of 8). LLVM never sees a vector that spans registers
without filling them, such as `<48 x float>` or `<40 x float>`: it legalises
those with shuffles and spills, which costs an order of magnitude or more.

Vectorizing reorders work: every lane of an inner loop runs before the next
iteration of that inner loop. The plan refuses (and codegen falls back to a
serial loop, correct but slow) when that could change the result:
- a store whose address does not advance with the loop (stride 0) of a value
  that varies across lanes (a reduction over the vectorized axis);
- a store at a non-affine address (lanes could collide);
- a load of a buffer written in the loop at another address than the store's;
- a guard (`if`) that varies across lanes, a scratch allocation, a parallel loop;
- a `select` that varies across lanes and guards a memory load (both sides would
  be evaluated for every lane).
"""

from __future__ import annotations

from dataclasses import dataclass

from ir.arith import linear_in
from ir.expr import Const, Expr, Load, Select, Var
from ir.lower.simplify import simplify_expr
from ir.node import walk
from ir.program import Allocate, BufferStore, For, IfThenElse, SeqStmt, Stmt


@dataclass(frozen=True)
class VectorPlan:
    lanes: int
    chunks: int
    tail: int
    """Lanes after the chunks: run as `segments`, then scalar code for what is left."""

    @property
    def segments(self) -> tuple[int, ...]:
        """The tail's vectors, a power of two lanes each, widest first; at most one lane is left."""
        out, rest = [], self.tail
        while rest >= 2:
            width = 1 << (rest.bit_length() - 1)
            out.append(width)
            rest -= width
        return tuple(out)


def vector_cap(vector_bits: int) -> int:
    return max(4, min(64, 4 * vector_bits // 32))


def default_lanes(n: int, register_lanes: int, max_lanes: int) -> int:
    """The lanes of a vectorized loop of extent `n` without a `vector_width` hint."""
    if n & (n - 1) == 0:
        return min(n, max_lanes)
    if n % register_lanes == 0:
        lanes = register_lanes
        while lanes * 2 <= max_lanes and n % (lanes * 2) == 0:
            lanes *= 2
        return lanes
    if n > register_lanes:
        return 1 << (min(n, max_lanes).bit_length() - 1)
    return n  # less than a register: LLVM pads it


def plan_vector_loop(loop: For, register_lanes: int, max_lanes: int) -> VectorPlan | None:
    if not isinstance(loop.extent, Const):
        return None
    n = int(loop.extent.value)
    if n < 2 or not _legal(loop.body, loop.var):
        return None
    hint = dict(loop.annotations).get("vector_width")
    lanes = (
        hint if isinstance(hint, int) and hint > 1 else default_lanes(n, register_lanes, max_lanes)
    )
    lanes = min(lanes, n)
    return VectorPlan(lanes, n // lanes, n % lanes)


def _mentions(e: Expr | Stmt, var: Var) -> bool:
    return any(x == var for x in walk(e) if isinstance(x, Var))


def _legal(body: Stmt, var: Var) -> bool:
    stores: dict[str, set[Expr]] = {}
    ok = _check_stmt(body, var, stores)
    if not ok:
        return False
    for node in walk(body):
        if isinstance(node, Load) and node.buffer.name in stores:
            # Another lane's address: vectorizing would reorder a dependence.
            if simplify_expr(node.indices[0]) not in stores[node.buffer.name]:
                return False
        elif isinstance(node, Select) and _mentions(node.cond, var) and _loads(node):
            return False
    return True


def _loads(sel: Select) -> bool:
    return any(
        isinstance(x, Load) for side in (sel.true_value, sel.false_value) for x in walk(side)
    )


def _check_stmt(s: Stmt, var: Var, stores: dict[str, set[Expr]]) -> bool:
    if isinstance(s, SeqStmt):
        return all(_check_stmt(x, var, stores) for x in s.stmts)
    if isinstance(s, For):
        return s.kind != "parallel" and _check_stmt(s.body, var, stores)
    if isinstance(s, IfThenElse):
        if _mentions(s.cond, var):
            return False
        return _check_stmt(s.then_case, var, stores) and (
            s.else_case is None or _check_stmt(s.else_case, var, stores)
        )
    if isinstance(s, BufferStore):
        stride, _ = linear_in(s.indices[0], var)
        if stride is None:
            return False
        if stride == 0 and _mentions(s.value, var):
            return False
        stores.setdefault(s.buffer.name, set()).add(simplify_expr(s.indices[0]))
        return True
    if isinstance(s, Allocate):
        return False
    return False
