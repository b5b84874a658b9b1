"""Loop partitioning: imperfect tiles get a guard-free main loop and a guarded tail.

    for i_0 in range(171):                         for i_0 in range(170):
      for i_1 in unrolled(6):                 ->     for i_1 in unrolled(6): body        # no guard
        if i_0 * 6 + i_1 < 1024: body              for i_0 in range(1):
                                                     for i_1 in unrolled(6):
                                                       if i_0 * 6 + i_1 + 170 * 6 < 1024: body

An upper-bound guard `c * v + rest < N` (c > 0, rest bounded by the ranges of the
loops around and inside) holds for every v below some T; the loop over v is split
at T and each part re-simplified, which folds the guard away in the main part.
Splits and vector remainders then cost nothing inside the hot loop.
"""

from __future__ import annotations

from dataclasses import replace

from ir import dtype as dt
from ir.expr import Binary, Const, Expr, Var
from ir.lower.simplify import _linear, bound, simplify_stmt
from ir.node import walk
from ir.program import For, IfThenElse, Program, SeqStmt, Stmt, seq
from ir.visit import substitute

Ranges = dict[Var, tuple[int, int]]


def partition_loops(program: Program) -> Program:
    return replace(program, body=_part(program.body, {}))


def _part(s: Stmt, env: Ranges) -> Stmt:
    if isinstance(s, SeqStmt):
        return seq(*(_part(x, env) for x in s.stmts))
    if isinstance(s, For):
        if isinstance(s.extent, Const):
            n = int(s.extent.value)
            t = _split_point(s, env)
            if t is not None and 0 < t < n:
                main = For(s.var, Const(t, "int64"), s.kind, s.body, s.annotations)
                shifted = substitute(s.body, {s.var: s.var + t})
                tail = For(s.var, Const(n - t, "int64"), s.kind, shifted, s.annotations)  # type: ignore[arg-type]
                parts = [simplify_stmt(p, env) for p in (main, tail)]
                return seq(*(_part(p, env) for p in parts if p is not None))
            inner = dict(env)
            inner[s.var] = (0, n - 1)
            return replace(s, body=_part(s.body, inner))
        return replace(s, body=_part(s.body, env))
    if isinstance(s, IfThenElse):
        then = _part(s.then_case, env)
        other = _part(s.else_case, env) if s.else_case is not None else None
        return IfThenElse(s.cond, then, other)
    from ir.program import Allocate

    if isinstance(s, Allocate):
        return replace(s, body=_part(s.body, env))
    return s


def _split_point(loop: For, env: Ranges) -> int | None:
    """The number of leading iterations for which every upper-bound guard on `loop` holds."""
    ranges = dict(env)
    for n in walk(loop.body):
        if isinstance(n, For) and isinstance(n.extent, Const):
            ranges[n.var] = (0, int(n.extent.value) - 1)
    best: int | None = None
    for n in walk(loop.body):
        if isinstance(n, IfThenElse):
            for cond in _conjuncts(n.cond):
                t = _guard_limit(cond, loop.var, ranges)
                if t is not None:
                    best = t if best is None else min(best, t)
    return best


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, Binary) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _guard_limit(cond: Expr, var: Var, ranges: Ranges) -> int | None:
    if not isinstance(cond, Binary) or cond.op not in ("lt", "le") or not dt.is_int(cond.a.dtype):
        return None
    lin = _linear(cond.a - cond.b)
    if lin is None:
        return None
    terms, const = lin
    c = terms.pop(var, 0)
    if c <= 0 or any(var in walk(atom) for atom in terms):
        return None
    hi = const
    for atom, coeff in terms.items():
        rng = bound(atom, ranges)
        if rng is None:
            return None
        hi += max(coeff * rng[0], coeff * rng[1])
    # c * v + hi < 0 (lt) or <= 0 (le)  <=>  v < (-hi) / c  (resp. v <= -hi / c)
    limit = -hi if cond.op == "le" else -hi - 1
    return max(0, limit // c + 1)
