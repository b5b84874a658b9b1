"""The simplifier pass: constant folding, linear forms and range-aware rules.

Splits and fuses leave expressions such as `(i0 * 8 + i1) // 8` with `i1 < 8`; with
the ranges of the enclosing loops these fold to `i0`, and guards that always hold
disappear. Integer expressions of add/sub/mul-by-constant are rebuilt in one
canonical linear form (largest coefficient first, see :mod:`ir.arith`) so equal
indices print equal.
"""

from __future__ import annotations

import math

from ir import dtype as dt
from ir.arith import Bounds, bound, build_linear, linear_form
from ir.expr import Binary, Cast, Const, Expr, Select
from ir.node import Node, map_children
from ir.program import For, IfThenElse, Program, SeqStmt, Stmt, seq
from ir.visit import substitute

# ---------------------------------------------------------------------------
# Expressions


def simplify_expr(e: Expr, env: Bounds | None = None) -> Expr:
    env = env or {}

    def visit(n: Node) -> Node:
        n = map_children(n, visit)
        return _rule(n, env) if isinstance(n, Expr) else n

    return visit(e)  # type: ignore[return-value]


def _rule(e: Expr, env: Bounds) -> Expr:
    if isinstance(e, Cast) and isinstance(e.value, Const):
        v = e.value.value
        if dt.is_float(e.dtype):
            return Const(float(v), e.dtype)
        if dt.is_int(e.dtype) and dt.is_int(e.value.dtype):
            lo, hi = dt.min_value(e.dtype), dt.max_value(e.dtype)
            if lo <= int(v) <= hi:
                return Const(int(v), e.dtype)
        return e
    if isinstance(e, Select) and isinstance(e.cond, Const):
        return e.true_value if e.cond.value else e.false_value
    if not isinstance(e, Binary):
        return e
    a, b, op = e.a, e.b, e.op
    if op in ("and", "or"):
        for x, y in ((a, b), (b, a)):
            if isinstance(x, Const):
                if op == "and":
                    return y if x.value else Const(False, "bool")
                return Const(True, "bool") if x.value else y
        return e
    if not dt.is_int(a.dtype):
        return e
    if op in ("add", "sub", "mul"):
        lin = linear_form(e)
        if lin is not None:
            return build_linear(lin[0], lin[1], e.dtype)
        return e
    if op in ("floordiv", "floormod") and isinstance(b, Const) and b.value > 0:
        return _divmod(e, int(b.value), env)
    if op in ("max", "min"):
        ba, bb = bound(a, env), bound(b, env)
        if ba and bb:
            if ba[0] >= bb[1]:
                return a if op == "max" else b
            if bb[0] >= ba[1]:
                return b if op == "max" else a
        if isinstance(a, Const) and isinstance(b, Const):
            return Const(max(a.value, b.value) if op == "max" else min(a.value, b.value), a.dtype)
        return e
    if op in ("lt", "le", "gt", "ge", "eq", "ne"):
        diff = bound(simplify_expr(Binary("sub", a, b), env), env)
        if diff is not None:
            lo, hi = diff
            verdict = {
                "lt": (hi < 0, lo >= 0),
                "le": (hi <= 0, lo > 0),
                "gt": (lo > 0, hi <= 0),
                "ge": (lo >= 0, hi < 0),
                "eq": (lo == hi == 0, lo > 0 or hi < 0),
                "ne": (lo > 0 or hi < 0, lo == hi == 0),
            }[op]
            if verdict[0]:
                return Const(True, "bool")
            if verdict[1]:
                return Const(False, "bool")
    return e


def _divmod(e: Binary, c: int, env: Bounds) -> Expr:
    """(q*c + r) // c -> q + r // c and (q*c + r) % c -> r % c; r // c -> 0 when 0 <= r < c."""
    if c == 1:
        return e.a if e.op == "floordiv" else Const(0, e.dtype)
    lin = linear_form(e.a)
    if lin is None:
        return e
    terms, const = lin
    q_terms = {k: v // c for k, v in terms.items() if v % c == 0}
    r_terms = {k: v for k, v in terms.items() if v % c != 0}
    q_const, r_const = divmod(const, c)
    rest = build_linear(r_terms, r_const, e.dtype)
    rb = bound(rest, env)
    if rb is not None and rb[0] >= 0 and rb[1] < c:
        if e.op == "floordiv":
            return build_linear(q_terms, q_const, e.dtype)
        return rest
    if isinstance(e.a, Const):
        v = int(e.a.value)
        return Const(v // c if e.op == "floordiv" else v % c, e.dtype)
    nested = _nested_divmod(e, c, terms, const, env)
    if nested is not None:
        return nested
    if not q_terms and not q_const:
        return Binary(e.op, rest, e.b) if rest != e.a else e
    if e.op == "floormod":
        return Binary("floormod", rest, e.b)
    return Binary("add", build_linear(q_terms, q_const, e.dtype), Binary("floordiv", rest, e.b))


def _nested_divmod(e: Binary, c: int, terms: dict, const: int, env: Bounds) -> Expr | None:
    """(g*q + f) // c -> q // (c/g) and (g*q + f) % c -> (q % (c/g))*g + f, for g dividing c
    and 0 <= f < g: a row index split by 4 read through a layout of 64-row blocks."""
    for g in sorted({math.gcd(int(v), c) for v in terms.values()} - {1, c}, reverse=True):
        coarse = {k: v // g for k, v in terms.items() if v % g == 0}
        fine = build_linear({k: v for k, v in terms.items() if v % g}, const % g, e.dtype)
        fb = bound(fine, env)
        if not coarse or fb is None or fb[0] < 0 or fb[1] >= g:
            continue
        q = build_linear(coarse, const // g, e.dtype)
        outer = Const(c // g, e.dtype)
        if e.op == "floordiv":
            return simplify_expr(Binary("floordiv", q, outer), env)
        high = simplify_expr(Binary("floormod", q, outer), env)
        return simplify_expr(Binary("add", Binary("mul", high, Const(g, e.dtype)), fine), env)
    return None


# ---------------------------------------------------------------------------
# Statements


def simplify_stmt(s: Stmt, env: Bounds | None = None) -> Stmt | None:
    """Simplified statement, or None when it does nothing (a zero-trip loop, a false guard)."""
    env = dict(env or {})
    if isinstance(s, SeqStmt):
        parts = [x for x in (simplify_stmt(t, env) for t in s.stmts) if x is not None]
        return seq(*parts) if parts else None
    if isinstance(s, For):
        extent = simplify_expr(s.extent, env)
        if isinstance(extent, Const):
            if extent.value <= 0:
                return None
            if extent.value == 1 and s.kind != "vectorized" and not s.annotations:
                return simplify_stmt(substitute(s.body, {s.var: Const(0, s.var.dtype)}), env)  # type: ignore[arg-type]
            env[s.var] = (0, int(extent.value) - 1)
        body = simplify_stmt(s.body, env)
        if body is None:
            return None
        return For(s.var, extent, s.kind, body, s.annotations)
    if isinstance(s, IfThenElse):
        cond = simplify_expr(s.cond, env)
        if isinstance(cond, Const):
            branch = s.then_case if cond.value else s.else_case
            return None if branch is None else simplify_stmt(branch, env)
        then = simplify_stmt(s.then_case, env)
        other = simplify_stmt(s.else_case, env) if s.else_case is not None else None
        if then is None and other is None:
            return None
        if then is None:
            return IfThenElse(Binary("eq", cond, Const(False, "bool")), other)  # type: ignore[arg-type]
        return IfThenElse(cond, then, other)

    def visit(n: Node) -> Node:
        if isinstance(n, Expr):
            return simplify_expr(n, env)
        if isinstance(n, Stmt):
            out = simplify_stmt(n, env)
            return out if out is not None else SeqStmt(())
        return map_children(n, visit)

    return map_children(s, visit)


def simplify(program: Program) -> Program:
    from dataclasses import replace

    body = simplify_stmt(program.body)
    return replace(program, body=body if body is not None else SeqStmt(()))
